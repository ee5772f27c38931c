"""The registry client against a real `docker-registry` on 127.0.0.1.

Images are pushed through the registry API by tests/support/pusher.py. Faults are injected by
a loopback proxy in front of the real registry (tests/support/faults.py); the bearer flow uses
the real registry's token auth with a loopback token service standing in for ghcr.io's.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.auth import Credentials
from gpurl_tasks.oci.image import parse_diff_ids, parse_manifest
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.flow import read_records
from gpurl_tasks.release.verify import Rules, check_layers
from gpurl_tasks.writer.blob import Blob, compressor
from gpurl_tasks.writer.composition import compose, record_of_image
from gpurl_tasks.writer.records import platform_of, recorded_history, slice_image, slice_key
from tests.conftest import REPO_ROOT
from tests.support.faults import Fault, FaultProxy
from tests.support.pusher import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    PushedImage,
    push_image,
    push_index,
    random_layer,
    tar_gz_layer,
)
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.token_auth import TokenService

pytestmark = pytest.mark.integration

CANARY = "canary-tok-5b0c7e1d"
WRONG = "canary-wrong-2c9a41"


@pytest.fixture(scope="module")
def amd64(registry: RegistryServer) -> PushedImage:
    layers = [tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs.tar /"),
              random_layer(200_000, "RUN uv sync --frozen --no-install-package torch", seed=1),
              random_layer(300_000, "RUN uv sync --frozen", seed=2)]
    return push_image(registry.url, "org/img", layers, tag="gpu-rl-abc1234",
                      labels={"org.gpurl.git-sha": "abc1234"},
                      empty_history=[(1, "ENV UV_NO_CACHE=1"), (4, "WORKDIR /app")])


def ref_of(server: RegistryServer | FaultProxy, text: str) -> ImageRef:
    return parse_reference(f"{server.host}/{text}", default_host="unused.example")


def quick_client(host: str, **kwargs: object) -> RegistryClient:
    return RegistryClient(host, backoff=0.05, **kwargs)  # type: ignore[arg-type]


def test_resolves_a_tag_to_the_pushed_manifest_digest(registry: RegistryServer,
                                                      amd64: PushedImage) -> None:
    with quick_client(registry.host) as client:
        assert client.resolve(ref_of(registry, "org/img:gpu-rl-abc1234")) == amd64.manifest_digest


def test_pull_reads_layers_labels_and_history(registry: RegistryServer, amd64: PushedImage) -> None:
    with quick_client(registry.host) as client:
        image = client.pull(ref_of(registry, "org/img:gpu-rl-abc1234"))
    assert not image.is_index
    assert image.manifest_digest == image.top_digest == amd64.manifest_digest
    assert [(d.digest, d.size) for d in image.layers] == [(s.digest, s.size) for s in amd64.layers]
    assert image.labels == {"org.gpurl.git-sha": "abc1234"}
    assert [h.created_by for h in image.history if not h.empty_layer] == [
        s.created_by for s in amd64.layers]
    assert sum(h.empty_layer for h in image.history) == 2


@pytest.mark.parametrize("index_type", ["application/vnd.oci.image.index.v1+json", DOCKER_LIST])
def test_index_is_followed_to_linux_amd64(registry: RegistryServer, amd64: PushedImage,
                                          index_type: str) -> None:
    arm = push_image(registry.url, "org/img", [random_layer(1000, "RUN arm", seed=9)], tag=None,
                     architecture="arm64", media_type=DOCKER_MANIFEST)
    index = push_index(registry.url, "org/img", {"linux/arm64/v8": arm, "linux/amd64": amd64},
                       tag="multi", media_type=index_type)
    with quick_client(registry.host) as client:
        image = client.pull(ref_of(registry, "org/img:multi"))
    assert image.is_index
    assert image.top_digest == index
    assert image.manifest_digest == amd64.manifest_digest
    assert image.platforms == ("linux/arm64/v8", "linux/amd64")


def test_index_without_amd64_names_what_it_has(registry: RegistryServer) -> None:
    arm = push_image(registry.url, "org/img", [random_layer(1000, "RUN arm", seed=8)], tag=None,
                     architecture="arm64")
    push_index(registry.url, "org/img", {"linux/arm64": arm}, tag="armonly")
    with quick_client(registry.host) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(registry, "org/img:armonly"))
    assert "no linux/amd64 image" in str(info.value)
    assert "linux/arm64" in str(info.value)


def test_pull_by_digest(registry: RegistryServer, amd64: PushedImage) -> None:
    with quick_client(registry.host) as client:
        image = client.pull(ref_of(registry, f"org/img@{amd64.manifest_digest}"))
    assert image.manifest_digest == amd64.manifest_digest


def test_missing_tag_is_a_clear_404(registry: RegistryServer, amd64: PushedImage) -> None:
    with quick_client(registry.host) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(registry, "org/img:gpu-rl-0000000"))
    assert "org/img:gpu-rl-0000000 was not found" in info.value.message
    assert info.value.hint and "pushed" in info.value.hint


# --- faults -------------------------------------------------------------------------------


@pytest.fixture
def proxy(registry: RegistryServer, amd64: PushedImage) -> Iterator[FaultProxy]:
    with FaultProxy(registry.port) as fault_proxy:
        yield fault_proxy


def test_429_waits_for_retry_after_then_succeeds(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path="/manifests/gpu-rl-abc1234", kind="429", retry_after="1"))
    with quick_client(proxy.host) as client:
        image = client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert image.manifest_digest == amd64.manifest_digest
    first, second = proxy.log[0], proxy.log[1]
    assert first[3] == "429" and second[3] == "forward"
    assert second[0] - first[0] >= 0.95  # honoured Retry-After: 1, not the 0.05s backoff


def test_500_then_success(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path="/blobs/", kind="500", times=2))
    with quick_client(proxy.host) as client:
        image = client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert image.config_digest == amd64.config_digest
    assert [entry[3] for entry in proxy.log if "/blobs/" in entry[2]] == ["500", "500", "forward"]


def test_persistent_500_is_a_bounded_clear_error(proxy: FaultProxy) -> None:
    proxy.inject(Fault(path="/manifests/", kind="500", times=100))
    with quick_client(proxy.host, attempts=3) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert "answered 500" in str(info.value) and "after 3 attempts" in str(info.value)
    assert len(proxy.log) == 3


def test_truncated_manifest_body_is_retried(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path=f"/manifests/{amd64.manifest_digest}", kind="truncate", method="GET"))
    with quick_client(proxy.host) as client:
        image = client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert image.manifest_digest == amd64.manifest_digest
    assert "truncate" in [entry[3] for entry in proxy.log]


def test_always_truncated_body_is_a_clear_error(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path="/manifests/sha256", kind="truncate", times=100, method="GET"))
    with quick_client(proxy.host, attempts=2) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert "after 2 attempts" in str(info.value)


def test_manifest_whose_digest_does_not_match_is_refused(proxy: FaultProxy,
                                                         amd64: PushedImage) -> None:
    proxy.inject(Fault(path=f"/manifests/{amd64.manifest_digest}", kind="corrupt", method="GET"))
    with quick_client(proxy.host) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert "does not match its digest" in info.value.message
    assert amd64.manifest_digest in info.value.message


def test_corrupt_config_blob_is_refused(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path=f"/blobs/{amd64.config_digest}", kind="corrupt"))
    with quick_client(proxy.host) as client, pytest.raises(RegistryError) as info:
        client.pull(ref_of(proxy, "org/img:gpu-rl-abc1234"))
    assert amd64.config_digest in info.value.message


def test_dropped_connection_is_retried(proxy: FaultProxy, amd64: PushedImage) -> None:
    proxy.inject(Fault(path="/manifests/gpu-rl-abc1234", kind="drop"))
    with quick_client(proxy.host) as client:
        assert client.resolve(ref_of(proxy, "org/img:gpu-rl-abc1234")) == amd64.manifest_digest


def test_registry_stopped_mid_run(tmp_path: Path) -> None:
    """Stopped for good: a bounded, clear error. Back within the retries: success."""
    with running_registry(tmp_path / "r") as server:
        pushed = push_image(server.url, "org/img", [random_layer(1000, "RUN x", seed=3)],
                            tag="gpu-rl-1234567")
        ref = ref_of(server, "org/img:gpu-rl-1234567")
        with quick_client(server.host, attempts=3) as client:
            assert client.resolve(ref) == pushed.manifest_digest
            server.stop()
            with pytest.raises(RegistryError) as info:
                client.pull(ref)
            assert f"cannot reach the registry at http://{server.host}" in info.value.message
            assert "after 3 attempts" in info.value.message
        restarter = threading.Timer(0.5, server.start)
        restarter.start()
        try:
            with RegistryClient(server.host, attempts=8, backoff=0.3) as client:
                assert client.pull(ref).manifest_digest == pushed.manifest_digest
        finally:
            restarter.join()


@pytest.mark.parametrize(("insecure", "timeout"), [(True, "ReadTimeout"),
                                                   (None, "ConnectTimeout")])
def test_every_request_has_a_timeout(registry: RegistryServer, insecure: bool | None,
                                     timeout: str) -> None:
    """A registry that accepts but never answers: the timeout fires and is retried, bounded;
    in plain HTTP while reading the answer, over HTTPS (loopback's first try) in the TLS
    handshake, which a silent server is no reason to fall back from."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with RegistryClient(host, timeout=0.3, attempts=2, backoff=0.01,
                            insecure=insecure) as client, pytest.raises(RegistryError) as info:
            client.resolve(parse_reference(f"{host}/org/img:t", default_host="x"))
        assert time.monotonic() - start < 5
    assert f"after 2 attempts ({timeout})" in info.value.message


# --- auth -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory, registry: RegistryServer,
                   amd64: PushedImage) -> Iterator[tuple[RegistryServer, TokenService]]:
    """A second real registry over the same storage, with token auth like ghcr.io."""
    workdir = tmp_path_factory.mktemp("token-registry")
    with TokenService(workdir, username="penfever", secret=CANARY) as tokens, \
            running_registry(workdir / "reg", storage=registry.storage,
                             auth_yaml=tokens.auth_yaml()) as server:
        yield server, tokens


def test_bearer_flow_gets_a_token_from_the_challenge(
        token_registry: tuple[RegistryServer, TokenService], amd64: PushedImage) -> None:
    server, tokens = token_registry
    anonymous = httpx.head(f"{server.url}/v2/org/img/manifests/gpu-rl-abc1234")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith(f'Bearer realm="{tokens.realm}"')
    before = len(tokens.requests)
    creds = Credentials(username="penfever", secret=CANARY)
    with quick_client(server.host, credentials=creds) as client:
        image = client.pull(ref_of(server, "org/img:gpu-rl-abc1234"))
    assert image.manifest_digest == amd64.manifest_digest
    assert tokens.requests[before:] == [{"scope": "repository:org/img:pull",
                                         "service": "gpurl-test-registry", "authorized": True}]


@pytest.mark.parametrize("creds", [None, Credentials(username="penfever", secret=WRONG)])
def test_refused_credentials_are_a_clear_error_without_the_secret(
        token_registry: tuple[RegistryServer, TokenService], creds: Credentials | None,
        capsys: pytest.CaptureFixture[str]) -> None:
    server, _ = token_registry
    with quick_client(server.host, credentials=creds) as client, \
            pytest.raises(RegistryError) as info:
        client.pull(ref_of(server, "org/img:gpu-rl-abc1234"))
    text = str(info.value)
    assert "refused the credentials" in text and "org/img:gpu-rl-abc1234" in text
    assert "GPURL_REGISTRY_TOKEN" in text or "PAT" in text
    out = capsys.readouterr()
    for blob in (text, repr(info.value), out.out, out.err):
        assert CANARY not in blob and WRONG not in blob


def test_basic_auth_against_the_real_registry(tmp_path: Path, registry: RegistryServer,
                                              amd64: PushedImage) -> None:
    """The registry's own htpasswd auth: 401 with a Basic challenge, then the credentials."""
    from tests.support.htpasswd import basic_auth_yaml

    auth = basic_auth_yaml(tmp_path, "penfever", CANARY)
    with running_registry(tmp_path / "basic", storage=registry.storage, auth_yaml=auth) as server:
        anonymous = httpx.head(f"{server.url}/v2/org/img/manifests/gpu-rl-abc1234")
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic ")
        good = Credentials(username="penfever", secret=CANARY)
        with quick_client(server.host, credentials=good) as client:
            assert client.pull(ref_of(server, "org/img:gpu-rl-abc1234")).manifest_digest == \
                amd64.manifest_digest
        for creds in (None, Credentials(username="penfever", secret=WRONG)):
            with quick_client(server.host, credentials=creds) as client, \
                    pytest.raises(RegistryError) as info:
                client.pull(ref_of(server, "org/img:gpu-rl-abc1234"))
            assert "asks for authentication to read" in info.value.message
            assert CANARY not in str(info.value) and WRONG not in str(info.value)


def test_composes_written_slices_by_mounting_their_blobs(registry: RegistryServer) -> None:
    """env-base and two written slices, each recorded as gpurl's one-layer image, in a cache
    repository (the real registry): the registry accepts those images and the composed
    manifest and config, which read back as env-base's layers then each slice's blob, with
    diff_ids and history to match. Through a pass-through proxy, whose log shows the blobs
    were mounted across repositories: the config is the only upload to the image's."""
    base_layers = [tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs.tar /"),
                   random_layer(50_000, "RUN uv venv /opt/venv", seed=10)]
    pushed = push_image(registry.url, "org/wcache", base_layers, tag="env-base-test",
                        media_type=DOCKER_MANIFEST)
    with FaultProxy(registry.port) as proxy, quick_client(proxy.host) as client:
        base_ref = ref_of(proxy, "org/wcache:env-base-test")
        _, _, manifest = client.manifest(base_ref)
        base_config = client.blob_json(base_ref, pushed.config_digest)
        written = []
        for n, name in enumerate(("torch", "tail")):
            layer = random_layer(80_000, name, seed=30 + n)
            data = b"".join(layer.iter_chunks())
            ref = ref_of(proxy, f"org/wcache:slice-{name}")
            client.push_blob(ref, data)
            blob = Blob(digest=layer.digest, size=layer.size,
                        diff_id="sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest())
            image, config = slice_image(blob, media_type=DOCKER_MANIFEST,
                                        created_by=f"uv pip install -r /tmp/gpurl-layers/{name}.txt",
                                        platform=platform_of(dict(base_config)))
            client.push_blob(ref, config)
            client.put_manifest(ref, f"slice-{name}", image, DOCKER_MANIFEST)
            _, _, read = client.manifest(ref)
            written.append(record_of_image(name, read, client.blob_json(
                ref, parse_manifest(read, name).config_digest)))
        composed = compose(manifest, base_config, written)
        target = ref_of(proxy, "org/wenv:unused")
        assert not client.has_blob(target, str(written[0].layer["digest"]))
        proxy.log.clear()
        for digest in composed.layers:
            client.mount_blob(target, digest, "org/wcache")
        client.push_blob(target, composed.config)
        digest = client.put_manifest(target, "env-test", composed.manifest, composed.media_type)
        started = [path for _, method, path, _ in proxy.log
                   if method == "POST" and path.startswith("/v2/org/wenv/blobs/uploads/")]
        pulled = client.pull(ref_of(proxy, "org/wenv:env-test"))
        config = client.blob_json(target, pulled.config_digest)
    mounts = [path for path in started if "mount=" in path]
    assert len(mounts) == len(composed.layers)  # each layer mounted, from the cache
    assert len(started) - len(mounts) == 1  # one upload: the config
    assert pulled.manifest_digest == digest
    assert [d.digest for d in pulled.layers] == [
        *(d["digest"] for d in manifest["layers"]), *(w.layer["digest"] for w in written)]
    assert parse_diff_ids(config, "composed") == (
        *base_config["rootfs"]["diff_ids"], *(w.diff_id for w in written))
    made = [h.created_by for h in pulled.history if not h.empty_layer]
    assert made == [*(s.created_by for s in base_layers), *(w.created_by for w in written)]


def test_verify_reads_each_written_slices_record(registry: RegistryServer) -> None:
    """An image whose slice layers name their records (writer/records.recorded_history), against a
    real cache repository: the record holding the layer's own blob makes its size exact, one
    holding another blob is flagged, a missing one is said; and a record the registry holds
    in another form (an index) leaves the image checked, with the reason in a note."""
    tags = [slice_key(label=f"s{i}", slice_text=b"%d" % i, created_by="x", python="3.11.2", venv="/opt/venv",
                      uv="uv 0.9.0", compressor=compressor(6), arch="x86_64")
            for i in range(3)]
    slices = [random_layer(20_000, recorded_history(
        f"gpurl: uv pip install -r /tmp/gpurl-layers/s{i}.txt", tags[i]), seed=60 + i)
        for i in range(3)]
    base = tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs.tar /")
    push_image(registry.url, "org/rimg", [base, *slices], tag="t1")
    push_image(registry.url, "org/rimg/cache", [slices[0]], tag=tags[0])
    push_image(registry.url, "org/rimg/cache", [random_layer(20_000, "other", seed=99)],
               tag=tags[1])  # the same slice written into other bytes; tags[2] never recorded
    config = load_config(REPO_ROOT, profile="demo", env={})
    config = config.with_variant_settings(cluster=dataclasses.replace(
        config.cluster, cache_repo=f"{registry.host}/org/rimg/cache"))
    rules = Rules(cap=10**9, hard_limit=2 * 10**9, min_layers=1)
    with quick_client(registry.host) as client:
        image = client.pull(ref_of(registry, "org/rimg:t1"))
        records, note = read_records(config, image, client)
        assert note is None and sorted(records) == [1, 2, 3]
        report = check_layers(image, rules, records=records)
        assert [r.exact for r in report.rows] == [False, True, False, False]
        assert [(f.code, f.layer) for f in report.findings] == [("not-the-recorded-blob", 2)]
        assert any("1 of 3 written slice layers" in n and "1 record(s) are not in" in n
                   for n in report.notes), report.notes
        push_index(registry.url, "org/rimg/cache", {"linux/amd64": push_image(
            registry.url, "org/rimg/cache", [slices[2]], tag=None)}, tag=tags[2])
        records, note = read_records(config, image, client)
    assert records == {} and note is not None and "cannot be read" in note, note
