"""A build whose inputs equal a pushed image's: found by its inputs tag, checked, then tagged.

Every push records its image under `inputs-<key>` (rebuild/inputs_key.py) in the image's own
repository: there the manifest's blobs already are, so tagging it again pushes no layer, and a
cache repository's cleanup cannot orphan the tag. `invoke build` (both paths) asks for the tag
before any executor runs; an image found there is trusted only when its manifest, its config
and every layer blob are in the registry and its labels name the same generated config, lock
and plan as this build's Dockerfile. Then a statement that this build put the immutable tag
there is attached (attest/sameinputs.py: verify-layers reads it, as the image's provenance
names the commit it was built from), and the immutable tag and the floating one when asked are
put on its digest; nothing is built or pushed. An immutable tag that already holds another
image is never moved here: the build goes on, under the rule as always (oci/tags.py: the same
image pushes nothing, another is refused unless `--force`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpurl_tasks.attest import sameinputs
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.provenance import (
    LABEL_CONFIG_HASH,
    LABEL_LOCK_HASH,
    LABEL_PLAN_FINGERPRINT,
    label_value,
)
from gpurl_tasks.errors import ExitCode, GpurlError, RegistryError
from gpurl_tasks.files import read_text
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.referrers import attach
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.rebuild.inputs import BuildInputs
from gpurl_tasks.rebuild.inputs_key import inputs_tag
from gpurl_tasks.release.configured import client_settings

__all__ = ["Reused", "expected_labels", "find_recorded", "record", "reuse_pushed"]

Say = Callable[[str], None]
# the labels that name what the image was generated from (its GITSHA is not an input)
INPUT_LABELS = (LABEL_CONFIG_HASH, LABEL_LOCK_HASH, LABEL_PLAN_FINGERPRINT)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reused:
    """`invoke build`'s outcome when an image of the same inputs was already pushed."""

    reference: str  # the immutable tag, now on `digest`
    digest: str
    inputs_tag: str
    floating: str | None
    seconds: float
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        floating = f" and {self.floating}" if self.floating else ""
        return (f"==> no input changed since {self.digest}: tagged {self.reference}{floating} "
                f"(no executor ran, {self.seconds:.1f} s)")

    def to_json(self) -> dict[str, Any]:
        return {"reused": True, "reference": self.reference, "digest": self.digest,
                "inputs_tag": self.inputs_tag, "floating": self.floating, "pushed": False,
                "seconds": round(self.seconds, 2)}


def expected_labels(dockerfile: str) -> dict[str, str]:
    """The input labels this build's Dockerfile gives its image (those it carries)."""
    found = {key: label_value(dockerfile, key) for key in INPUT_LABELS}
    return {key: value for key, value in found.items() if value is not None}


def find_recorded(client: RegistryClient, image: ImageRef, key: str, labels: Mapping[str, str],
                  platform: str) -> tuple[str | None, str]:
    """(digest, "") of the image recorded under `key`, checked; (None, "") when none is
    recorded; (None, why) when one is and cannot be trusted (a build follows)."""
    tagged = dataclasses.replace(image, tag=inputs_tag(key), digest=None)
    digest = client.lookup(tagged)
    if digest is None:
        return None, ""
    at = image.with_digest(digest)
    try:
        pulled = client.pull(at, platform=platform)
        blobs = (pulled.config_digest, *(layer.digest for layer in pulled.layers))
        missing = [d for d in blobs if not client.has_blob(at, d, push=False)]
    except RegistryError as exc:
        return None, f"{tagged.tag} names {digest[:19]}, which cannot be read ({exc.message})"
    if missing:
        return None, (f"{tagged.tag} names {digest[:19]}, but the registry lacks {len(missing)} "
                      f"of its {len(blobs)} blobs ({missing[0][:19]} ...)")
    differ = sorted(k for k, v in labels.items() if pulled.labels.get(k) != v)
    if differ:
        return None, (f"{tagged.tag} names {digest[:19]}, whose labels {', '.join(differ)} "
                      "differ from this build's")
    return digest, ""


def _put_tags(client: RegistryClient, image: ImageRef, digest: str, immutable: str,
              floating: str | None, inputs: str) -> str:
    """The same-inputs statement for the immutable tag (attest/sameinputs.py: the image's
    provenance names the commit it was built from, the tag this one), then the immutable tag,
    then the floating one, on `digest`; "" when done, else why not: an immutable tag that
    holds another image is never moved here (the build that follows applies the rule as
    always: the same image pushes nothing, another one is refused). The statement goes first,
    so a tag this puts never stands without it; a tag already on `digest` is left as it is."""
    held = client.lookup(dataclasses.replace(image, tag=immutable, digest=None))
    if held is not None and held != digest:
        return f"{image.name}:{immutable} already holds {held[:19]}, not this image"
    if held is None:
        attach(client, image, client.descriptor(image, digest), sameinputs.MEDIA_TYPE,
               sameinputs.statement(name=image.name, digest=digest, tag=immutable,
                                    inputs_tag=inputs), sameinputs.DESCRIPTION)
        client.tag_manifest(image, digest, immutable)
    if floating is not None and client.lookup(
            dataclasses.replace(image, tag=floating, digest=None)) != digest:
        client.tag_manifest(image, digest, floating)
    return ""


def reuse_pushed(config: Config, inputs: BuildInputs, *, reference: str, floating: str | None,
                 dry_run: bool, say: Say, env: Mapping[str, str] | None = None,
                 lookup: Callable[[str], str | None] | None = None) -> Reused | None:
    """The image of `inputs`, tagged `reference` (and `floating`), or None: build it. A lookup
    that cannot run (registry unreachable, refused credentials) and a recorded image that
    cannot be trusted each say why in one line and answer None. A dry run touches no registry:
    it says what it would look up. `lookup` stands in for the registry's answer to the inputs
    tag (None: ask it)."""
    start = time.monotonic()
    image = parse_reference(config.registry.image, default_host=config.registry.host, bare=True)
    tag = inputs_tag(inputs.key)
    if dry_run:
        say(f"note: first looks up {config.registry.image}:{tag}: an image found there (and "
            f"checked) is tagged {reference} instead of built"
            + (f"; {inputs.base_note}" if inputs.base_note else ""))
        return None
    if lookup is not None and lookup(f"{config.registry.image}:{tag}") is None:
        return None
    labels = expected_labels(read_text(config.build.dockerfile, what="Dockerfile"))
    try:
        # one try per request: a registry that does not answer at once is not waited for
        # (the build asks it again, with its retries)
        once = dataclasses.replace(client_settings(config), attempts=1)
        with open_client(once, image, env) as client:
            digest, why = find_recorded(client, image, inputs.key, labels,
                                        config.target.platform)
            if digest is None:
                if why:
                    say(f"note: building: {why}")
                return None
            why = _put_tags(client, image, digest, parse_reference(reference).tag or "",
                            parse_reference(floating).tag if floating else None, tag)
            if why:
                say(f"note: building: {why}")
                return None
    except GpurlError as exc:
        say(f"note: building: the inputs tag could not be looked up ({exc.message})")
        return None
    if inputs.base_note:
        say(f"note: {inputs.base_note}")
    return Reused(reference=reference, digest=digest, inputs_tag=tag, floating=floating,
                  seconds=time.monotonic() - start)


def record(config: Config, inputs: BuildInputs, digest: str,
           env: Mapping[str, str] | None = None) -> str:
    """Tag the pushed `digest` `inputs-<key>`: the next build of the same inputs finds it."""
    image = parse_reference(config.registry.image, default_host=config.registry.host, bare=True)
    tag = inputs_tag(inputs.key)
    with open_client(client_settings(config), image, env) as client:
        client.tag_manifest(image, digest, tag)
    return f"{config.registry.image}:{tag}"
