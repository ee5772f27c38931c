"""The one composition (writer/composition.py): env-base's layers then each slice record's, under
env-base's config extended to match; a record read back; the tag; the cache key."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.cluster.kaniko import job_app
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.image import PulledImage, parse_config, parse_manifest
from gpurl_tasks.release.verify import layer_instructions
from gpurl_tasks.writer.blob import Blob, LayerError
from gpurl_tasks.writer.composition import Record, compose, composed_tag, record_of_image
from gpurl_tasks.writer.records import slice_image, slice_key, slice_of

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def _d(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def _base() -> tuple[dict[str, Any], dict[str, Any]]:
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
    return manifest, config


def _written(name: str, media_type: str = LAYER) -> Record:
    return Record(name=name, layer={"mediaType": media_type, "digest": _d(name),
                                    "size": len(name) * 1000},
                  diff_id=_d("diff-" + name),
                  created_by=f"gpurl: uv pip install -r /tmp/gpurl-layers/{name}.txt")


def test_the_image_is_env_base_then_each_slice_in_order() -> None:
    base_manifest, base_config = _base()
    slices = [_written("torch"), _written("lxml"), _written("tail")]
    composed = compose(base_manifest, base_config, slices)
    manifest = parse_manifest(json.loads(composed.manifest), "composed")
    assert [d.digest for d in manifest.layers] == [
        *(d["digest"] for d in base_manifest["layers"]), *(s.layer["digest"] for s in slices)]
    assert list(composed.layers) == [d.digest for d in manifest.layers]
    assert manifest.media_type == MANIFEST == composed.media_type
    assert all(d.media_type == LAYER for d in manifest.layers)
    config: dict[str, Any] = json.loads(composed.config)
    assert manifest.config_digest == "sha256:" + hashlib.sha256(composed.config).hexdigest() \
        == composed.config_digest
    assert composed.digest == "sha256:" + hashlib.sha256(composed.manifest).hexdigest()
    assert config["rootfs"]["diff_ids"] == [*base_config["rootfs"]["diff_ids"],
                                            *(s.diff_id for s in slices)]
    assert config["config"] == base_config["config"]
    # verify-layers maps every layer to its instruction, each slice to its install
    image = PulledImage(ref=parse_reference("127.0.0.1:5005/gpurl/demo:env"), top_digest="",
                        top_media_type=MANIFEST, manifest_digest="", layers=manifest.layers,
                        history=parse_config(config, "c").history, labels={},
                        config_digest=manifest.config_digest)
    made, note = layer_instructions(image)
    assert note is None and made[3:] == [s.created_by for s in slices]
    assert [e.stem for e in map(slice_of, made[3:]) if e] == ["torch", "lxml", "tail"]
    assert compose(base_manifest, base_config, slices) == composed  # deterministic
    assert compose(base_manifest, base_config, slices[::-1]).manifest != composed.manifest
    assert composed.tag == composed_tag(composed.config_digest)


def test_the_tag_names_the_config_and_nothing_else() -> None:
    base_manifest, base_config = _base()
    one = compose(base_manifest, base_config, [_written("torch"), _written("lxml")])
    two = compose(base_manifest, base_config, [_written("lxml"), _written("torch")])
    assert one.tag.startswith("env-") and len(one.tag) == 36 and one.tag != two.tag
    assert one.tag == compose(base_manifest, base_config, [_written("torch"), _written("lxml")]).tag


def test_a_slice_of_the_other_gzip_family_is_listed_as_env_bases_and_no_other_is_taken() -> None:
    oci = "application/vnd.oci.image.layer.v1.tar+gzip"
    composed = compose(*_base(), [_written("torch", oci), _written("lxml")])
    assert {d["mediaType"] for d in json.loads(composed.manifest)["layers"]} == {LAYER}
    assert composed.layers[-2:] == (_d("torch"), _d("lxml"))
    with pytest.raises(LayerError, match=r"slice torch is a .*zstd layer, not a gzip tar"):
        compose(*_base(), [_written("torch", "application/vnd.oci.image.layer.v1.tar+zstd")])
    with pytest.raises(LayerError, match="no slice layers"):
        compose(*_base(), [])


def test_env_base_that_does_not_add_up_is_refused() -> None:
    manifest, config = _base()
    with pytest.raises(LayerError, match="3 layers and 2 diff_ids"):
        compose(manifest, {**config, "rootfs": {"diff_ids": config["rootfs"]["diff_ids"][:2]}},
                [_written("torch")])
    with pytest.raises(LayerError, match="not a Docker or OCI image manifest"):
        compose({**manifest, "mediaType": "application/vnd.oci.image.index.v1+json"}, config,
                [_written("torch")])


def test_a_cached_slice_reads_back_as_written() -> None:
    written = _written("torch")
    blob = Blob(digest=str(written.layer["digest"]), diff_id=written.diff_id,
                size=int(written.layer["size"]))
    platform = {"architecture": "amd64", "os": "linux"}
    manifest, config = slice_image(blob, created_by=written.created_by, media_type=MANIFEST,
                                   platform=platform)
    assert slice_image(blob, created_by=written.created_by, media_type=MANIFEST,
                       platform=platform) == (manifest, config)
    back = record_of_image("torch", json.loads(manifest), json.loads(config))
    assert back == written
    assert json.loads(manifest)["config"]["digest"] == \
        "sha256:" + hashlib.sha256(config).hexdigest()
    two = json.loads(manifest)
    two["layers"] *= 2
    with pytest.raises(LayerError, match="layers and 1 diff_ids"):
        record_of_image("torch", two, json.loads(config))
    with pytest.raises(LayerError, match="not a one-layer image"):
        record_of_image("torch", json.loads(manifest), {**json.loads(config), "history": []})


def test_the_layer_tool_composes_what_the_local_path_composes(tmp_path: Path) -> None:
    """The job's zipapp (what the cluster job runs) on the same documents writes the
    same manifest and config as the package's `compose`, as an OCI layout crane pushes."""
    base_manifest, base_config = _base()
    slices = [_written("torch"), _written("lxml")]
    args = []
    for name, doc in (("base.manifest", base_manifest), ("base.config", base_config)):
        (tmp_path / name).write_text(json.dumps(doc))
    for s in slices:
        blob = Blob(digest=str(s.layer["digest"]), diff_id=s.diff_id, size=int(s.layer["size"]))
        manifest, config = slice_image(blob, created_by=s.created_by, media_type=MANIFEST,
                                       platform={"architecture": "amd64", "os": "linux"})
        (tmp_path / f"{s.name}.m").write_bytes(manifest)
        (tmp_path / f"{s.name}.c").write_bytes(config)
        args += ["--record", s.name, str(tmp_path / f"{s.name}.m"), str(tmp_path / f"{s.name}.c")]
    tool = tmp_path / "job.pyz"
    tool.write_bytes(job_app().data)
    done = subprocess.run(
        [sys.executable, "-S", str(tool), "compose",
         str(tmp_path / "env"), "--base-manifest", str(tmp_path / "base.manifest"),
         "--base-config", str(tmp_path / "base.config"), *args],
        capture_output=True, text=True, check=True)
    expected = compose(base_manifest, base_config, slices)
    assert done.stdout.split() == [expected.tag, expected.digest]
    index = json.loads((tmp_path / "env" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == expected.digest
    blobs = tmp_path / "env" / "blobs" / "sha256"
    assert sorted(p.name for p in blobs.iterdir()) == sorted(
        d.removeprefix("sha256:") for d in (expected.digest, expected.config_digest))
    assert (blobs / expected.digest.removeprefix("sha256:")).read_bytes() == expected.manifest
    bad = subprocess.run(
        [sys.executable, "-S", str(tool), "compose",
         str(tmp_path / "none"), "--base-manifest", str(tmp_path / "base.manifest"),
         "--base-config", str(tmp_path / "base.config")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr == "gpurl-layer: no slice layers to compose\n"
    assert not (tmp_path / "none").exists()


_KEY = {"label": "group-04", "slice_text": b"six==1.17.0 --hash=sha256:00\n",
        "created_by": "gpurl: uv pip install -r /tmp/gpurl-layers/group-04.txt",
        "python": "3.11.2", "venv": "/opt/venv", "uv": "uv 0.13.9",
        "compressor": "gpurl-layer-1 zlib 1.2.13 level 6", "arch": "x86_64"}


def test_an_arm64_slice_has_its_own_key_and_amd64_keys_stay() -> None:
    """A slice file lists every platform's wheel hashes, so the amd64 and arm64 slices of one
    file differ only in their platform: their tags differ. An amd64 slice's tag is the one the
    key gave before platforms were keyed (this value is from that release), so no cache the
    team's builds hold is orphaned."""
    amd64 = slice_key(**_KEY)  # type: ignore[arg-type]
    assert amd64 == "slice-group-04-dd22f7ad6e627222d2992f295a6e273b"
    assert slice_key(**{**_KEY, "arch": "aarch64"}) != amd64  # type: ignore[arg-type]


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


_TIMES = st.datetimes().map(lambda t: t.isoformat() + "Z")


@given(built=_TIMES, steps=st.lists(_TIMES, min_size=4, max_size=4), again=_TIMES,
       path=st.sampled_from(["PATH=/opt/venv/bin", "PATH=/opt/other/bin"]))
def test_the_composed_image_names_no_time_and_holds_every_other_setting(
        built: str, steps: list[str], again: str, path: str) -> None:
    """env-base built twice with the same layers differs in its times only (kaniko stamps its
    config's `created` on every build): both compose into one image, so every cache key the
    final stage's build chains on the environment stays put. Any other setting of env-base's
    config still makes another image."""
    base_manifest, base_config = _base()
    slices = [_written("torch"), _written("tail")]
    first = {**base_config, "created": built,
             "history": [{**e, "created": t} for e, t in zip(base_config["history"], steps,
                                                            strict=True)]}
    second = {**base_config, "created": again}
    composed = compose(base_manifest, first, slices)
    assert compose(base_manifest, second, slices) == composed
    config = json.loads(composed.config)
    assert "created" not in config and not [e for e in config["history"] if "created" in e]
    other = {**base_config, "config": {**base_config["config"], "Env": [path]}}
    assert (compose(base_manifest, other, slices) == composed) == (path == "PATH=/opt/venv/bin")
