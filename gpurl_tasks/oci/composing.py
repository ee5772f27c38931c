"""The orchestration's registry (writer/orchestration.py's `Registry`) on the local path:
gpurl's own client. Records live in the cache repository; the composed image goes to
`target`'s repository, its layers mounted there from the cache (no bytes move) and its
config pushed before its manifest."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.writer.composition import Composition
from gpurl_tasks.writer.orchestration import Slot, StagedSlice

__all__ = ["ClientRegistry"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientRegistry:
    """`client` on the cache repository `cache` and the composed image's `target`."""

    client: RegistryClient
    cache: ImageRef
    target: ImageRef

    @property
    def composed_repository(self) -> str:
        return f"{self.target.host}/{self.target.repository}"

    def _at(self, reference: str) -> ImageRef:
        if reference.startswith("sha256:"):
            return dataclasses.replace(self.cache, tag=None, digest=reference)
        return dataclasses.replace(self.cache, tag=reference, digest=None)

    def lookup(self, tag: str) -> str | None:
        return self.client.lookup(self._at(tag))

    def manifest(self, reference: str) -> Mapping[str, Any]:
        return self.client.manifest(self._at(reference))[2]

    def blob_json(self, digest: str) -> Mapping[str, Any] | None:
        try:
            return self.client.blob_json(self.cache, digest)
        except ManifestUnknown:
            return None

    def has_blob(self, digest: str, *, composed: bool = False) -> bool:
        return self.client.has_blob(self.target if composed else self.cache, digest)

    def push_record(self, slot: Slot, manifest: bytes, config: bytes, staged: StagedSlice,
                    *, lost: bool) -> None:
        """The blob (uploaded unless the registry holds it, so a lost one is uploaded
        whatever `lost` says), the config, then the manifest."""
        ref = self._at(slot.tag)
        self.client.push_blob(ref, staged.path, staged.blob.digest)
        self.client.push_blob(ref, config)
        self.client.put_manifest(ref, slot.tag, manifest, str(json.loads(manifest)["mediaType"]))

    def gather(self, composition: Composition) -> None:
        for blob in composition.layers:
            self.client.mount_blob(self.target, blob, self.cache.repository)
        self.client.push_blob(self.target, composition.config)

    def push_composed(self, composition: Composition) -> str:
        digest = self.client.put_manifest(self.target, composition.tag, composition.manifest,
                                          composition.media_type)
        return f"{self.target.name}@{digest}"
