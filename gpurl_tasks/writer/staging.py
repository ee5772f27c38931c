"""The staging install of one slice (pure: uv's words and shell text): what the local path's
staging container and the cluster job's composing build (writer/job.py) run before the
writer tars the result."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CROSS_GLIBC", "build_env_command", "build_env_path", "build_env_script",
           "cross_platform", "install_command", "no_isolation_args", "python_platform"]

# The manylinux glibc versions uv 0.13's --python-platform names for x86_64 and aarch64
# (`uv pip install --help`): 2.17 and 2.28, then every one from 2.31 to 2.40.
CROSS_GLIBC = ("2.17", "2.28", *(f"2.{n}" for n in range(31, 41)))


def python_platform(arch: str, glibc: str) -> str:
    """uv's `--python-platform` for a Linux target: `ARCH-manylinux_2_NN`, the wheels an
    interpreter of `arch` on glibc `glibc` would take (ValueError when uv names none)."""
    if arch not in ("x86_64", "aarch64") or glibc not in CROSS_GLIBC:
        raise ValueError(f"uv stages no {arch} glibc {glibc} target (--python-platform knows "
                         f"x86_64 and aarch64 on glibc {', '.join(CROSS_GLIBC)})")
    return f"{arch}-manylinux_{glibc.replace('.', '_')}"


def cross_platform(*, arch: str, glibc: str, machine: str) -> str | None:
    """uv's --python-platform for staging a target.arch `arch` slice on `machine` (what the
    staging image's probe says), None when they are one machine: a native staging install
    takes the tags uv reads from the interpreter, as it always has, so an x86_64 slice staged
    on x86_64 is written exactly as before."""
    return None if arch == machine else python_platform(arch, glibc)


def install_command(*, prefix: str, venv: str, slice_file: str,
                    build_args: Sequence[str] = (), platform: str | None = None,
                    hashed: bool = True) -> list[str]:
    """The staging install of one slice: its files laid out as they sit in `venv`, under
    `prefix` (the local path's staging container and the cluster job's script run it);
    `build_args` are the slice's `no_isolation_args`. `platform` (`python_platform`) stages
    the wheels of another machine than the one running uv; the interpreter named still gives
    the layout and the shebangs, so the files are those a native install lays out.
    `hashed`: every line carries a hash (`Layer.hashed`); uv refuses a line without one under
    --require-hashes (a git source, a wheel its index serves unhashed), and checks the hashes
    a line lists without it."""
    cross = ["--python-platform", platform] if platform else []
    return ["uv", "pip", "install", "--no-deps", *(["--require-hashes"] if hashed else []),
            "--no-installer-metadata", *build_args, *cross, "--prefix", prefix,
            "--python", f"{venv}/bin/python", "-r", slice_file]


def no_isolation_args(names: Sequence[str]) -> list[str]:
    """The lock's `no-build-isolation-package` settings for a slice's packages, as uv's flags."""
    return [w for name in names for w in ("--no-build-isolation-package", name)]


def build_env_command(*, prefix: str, venv: str, slice_file: str) -> list[str]:
    """The install of one slice below a slice staged on them, into the scratch `prefix` (see
    `build_env_script`): no --require-hashes (a git slice has no hash; the hashes listed are
    still checked)."""
    return ["uv", "pip", "install", "--no-deps", "--no-installer-metadata",
            "--prefix", prefix, "--python", f"{venv}/bin/python", "-r", slice_file]


def build_env_path(prefix: str) -> str:
    """PYTHONPATH for a slice's install staged on the slices below it: their scratch
    `prefix`'s site-packages (a shell glob; `build_env_script` expands it)."""
    return f"{prefix}/lib/python*/site-packages"


def build_env_script(*, prefix: str, venv: str, files: str) -> str:
    """Shell that installs the slices below one slice (`files`: their slice files, as shell
    words) into the scratch `prefix` and puts it on PYTHONPATH, so the slice's sdists build
    against the packages the environment holds under it (plan/buildenv.py); `prefix` never
    reaches the layer. One install per file: each names its own index, and uv refuses two
    `--index-url`s in one install. No --require-hashes (a git slice has no hash; the hashes
    listed are still checked). Its status is non-zero when one install fails."""
    install = build_env_command(prefix=prefix, venv=venv, slice_file='"$lower"')
    return (f'{{ built=0; for lower in {files}; do {" ".join(install)} >&2 '
            '|| { built=1; break; }; done; [ "$built" = 0 ]; } && '
            f'PYTHONPATH="$(echo {build_env_path(prefix)})" && export PYTHONPATH')
