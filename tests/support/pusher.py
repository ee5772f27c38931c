"""Push images through the registry API itself (no Docker engine): blobs, configs, manifests.

Written independently of gpurl_tasks.registry on purpose, so the client under test never
checks its own output. Layers are real gzip'd tar archives (or, for the oversized layer, a
stream of repeated bytes uploaded in chunks so nothing large is ever held in memory).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import random
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence

import httpx

__all__ = [
    "LayerSpec",
    "PushedImage",
    "push_image",
    "push_index",
    "random_layer",
    "repeated_layer",
    "tar_gz_layer",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """A layer's bytes (as chunks, possibly lazy), its digest and size, and its instruction."""

    chunks: Sequence[bytes] | None
    digest: str
    size: int
    created_by: str
    chunk_factory: object = None  # a zero-argument callable returning an iterator of chunks

    def iter_chunks(self) -> Iterator[bytes]:
        if self.chunks is not None:
            yield from self.chunks
        else:
            yield from self.chunk_factory()  # type: ignore[operator]


def tar_gz_layer(files: Mapping[str, bytes], created_by: str) -> LayerSpec:
    """A real layer: a gzip'd tar holding `files`, deterministic (mtime 0)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = gzip.compress(raw.getvalue(), mtime=0)
    return LayerSpec([blob], "sha256:" + hashlib.sha256(blob).hexdigest(), len(blob), created_by)


def random_layer(size: int, created_by: str, *, seed: int) -> LayerSpec:
    """A tar.gz of incompressible bytes: its compressed size is close to `size`."""
    data = random.Random(seed).randbytes(size)
    return tar_gz_layer({f"data/{seed}.bin": data}, created_by)


def repeated_layer(size: int, created_by: str, *, chunk: int = 4 * 2**20) -> LayerSpec:
    """An oversized layer of repeated bytes, streamed: cheap to make at any size."""
    pattern = bytes(range(256)) * (chunk // 256)

    def chunks() -> Iterator[bytes]:
        left = size
        while left > 0:
            piece = pattern[: min(len(pattern), left)]
            left -= len(piece)
            yield piece

    digest = hashlib.sha256()
    for piece in chunks():
        digest.update(piece)
    return LayerSpec(None, "sha256:" + digest.hexdigest(), size, created_by, chunks)


@dataclasses.dataclass(frozen=True)
class PushedImage:
    manifest_digest: str
    config_digest: str
    layers: tuple[LayerSpec, ...]
    manifest: bytes


def _upload(client: httpx.Client, base: str, repo: str, chunks: Iterable[bytes],
            digest: str) -> None:
    head = client.head(f"{base}/v2/{repo}/blobs/{digest}")
    if head.status_code == 200:
        return
    start = client.post(f"{base}/v2/{repo}/blobs/uploads/")
    start.raise_for_status()
    location = httpx.URL(base).join(start.headers["Location"])
    offset = 0
    for piece in chunks:
        answer = client.patch(location, content=piece, headers={
            "Content-Type": "application/octet-stream",
            "Content-Range": f"{offset}-{offset + len(piece) - 1}",
        })
        answer.raise_for_status()
        offset += len(piece)
        location = httpx.URL(base).join(answer.headers["Location"])
    done = client.put(location.copy_merge_params({"digest": digest}))
    done.raise_for_status()


def push_image(
    base: str,
    repo: str,
    layers: Sequence[LayerSpec],
    *,
    tag: str | None,
    labels: Mapping[str, str] | None = None,
    empty_history: Sequence[tuple[int, str]] = (),
    media_type: str = OCI_MANIFEST,
    architecture: str = "amd64",
) -> PushedImage:
    """Push layers, a config (labels, history) and a manifest; `empty_history` inserts
    (position, created_by) entries with empty_layer=true, as ENV/LABEL/WORKDIR make."""
    with httpx.Client(timeout=120) as client:
        for layer in layers:
            _upload(client, base, repo, layer.iter_chunks(), layer.digest)
        history: list[dict[str, object]] = [{"created_by": layer.created_by} for layer in layers]
        for position, created_by in sorted(empty_history, reverse=True):
            history.insert(position, {"created_by": created_by, "empty_layer": True})
        config = json.dumps({
            "architecture": architecture, "os": "linux",
            "config": {"Labels": dict(labels or {})},
            "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
            "history": history,
        }, sort_keys=True).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        _upload(client, base, repo, [config], config_digest)
        config_type = ("application/vnd.oci.image.config.v1+json" if media_type == OCI_MANIFEST
                       else "application/vnd.docker.container.image.v1+json")
        layer_type = (LAYER_GZIP if media_type == OCI_MANIFEST
                      else "application/vnd.docker.image.rootfs.diff.tar.gzip")
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": media_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": layer_type, "digest": layer.digest, "size": layer.size}
                       for layer in layers],
        }, indent=1).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        answer = client.put(f"{base}/v2/{repo}/manifests/{tag or digest}", content=manifest,
                            headers={"Content-Type": media_type})
        answer.raise_for_status()
    return PushedImage(digest, config_digest, tuple(layers), manifest)


def push_index(base: str, repo: str, images: Mapping[str, PushedImage], *, tag: str,
               media_type: str = OCI_INDEX) -> str:
    """Push an index over already pushed images keyed by "os/arch[/variant]"; returns its digest."""
    entries = []
    for platform, image in images.items():
        parts = platform.split("/")
        plat: dict[str, str] = {"os": parts[0], "architecture": parts[1]}
        if len(parts) > 2:
            plat["variant"] = parts[2]
        sub_type = json.loads(image.manifest)["mediaType"]
        entries.append({"mediaType": sub_type, "digest": image.manifest_digest,
                        "size": len(image.manifest), "platform": plat})
    index = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries},
                       indent=1).encode()
    with httpx.Client(timeout=30) as client:
        answer = client.put(f"{base}/v2/{repo}/manifests/{tag}", content=index,
                            headers={"Content-Type": media_type})
        answer.raise_for_status()
    return "sha256:" + hashlib.sha256(index).hexdigest()
