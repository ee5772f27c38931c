"""benchmarks/compression.py: the images it builds (OCI media types, one config whose
diff_ids are the tars' sha256 in every format), its compressors against gpurl's own writer
and the real zstd CLI, its summary, and one whole run on a tiny image against a real
registry and a real pull engine (containerd and Docker; timings are not checked)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import compression
from benchmarks.compression import (
    ZSTD_LAYER,
    BenchError,
    Format,
    chain_id,
    formats,
    image_documents,
    probe_layers,
    summarize,
    written_layers,
)
from gpurl_tasks.config import LayerSettings
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.image import Descriptor, parse_manifest
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.writer.blob import Blob, write_layer
from gpurl_tasks.writer.ocispec import DOCKER_MANIFEST, OCI_MANIFEST
from gpurl_tasks.writer.records import MEDIA_TYPES, SLICE_DIR, written_history
from tests.support.local_parts import need
from tests.support.registry_server import RegistryServer

LEVEL = LayerSettings().slice_gzip_level
digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)


def _tree(root: Path, seed: str) -> Path:
    """A small staging tree: text that compresses, bytes that do not, a link."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(f"# {seed}\n" + "def f(x):\n    return x + 1\n" * 4000)
    (root / "pkg" / "blob.bin").write_bytes(hashlib.sha512(seed.encode()).digest() * 2000)
    (root / "link").symlink_to("pkg/mod.py")
    return root


def _written(tmp: Path, seed: str) -> tuple[Blob, Path, bytes]:
    """A layer gpurl's writer wrote (blob, its path) and its tar."""
    blob = write_layer(_tree(tmp / f"tree-{seed}", seed), tmp / f"{seed}.tar.gz",
                       prefix="opt/venv", level=LEVEL)
    tar = subprocess.run(["gzip", "-dc", str(tmp / f"{seed}.tar.gz")], capture_output=True,
                         check=True).stdout
    return blob, tmp / f"{seed}.tar.gz", tar


def _config(diff_ids: list[str]) -> dict[str, Any]:
    return {"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/opt/venv/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": written_history(f"{SLICE_DIR}/{d[7:19]}.txt", "/opt/venv")}
                        for d in diff_ids]}


def test_each_format_is_an_oci_image_of_the_same_tars(tmp_path: Path) -> None:
    """gzip comes out as gpurl's writer wrote it, zstd decompresses to the same tar, and
    both images carry one config (its diff_ids the tar's sha256) under OCI media types."""
    need(shutil.which("zstd"), "the zstd CLI is not installed")
    written, _, tar_bytes = _written(tmp_path, "a")
    tar = tmp_path / "layer.tar"
    tar.write_bytes(tar_bytes)
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    assert written.diff_id == diff_id
    config = _config([diff_id])
    images = {}
    for fmt in formats([3], LEVEL):
        out = tmp_path / fmt.name
        digest, seconds = compression._compress(tar, out, fmt)
        assert digest == "sha256:" + hashlib.sha256(out.read_bytes()).hexdigest()
        assert seconds >= 0
        if fmt.kind == "gzip":
            assert digest == written.digest  # the same bytes gpurl's writer wrote
        else:
            back = subprocess.run(["zstd", "-dc", str(out)], capture_output=True, check=True)
            assert back.stdout == tar_bytes
        layer = Descriptor(media_type=fmt.media_type, digest=digest, size=out.stat().st_size)
        images[fmt.name] = image_documents(config, [layer])
    for composed in images.values():
        document = json.loads(composed.manifest)
        assert document["mediaType"] == OCI_MANIFEST
        assert document["config"]["mediaType"] == MEDIA_TYPES[OCI_MANIFEST][0]
        assert json.loads(composed.config)["rootfs"]["diff_ids"] == [diff_id]
    types = {name: parse_manifest(json.loads(c.manifest), name).layers[0].media_type
             for name, c in images.items()}
    assert types == {f"gzip-{LEVEL}": MEDIA_TYPES[OCI_MANIFEST][1], "zstd-3": ZSTD_LAYER}
    assert len({c.config_digest for c in images.values()}) == 1  # one config
    assert len({c.manifest for c in images.values()}) == 2


def test_a_docker_manifest_gets_dockers_config_type_and_a_short_config_is_refused() -> None:
    layer = Descriptor(media_type=ZSTD_LAYER, digest="sha256:" + "a" * 64, size=3)
    composed = image_documents(_config([layer.digest]), [layer], manifest_type=DOCKER_MANIFEST)
    document = json.loads(composed.manifest)
    assert document["mediaType"] == DOCKER_MANIFEST
    assert document["config"]["mediaType"] == MEDIA_TYPES[DOCKER_MANIFEST][0]
    assert document["layers"] == [layer.to_json()]  # the layer's type is kept as given
    with pytest.raises(BenchError, match="names 1 layers, the image has 2"):
        image_documents(_config([layer.digest]), [layer, layer])


@given(st.lists(digests, min_size=1, max_size=6), digests)
def test_the_chain_id_extends_by_the_spec(diff_ids: list[str], top: str) -> None:
    """ChainID(L0) = DiffID(L0); ChainID(L0..n) = sha256(ChainID(L0..n-1) + " " + DiffID(Ln))."""
    assert chain_id(diff_ids[:1]) == diff_ids[0]
    below = chain_id(diff_ids)
    assert chain_id([*diff_ids, top]) == "sha256:" + hashlib.sha256(
        f"{below} {top}".encode()).hexdigest()


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=20))
def test_the_probe_layers_are_the_smallest_with_files(sizes: list[int]) -> None:
    floor = 1000
    first, second = probe_layers(sizes, floor)
    big = sorted(s for s in sizes if s >= floor)
    if big:
        assert sizes[first] == big[0]
        assert sizes[second] == (big[1] if len(big) > 1 else
                                 min((s for s in sizes if s < floor), default=big[0]))
    assert (first == second) == (len(sizes) == 1)


def test_the_summary_is_totals_medians_and_ratios_to_the_first_format() -> None:
    def layer(gz: tuple[int, float, float], zs: tuple[int, float, float]) -> dict[str, Any]:
        return {"formats": {n: dict(zip(("bytes", "compress_s", "decompress_s"), v, strict=True))
                            for n, v in (("gzip-6", gz), ("zstd-3", zs))}}

    layers = [layer((100, 4.0, 1.0), (90, 1.0, 0.5)), layer((300, 8.0, 2.0), (270, 2.0, 0.5))]
    pulls = [{"format": "gzip-6", "fetch_s": f, "unpack_s": u, "total_s": f + u, "cpu_s": c,
              "cpu_user_s": c / 2}
             for f, u, c in ((1.0, 9.0, 7.0), (2.0, 10.0, 8.0), (3.0, 30.0, 6.0))]
    pulls += [{"format": "zstd-3", "fetch_s": 1.0, "unpack_s": 4.0, "total_s": 5.0, "cpu_s": 2.0,
               "cpu_user_s": 1.0},
              {"format": "zstd-3", "error": "boom"}]
    gzip, zstd = summarize(layers, pulls, ["gzip-6", "zstd-3"])
    assert (gzip["bytes"], gzip["compress_s"], gzip["decompress_s"]) == (400, 12.0, 3.0)
    assert (zstd["bytes"], zstd["compress_s"], zstd["decompress_s"]) == (360, 3.0, 1.0)
    assert (gzip["pull_total_s"], gzip["pull_unpack_s"], gzip["pulls"]) == (12.0, 10.0, 3)
    assert (zstd["pull_total_s"], zstd["pulls"]) == (5.0, 1)  # the failed pull is left out
    assert gzip["bytes_ratio"] == 1.0
    assert zstd["bytes_ratio"] == 360 / 400
    assert zstd["pull_total_s_ratio"] == 5.0 / 12.0
    assert zstd["pull_cpu_s_ratio"] == 2.0 / 7.0
    assert zstd["pull_cpu_user_s_ratio"] == 1.0 / 3.5
    assert zstd["decompress_s_ratio"] == 1.0 / 3.0


def test_written_layers_follow_the_history_that_made_layers() -> None:
    ours = written_history(f"{SLICE_DIR}/x.txt", "/opt/venv")
    assert written_layers(["RUN apt-get", ours, "gpurl gpurl-layer-0: old"], 3) == \
        [False, True, False]
    assert written_layers([ours], 2) == [False, False]  # not lined up: nothing claimed


def test_formats_put_gzip_first_and_refuse_bad_levels() -> None:
    assert formats([19, 3, 19], 6) == (Format("gzip", 6), Format("zstd", 19), Format("zstd", 3))
    for levels, gzip_level in (([0], 6), ([23], 6), ([], 6), ([3], 10)):
        with pytest.raises(BenchError):
            formats(levels, gzip_level)


def test_bad_levels_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert compression.main(["--levels", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: zstd levels must be 1 to 22") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.integration
def test_the_default_image_is_the_largest_environment_gpurl_wrote_into(
        registry: RegistryServer) -> None:
    """Of a registry's `env-*` tags, the largest with a layer gpurl's writer wrote: not a
    larger one built as a chain, not env-base; none at all is one clear error."""
    def push(client: RegistryClient, reference: str, sizes: list[int], ours: bool) -> None:
        ref = parse_reference(reference, default_host=registry.host)
        layers = []
        for n, size in enumerate(sizes):
            data = f"{reference} {n} ".encode().ljust(size, b".")
            layers.append(Descriptor(media_type=MEDIA_TYPES[DOCKER_MANIFEST][1],
                                     digest=client.push_blob(ref, data), size=size))
        config = _config([d.digest for d in layers])  # gpurl's history entries
        if not ours:
            config["history"] = [{"created_by": "RUN uv pip install"} for _ in layers]
        composed = image_documents(config, layers, manifest_type=DOCKER_MANIFEST)
        client.push_blob(ref, composed.config)
        client.put_manifest(ref, ref.reference, composed.manifest, DOCKER_MANIFEST)

    host = registry.host
    with RegistryClient(host) as client:
        with pytest.raises(BenchError, match="no composed environment"):
            compression.largest_environment(client, host)
        push(client, f"{host}/a/cache:env-small", [100], ours=True)
        push(client, f"{host}/b/cache:env-large", [300, 200], ours=True)
        push(client, f"{host}/b/cache:env-chain", [5000], ours=False)
        push(client, f"{host}/c/cache:env-base-1", [9000], ours=True)
        push(client, f"{host}/c/cache:other", [9000], ours=True)
        assert compression.largest_environment(client, host) == f"{host}/b/cache:env-large"


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.slow
def test_a_whole_run_on_a_tiny_image(registry: RegistryServer, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Two layers gpurl's writer wrote, pushed as a composed environment is (Docker schema2):
    the run reproduces both gzip blobs, pushes gzip and zstd as OCI images that a fresh
    containerd pulls and unpacks into the image's chain, probes, and writes its JSON; a
    missing image is one line."""
    need(shutil.which("zstd") and shutil.which("ctr") and shutil.which("dockerd"),
         "zstd, ctr or dockerd is not installed")
    pieces = [_written(tmp_path, seed) for seed in ("a", "b")]
    config = _config([blob.diff_id for blob, _, _ in pieces])
    source = image_documents(config, [Descriptor(media_type=MEDIA_TYPES[DOCKER_MANIFEST][1],
                                                 digest=b.digest, size=b.size)
                                      for b, _, _ in pieces], manifest_type=DOCKER_MANIFEST)
    reference = f"{registry.host}/gpurl/env:env-tiny"
    ref = parse_reference(reference, default_host=registry.host)
    with RegistryClient(registry.host, insecure=True) as client:
        for blob, path, _ in pieces:
            client.push_blob(ref, path, blob.digest)
        client.push_blob(ref, source.config)
        client.put_manifest(ref, "env-tiny", source.manifest, DOCKER_MANIFEST)
    out = tmp_path / "out" / "compression.json"
    assert compression.main(["--image", reference, "--levels", "3", "--repeat", "1",
                             "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["gzip_reproduced"] == 2 == result["image"]["written"]
    assert [r["format"] for r in result["rows"]] == [f"gzip-{LEVEL}", "zstd-3"]
    assert [p.get("error") for p in result["pulls"]] == [None, None]  # chain id checked
    assert all(p["cpu_s"] >= p["cpu_user_s"] > 0 for p in result["pulls"])  # ctr's and containerd's
    assert result["image"]["tar_bytes"] == sum(len(tar) for _, _, tar in pieces)
    by_case = {p["case"]: p["outcome"] for p in result["probes"]}
    control = by_case["OCI manifest, gzip layer (gpurl's bytes, OCI's gzip type)"]
    assert set(control.values()) == {"accepted", "ok"}
    assert by_case["OCI manifest, zstd layer"]["containerd pull+unpack:"] == "ok"
    printed = capsys.readouterr().out
    assert "zstd-3" in printed
    assert compression.main(["--render", str(out)]) == 0  # the saved run prints the same
    assert capsys.readouterr().out in printed
    assert compression.main(["--image", f"{registry.host}/gpurl/env:no-such-tag",
                             "--out", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "none.json").exists()
