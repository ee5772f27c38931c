"""The environment image from env-base and written slice layers (pure: documents in, out)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.image import Descriptor, PulledImage, parse_config, parse_manifest
from gpurl_tasks.oci.layer import slice_key
from gpurl_tasks.oci.layered import (
    BaseImage,
    WrittenSlice,
    compose_written,
    slice_image,
    written_slice,
)
from gpurl_tasks.oci.verify import layer_instructions

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def _d(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _base() -> BaseImage:
    """env-base as a registry holds it: three layers, an ENV between them."""
    layers = ["rootfs", "apt", "venv"]
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/opt/venv/bin"], "WorkingDir": "/app"},
              "rootfs": {"type": "layers", "diff_ids": [_d("diff-" + x) for x in layers]},
              "history": [{"created_by": "RUN rootfs"},
                          {"created_by": "ENV PATH=/opt/venv/bin", "empty_layer": True},
                          {"created_by": "RUN apt"}, {"created_by": "RUN uv venv /opt/venv"}]}
    blob = json.dumps(config).encode()
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "size": len(blob), "digest": _d(blob.decode())},
                "layers": [{"mediaType": LAYER, "size": 10 + i, "digest": _d(x)}
                           for i, x in enumerate(layers)]}
    return BaseImage.from_documents(manifest, config)


def _written(name: str, media_type: str = LAYER) -> WrittenSlice:
    return WrittenSlice(name=name, layer=Descriptor(media_type=media_type, digest=_d(name),
                                                    size=len(name) * 1000),
                        diff_id=_d("diff-" + name),
                        created_by=f"gpurl: uv pip install -r /tmp/gpurl-layers/{name}.txt")


def test_the_image_is_env_base_then_each_slice_in_order() -> None:
    base = _base()
    slices = [_written("torch"), _written("lxml"), _written("tail")]
    composed = compose_written(base, slices)
    manifest = parse_manifest(json.loads(composed.manifest_bytes), "composed")
    assert [d.digest for d in manifest.layers] == [
        *(d.digest for d in base.manifest.layers), *(s.layer.digest for s in slices)]
    assert manifest.media_type == MANIFEST and all(d.media_type == LAYER
                                                   for d in manifest.layers)
    config: dict[str, Any] = json.loads(composed.config)
    assert manifest.config_digest == "sha256:" + hashlib.sha256(composed.config).hexdigest()
    assert config["rootfs"]["diff_ids"] == [*base.diff_ids, *(s.diff_id for s in slices)]
    assert config["config"] == base.config["config"]
    # verify-layers maps every layer to its instruction, each slice to its install
    image = PulledImage(ref=parse_reference("127.0.0.1:5005/gpurl/demo:env"), top_digest="",
                        top_media_type=MANIFEST, manifest_digest="", layers=manifest.layers,
                        history=parse_config(config, "c").history, labels={},
                        config_digest=manifest.config_digest)
    made, note = layer_instructions(image)
    assert note is None and made[3:] == [s.created_by for s in slices]
    assert compose_written(base, slices) == composed  # deterministic
    assert compose_written(base, slices[::-1]).manifest_bytes != composed.manifest_bytes


def test_a_slice_of_another_layer_type_is_refused() -> None:
    oci = "application/vnd.oci.image.layer.v1.tar+gzip"
    with pytest.raises(RegistryError, match=r"slice torch is a .* layer"):
        compose_written(_base(), [_written("torch", oci)])
    with pytest.raises(RegistryError, match="no slice layers"):
        compose_written(_base(), [])


def test_a_cached_slice_reads_back_as_written() -> None:
    written = _written("torch")
    platform = {"architecture": "amd64", "os": "linux"}
    manifest, config = slice_image(written, media_type=MANIFEST, platform=platform)
    assert slice_image(written, media_type=MANIFEST, platform=platform) == (manifest, config)
    back = written_slice("torch", json.loads(manifest), json.loads(config))
    assert back == written
    assert json.loads(manifest)["config"]["digest"] == \
        "sha256:" + hashlib.sha256(config).hexdigest()
    two = json.loads(manifest)
    two["layers"] *= 2
    with pytest.raises(RegistryError, match="not a one-layer image"):
        written_slice("torch", two, json.loads(config))


_KEY = {"label": "group-04", "slice_text": b"six==1.17.0 --hash=sha256:00\n",
        "python": "3.11.2", "venv": "/opt/venv", "uv": "uv 0.13.9",
        "compressor": "gpurl-layer-1 zlib 1.2.13 level 6"}


@given(field=st.sampled_from(sorted(_KEY)), other=st.text(min_size=1, max_size=20))
def test_the_key_changes_with_every_input(field: str, other: str) -> None:
    """Every input the blob depends on is in the key (and nothing else: env-base's image id
    and the slice's position are not even parameters)."""
    value = other.encode() if field == "slice_text" else other
    if value == _KEY[field]:
        return
    changed = slice_key(**{**_KEY, field: value})  # type: ignore[arg-type]
    assert changed != slice_key(**_KEY)  # type: ignore[arg-type]
    assert slice_key(**_KEY) == slice_key(**dict(_KEY))  # type: ignore[arg-type]
    assert slice_key(**_KEY).startswith("slice-group-04-")  # type: ignore[arg-type]
