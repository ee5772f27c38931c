"""The local build's SBOM and provenance: what only the engine knows (dpkg's packages in the
built image, the base image's id, the BuildKit client's version), then attached to the pushed
image at the registry (release/attested.py)."""

from __future__ import annotations

import dataclasses
import fnmatch

from gpurl_tasks import git, proc
from gpurl_tasks.attest.sbom import CompiledWheel, apt_packages_from_dpkg
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.wheels import configured_globs, pins_from_args
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.builder import BuildResult
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.rebuild.wheelhouse import read_wheelhouse
from gpurl_tasks.release.attested import BuildContext, attach_attestations
from gpurl_tasks.release.configured import client_settings

__all__ = ["DPKG_FORMAT", "apt_command", "attest_build"]

DPKG_FORMAT = "${Package}\\t${Version}\\t${Architecture}\\n"


def apt_command(client: str, reference: str) -> list[str]:
    """dpkg's packages as installed in the built image (its own dpkg-query, its own status)."""
    return [client, "run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", reference,
            "-W", "-f", DPKG_FORMAT]


def _wheels(config: Config) -> tuple[CompiledWheel, ...]:
    """The wheelhouse's wheels the image installs (its configured globs)."""
    if not config.build.wheelhouse.is_dir():
        return ()
    globs = configured_globs(config.build, {}, pins_from_args({}, config.build, config.target))
    return tuple(CompiledWheel(filename=w.filename, sha256=w.sha256 or "")
                 for w in read_wheelhouse(config.build.wheelhouse)
                 if w.present and w.sha256 and any(fnmatch.fnmatch(w.filename, g) for g in globs))


def _base_image(config: Config, client: str) -> str:
    """The base image by its image id (a local base has no registry digest)."""
    found = proc.run([client, "image", "inspect", "--format", "{{.Id}}", config.build.base_image],
                     check=False, echo=None)
    image_id = found.stdout.strip()
    return f"{config.build.base_image}@{image_id}" if image_id.startswith("sha256:") \
        else config.build.base_image


def _commit(config: Config, tag: str) -> str:
    """The full commit the image was built from, with the tag's `-dirty-<hash>` when the tree
    had uncommitted edits (the source id, spelled in full)."""
    head = git.resolve_commit(git.toplevel(config.root), "HEAD")
    source = tag.removeprefix(config.registry.tag_prefix + "-")
    return head + source[source.index("-dirty-"):] if "-dirty-" in source else head


def attest_build(config: Config, built: BuildResult, *, client: str) -> tuple[BuildResult, str]:
    """Read what the SBOM needs from the engine and attach both documents to the image."""
    apt = apt_packages_from_dpkg(proc.run(apt_command(client, built.reference), echo=None).stdout)
    version = proc.run([client, "version", "--format", "{{.Client.Version}}"], check=False,
                       echo=None).stdout.strip() or "unknown"
    ref = parse_reference(built.reference)
    with open_client(client_settings(config), ref) as registry:
        image = registry.pull(dataclasses.replace(ref, digest=built.digest))
        image = dataclasses.replace(image, ref=ref)
        context = BuildContext(apt=apt, wheels=_wheels(config),
                               base_image=_base_image(config, client),
                               builder=f"buildkit (docker client {version})",
                               invocation=f"local:{image.config_digest}",
                               commit=_commit(config, ref.tag or ""))
        attached = attach_attestations(config, image, registry, context)
    where = attached[0].via if attached else "?"
    return built, (f"SBOM ({len(apt)} apt packages) and provenance attached to "
                   f"{built.digest[:19]} ({where})")
