"""The registry client's scheme against real registries: Debian's `docker-registry` on loopback
serving TLS with a throwaway CA (tests/support/tls.py), the same with an htpasswd login (the
stand-in for ghcr.io, which cannot be reached here), and one speaking plain HTTP.

With `registry.insecure` unset a loopback host is tried over HTTPS first and falls back to plain
HTTP only when the server does not speak TLS, once per client; a certificate the trust store
(SSL_CERT_FILE) rejects is one clear error, never a fallback. A recording transport (httpx's
own, noting each request's scheme and whether it carried credentials) shows what was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.auth import Credentials
from gpurl_tasks.oci.registry import RegistryClient
from tests.support.htpasswd import basic_auth_yaml
from tests.support.local_parts import non_loopback_address
from tests.support.pusher import PushedImage, push_image
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import run_task
from tests.support.tls import LocalCA, make_ca
from tests.test_verify_tasks import env_for, six_layers

pytestmark = pytest.mark.integration

TAG = "gpu-rl-7e1a5c0"
USER = "penfever"
CANARY = "canary-tls-4d2b8e"


class Recorder(httpx.HTTPTransport):
    """httpx's real transport, noting (scheme, carried Authorization) for each request."""

    def __init__(self) -> None:
        super().__init__()  # builds its TLS context now: set SSL_CERT_FILE first
        self.sent: list[tuple[str, bool]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.url.scheme, "authorization" in request.headers))
        return super().handle_request(request)

    @property
    def schemes(self) -> list[str]:
        return [scheme for scheme, _ in self.sent]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def image(registry: RegistryServer) -> PushedImage:
    return push_image(registry.url, "org/img", six_layers(), tag=TAG)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, ca: LocalCA, registry: RegistryServer,
        image: PushedImage) -> Iterator[RegistryServer]:
    """A second real registry over the plain one's storage, serving HTTPS on 127.0.0.1."""
    with running_registry(tmp_path_factory.mktemp("tls"), storage=registry.storage,
                          tls=ca) as server:
        yield server


@pytest.fixture(scope="module")
def tls_login(tmp_path_factory: pytest.TempPathFactory, ca: LocalCA, registry: RegistryServer,
              image: PushedImage) -> Iterator[RegistryServer]:
    """HTTPS and an htpasswd login: what ghcr.io asks of a client, on loopback."""
    workdir = tmp_path_factory.mktemp("tls-login")
    with running_registry(workdir, storage=registry.storage, tls=ca,
                          auth_yaml=basic_auth_yaml(workdir, USER, CANARY)) as server:
        yield server


@pytest.fixture
def trusted(ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> LocalCA:
    """This process trusts the test CA the one way gpurl's client does: SSL_CERT_FILE."""
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return ca


def client_for(server: RegistryServer, recorder: Recorder, **kwargs: object) -> RegistryClient:
    return RegistryClient(server.host, transport=recorder, backoff=0.05,
                          **kwargs)  # type: ignore[arg-type]


def ref_on(server: RegistryServer) -> str:
    return f"{server.host}/org/img:{TAG}"


# --- the client ---------------------------------------------------------------------------


def test_a_tls_loopback_registry_is_read_over_https(tls: RegistryServer, image: PushedImage,
                                                    trusted: LocalCA) -> None:
    recorder = Recorder()
    with client_for(tls, recorder) as client:
        pulled = client.pull(parse_reference(ref_on(tls)))
        assert client.base_url == f"https://{tls.host}"
    assert pulled.manifest_digest == image.manifest_digest
    assert len(recorder.sent) >= 3 and set(recorder.schemes) == {"https"}


def test_a_plain_loopback_registry_falls_back_to_http_once(registry: RegistryServer,
                                                           image: PushedImage) -> None:
    """One HTTPS attempt (the server answers it in plain HTTP), then every request in plain
    HTTP: the scheme is decided once for the client, not per request."""
    recorder = Recorder()
    with client_for(registry, recorder) as client:
        pulled = client.pull(parse_reference(ref_on(registry)))
        assert client.base_url == f"http://{registry.host}"
    assert pulled.manifest_digest == image.manifest_digest
    assert recorder.schemes[0] == "https"
    assert recorder.schemes[1:] == ["http"] * (len(recorder.sent) - 1)
    assert len(recorder.sent) >= 4


def test_an_untrusted_certificate_is_one_clear_error_and_no_fallback(
        tls: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # certifi's bundle: not the test CA
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    recorder = Recorder()
    with client_for(tls, recorder) as client, pytest.raises(RegistryError) as info:
        client.resolve(parse_reference(ref_on(tls)))
    assert info.value.message.startswith(
        f"the registry at https://{tls.host} presented a certificate this machine does not "
        "trust (unable to get local issuer certificate)")
    assert info.value.hint and "SSL_CERT_FILE" in info.value.hint
    assert recorder.schemes == ["https"]  # not retried, and never asked in plain HTTP


def test_insecure_false_never_falls_back(registry: RegistryServer) -> None:
    recorder = Recorder()
    with client_for(registry, recorder, insecure=False, attempts=2) as client, \
            pytest.raises(RegistryError) as info:
        client.resolve(parse_reference(ref_on(registry)))
    assert f"cannot reach the registry at https://{registry.host}" in info.value.message
    assert "the server does not speak TLS (WRONG_VERSION_NUMBER)" in info.value.message
    assert recorder.schemes == ["https", "https"]


def test_insecure_true_forces_plain_http_even_to_a_tls_registry(tls: RegistryServer,
                                                                trusted: LocalCA) -> None:
    """The defect's own symptom, now only when asked for, and explained."""
    recorder = Recorder()
    with client_for(tls, recorder, insecure=True) as client, \
            pytest.raises(RegistryError) as info:
        client.resolve(parse_reference(ref_on(tls)))
    assert "the registry answered 400" in info.value.message
    assert info.value.hint and "if the registry speaks HTTPS, leave registry.insecure unset" \
        in info.value.hint
    assert recorder.schemes == ["http"]


def test_a_login_travels_over_tls_to_a_loopback_registry(
        tls_login: RegistryServer, image: PushedImage, trusted: LocalCA) -> None:
    recorder = Recorder()
    good = Credentials(username=USER, secret=CANARY)
    with client_for(tls_login, recorder, credentials=good) as client:
        assert client.pull(parse_reference(ref_on(tls_login))).manifest_digest == \
            image.manifest_digest
    assert ("https", True) in recorder.sent and set(recorder.schemes) == {"https"}


def test_credentials_never_go_in_the_clear_to_a_non_loopback_host(
        tmp_path: Path, registry: RegistryServer, image: PushedImage) -> None:
    """A real registry on this machine's non-loopback address, with a login, in plain HTTP:
    forced by `insecure = true`, the client refuses to send the credentials; unset, it never
    tries plain HTTP at all (the fallback is for loopback only)."""
    address = non_loopback_address()
    with running_registry(tmp_path / "lan", storage=registry.storage, bind=address,
                          auth_yaml=basic_auth_yaml(tmp_path, USER, CANARY)) as lan:
        good = Credentials(username=USER, secret=CANARY)
        forced = Recorder()
        with client_for(lan, forced, credentials=good, insecure=True) as client, \
                pytest.raises(RegistryError) as info:
            client.resolve(parse_reference(ref_on(lan)))
        assert "sends credentials in the clear only to a loopback registry" in \
            info.value.message
        assert forced.sent == [("http", False)]
        unset = Recorder()
        with client_for(lan, unset, credentials=good, attempts=2) as client, \
                pytest.raises(RegistryError):
            client.resolve(parse_reference(ref_on(lan)))
        assert unset.schemes == ["https", "https"]


# --- the task -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tls", "registry"])  # registry: plain HTTP
def test_verify_layers_with_insecure_unset(which: str, request: pytest.FixtureRequest,
                                           ca: LocalCA, image: PushedImage,
                                           tmp_path: Path) -> None:
    server: RegistryServer = request.getfixturevalue(which)
    env = {**env_for(server, tmp_path), "SSL_CERT_FILE": str(ca.ca), "SSL_CERT_DIR": ""}
    done = run_task("verify-layers", "--ref", ref_on(server), env=env)
    assert done.returncode == 0, done.stderr
    assert f"manifest {image.manifest_digest} (linux/amd64)" in done.stdout
    assert done.stdout.splitlines()[-1] == "OK: every layer rule holds"


def test_verify_layers_logs_in_over_tls_with_the_team_token(
        tls_login: RegistryServer, ca: LocalCA, image: PushedImage, tmp_path: Path) -> None:
    env = {**env_for(tls_login, tmp_path), "SSL_CERT_FILE": str(ca.ca), "SSL_CERT_DIR": "",
           "GPURL_REGISTRY_TOKEN": CANARY, "GPURL_REGISTRY_USER": USER}
    done = run_task("verify-layers", "--ref", ref_on(tls_login), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "OK: every layer rule holds"
    assert CANARY not in done.stdout + done.stderr


def test_verify_layers_with_an_untrusted_certificate_is_one_clear_line(
        tls: RegistryServer, tmp_path: Path) -> None:
    env = {**env_for(tls, tmp_path), "SSL_CERT_FILE": "", "SSL_CERT_DIR": ""}
    done = run_task("verify-layers", "--ref", ref_on(tls), env=env)
    assert done.returncode == RegistryError.exit_code
    assert done.stdout == ""
    error, hint = done.stderr.strip().splitlines()
    assert error == (f"error: the registry at https://{tls.host} presented a certificate this "
                     "machine does not trust (unable to get local issuer certificate)")
    assert hint.startswith("  hint: certificates are checked against certifi's bundle")
    assert "Traceback" not in done.stderr
