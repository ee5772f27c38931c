"""Composing the environment image from slice images (pure: documents in, documents out)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.oci.compose import SliceImage, compose, composed_tag
from gpurl_tasks.oci.image import parse_config, parse_diff_ids, parse_manifest
from gpurl_tasks.plan.model import Slice

LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _d(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _slice(name: str, base: tuple[str, ...] = ("rootfs", "apt", "venv")) -> SliceImage:
    """A slice image as BuildKit pushes one: env-base's layers (an ENV between them is an
    empty-layer history entry), the COPY of the slice file, its install."""
    layers = [*base, f"copy-{name}", f"install-{name}"]
    history: list[dict[str, Any]] = [{"created_by": f"RUN {base[0]}"},
                                      {"created_by": "ENV PATH=/opt/venv/bin", "empty_layer": True}]
    history += [{"created_by": f"RUN {b}", "created": "2026-01-01T00:00:00Z"} for b in base[1:]]
    history += [{"created_by": f"COPY docker/layers/{name}.txt /tmp/gpurl-layers/{name}.txt"},
                {"created_by": f"RUN uv pip install -r /tmp/gpurl-layers/{name}.txt"}]
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/opt/venv/bin"], "WorkingDir": "/app"},
              "rootfs": {"type": "layers", "diff_ids": [_d("diff-" + x) for x in layers]},
              "history": history}
    blob = json.dumps(config).encode()
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "size": len(blob), "digest": "sha256:" + hashlib.sha256(blob).hexdigest()},
                "layers": [{"mediaType": LAYER, "size": 100 + i, "digest": _d(x)}
                           for i, x in enumerate(layers)]}
    return SliceImage.from_documents(name, manifest, config)


def test_composed_image_is_the_base_and_each_install_layer_in_order() -> None:
    slices = [_slice("torch"), _slice("lxml"), _slice("tail")]
    composed = compose(slices)
    manifest = parse_manifest(json.loads(composed.manifest_bytes), "composed")
    assert [d.digest for d in manifest.layers] == [
        _d(x) for x in ("rootfs", "apt", "venv", "install-torch", "install-lxml", "install-tail")]
    assert manifest.media_type == MANIFEST and manifest.layers[3].media_type == LAYER
    config = json.loads(composed.config)
    assert manifest.config_digest == "sha256:" + hashlib.sha256(composed.config).hexdigest()
    assert manifest.config is not None and manifest.config.size == len(composed.config)
    assert parse_diff_ids(config, "composed")[3:] == tuple(
        _d("diff-install-" + n) for n in ("torch", "lxml", "tail"))
    # verify-layers maps layers to instructions through the history: one per layer, no COPY
    made = [h.created_by for h in parse_config(config, "composed").history if not h.empty_layer]
    assert len(made) == len(manifest.layers)
    assert made[3:] == [f"RUN uv pip install -r /tmp/gpurl-layers/{n}.txt"
                        for n in ("torch", "lxml", "tail")]
    assert config["config"] == {"Env": ["PATH=/opt/venv/bin"], "WorkingDir": "/app"}


def test_composition_is_deterministic_and_order_matters() -> None:
    a, b = _slice("torch"), _slice("lxml")
    assert compose([a, b]).manifest_bytes == compose([a, b]).manifest_bytes
    assert compose([a, b]).manifest_bytes != compose([b, a]).manifest_bytes


def test_slices_on_another_env_base_are_refused() -> None:
    with pytest.raises(RegistryError, match="not built on the same env-base"):
        compose([_slice("torch"), _slice("lxml", base=("rootfs", "apt2", "venv"))])


def test_an_image_that_is_not_a_slice_is_refused() -> None:
    image = _slice("torch")
    manifest = {**json.loads(compose([image]).manifest_bytes)}
    manifest["layers"] = manifest["layers"][:2]
    with pytest.raises(RegistryError, match="not env-base plus a COPY and an install"):
        SliceImage.from_documents("torch", manifest, dict(image.config))


def test_slice_tag_names_its_inputs_not_its_position() -> None:
    key = {"base_id": _d("base"), "slice_text": b"torch==2.9.1 --hash=x\n",
           "install": "RUN uv pip install -r /tmp/gpurl-layers/torch.txt"}
    torch = Slice(position=3, label="torch")
    tag = torch.cache_tag(**key)  # type: ignore[arg-type]
    assert tag.startswith("slice-torch-") and len(tag) <= 128
    # the position is not an input; where the file is copied is (a label two slices share
    # keeps its NN- prefix in the image)
    assert Slice(position=7, label="torch", shared=True).cache_tag(**key) == tag  # type: ignore[arg-type]
    assert Slice(position=3, label="torch", unique=False).cache_tag(**key) != tag  # type: ignore[arg-type]
    for field, other in (("base_id", _d("base2")), ("slice_text", b"torch==2.9.2\n"),
                         ("install", "RUN uv pip install --no-deps -r x")):
        assert torch.cache_tag(**{**key, field: other}) != tag, field  # type: ignore[arg-type]
    assert composed_tag([_d("a"), _d("b")]) != composed_tag([_d("b"), _d("a")])
