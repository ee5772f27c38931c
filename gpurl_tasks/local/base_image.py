"""The base image of local builds: present, pulled, or made here with debootstrap.

Docker Hub is unreachable from these machines, so on Debian we build a bookworm image from
the Debian mirror apt already uses: `debootstrap --variant=minbase` into a directory, then
`tar -C DIR -c . | docker import`. One image serves every stage, like the CUDA *devel* base
of the gpu-rl image: python3 (3.11) with venv and pip for the runtime stage's uv install, and
gcc + python3-dev for a `wheel-builder` stage that compiles a C extension.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpurl_tasks import proc
from gpurl_tasks.errors import BuildError

__all__ = [
    "BASE_PACKAGES",
    "DEFAULT_MIRROR",
    "IMPORT_CHANGES",
    "debian_mirror",
    "debootstrap_import",
    "image_id",
    "parse_mirror",
    "try_pull",
]

BASE_PACKAGES = (
    "ca-certificates",
    "python3",
    "python3-venv",
    "python3-pip",
    "python3-dev",
    "gcc",
    "libc6-dev",
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# `docker import` makes an image with no config at all; give it what a Debian image has.
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["bash"]',
)


def parse_mirror(texts: Iterable[str], suite: str = "bookworm") -> str | None:
    """The first mirror serving `suite` main, from one-line and deb822 apt sources texts."""
    for text in texts:
        for line in text.splitlines():  # one-line format: deb [opts] URI SUITE COMPONENTS...
            fields = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(fields) >= 4 and fields[0] == "deb" and fields[2] == suite \
                    and "main" in fields[3:]:
                return fields[1].rstrip("/")
        for block in re.split(r"\n\s*\n", text):  # deb822: Types/URIs/Suites/Components
            keys: dict[str, list[str]] = {}
            for line in block.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    key, _, value = line.partition(":")
                    keys[key.strip().lower()] = value.split()
            if "deb" in keys.get("types", []) and suite in keys.get("suites", []) \
                    and "main" in keys.get("components", []) and keys.get("uris"):
                return keys["uris"][0].rstrip("/")
    return None


def debian_mirror(etc_apt: Path = Path("/etc/apt"), suite: str = "bookworm") -> str:
    """The mirror this machine's apt uses for `suite`, else deb.debian.org."""
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list")),
             *sorted((etc_apt / "sources.list.d").glob("*.sources"))]
    texts = [f.read_text(errors="replace") for f in files if f.is_file()]
    return parse_mirror(texts, suite) or DEFAULT_MIRROR


def image_id(client: str, name: str) -> str | None:
    """The local image id of `name`, or None when the engine does not have it."""
    done = proc.run_quiet([client, "image", "inspect", "--format", "{{.Id}}", name], check=False,
                       timeout=60)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def try_pull(client: str, name: str) -> str | None:
    """Pull `name`; None on success, else the engine's one-line reason."""
    done = proc.run_quiet([client, "pull", "--quiet", name], check=False, timeout=600)
    if done.returncode == 0:
        return None
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"


def debootstrap_import(
    client: str,
    name: str,
    *,
    mirror: str,
    suite: str = "bookworm",
    packages: Iterable[str] = BASE_PACKAGES,
    workdir: Path | None = None,
) -> str:
    """debootstrap `suite` with `packages` and `docker import` it as `name`; the image id."""
    debootstrap = proc.require("debootstrap", hint="apt-get install debootstrap")
    if os.geteuid() != 0:
        raise BuildError("debootstrap needs root", hint=f"run as root or provide {name} yourself")
    with tempfile.TemporaryDirectory(prefix="gpurl-rootfs-", dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        proc.run_quiet([debootstrap, "--variant=minbase", f"--include={','.join(packages)}",
                     suite, root, mirror], timeout=1800)
        for node in (root / "dev").iterdir():  # the engine provides /dev; keep no device nodes
            if not node.is_dir() or node.is_symlink():
                node.unlink()
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            target = root / leftover
            if target.is_dir():
                for item in target.iterdir():
                    if item.is_file():
                        item.unlink()
        changes = [arg for change in IMPORT_CHANGES for arg in ("--change", change)]
        try:
            proc.pipe([proc.require("tar"), "-C", str(root), "-c", "."],
                      [client, "import", *changes, "-", name], timeout=1200)
        except proc.CommandFailed as exc:
            raise BuildError(f"docker import of {name} failed: {exc.message}", hint=exc.hint) from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
    found = image_id(client, name)
    if found is None:
        raise BuildError(f"{name} is missing right after docker import",
                         hint="the engine lost the image: run `invoke setup-local` again")
    return found
