"""Pure parts of the registry client: references, the scheme choice, credentials, challenges."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import InvalidReference, parse_reference
from gpurl_tasks.oci.auth import Credentials, credentials_for, parse_challenge
from gpurl_tasks.oci.scheme import candidate_schemes, credentials_allowed
from gpurl_tasks.release.configured import client_settings
from tests.conftest import REPO_ROOT

DIGEST = "sha256:" + "ab" * 32

component = st.from_regex(r"[a-z0-9]{1,8}(?:[._-][a-z0-9]{1,8}){0,2}", fullmatch=True)
repository = st.lists(component, min_size=1, max_size=3).map("/".join)
tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
host = st.sampled_from(["ghcr.io", "127.0.0.1:5000", "localhost:41234", "registry.example.com"])


@given(host=host, repo=repository, tag=tag)
def test_tag_reference_round_trips(host: str, repo: str, tag: str) -> None:
    ref = parse_reference(f"{host}/{repo}:{tag}", default_host="unused.example")
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repo, tag, None)
    assert str(ref) == f"{host}/{repo}:{tag}"
    assert parse_reference(str(ref), default_host="other.example") == ref


@given(repo=repository)
def test_digest_reference_uses_the_digest(repo: str) -> None:
    # a first component with a dot would name a host, as with the Docker CLI; "org/" avoids it
    ref = parse_reference(f"org/{repo}@{DIGEST}", default_host="ghcr.io")
    assert ref.host == "ghcr.io"
    assert ref.reference == DIGEST
    assert ref.tag is None


def test_tag_and_digest_together_prefer_the_digest() -> None:
    ref = parse_reference(f"ghcr.io/org/img:gpu-rl-abc1234@{DIGEST}", default_host="x")
    assert ref.tag == "gpu-rl-abc1234"
    assert ref.reference == DIGEST


@pytest.mark.parametrize("text", [
    "ghcr.io/org/img",  # neither tag nor digest
    "ghcr.io/Org/img:tag",  # uppercase repository
    "ghcr.io/org/img@sha256:1234",  # short digest
    "ghcr.io/org/img:bad tag",
    ":tag",
])
def test_bad_references_raise_clear_errors(text: str) -> None:
    with pytest.raises(InvalidReference) as info:
        parse_reference(text, default_host="ghcr.io")
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(("host", "insecure", "schemes"), [
    ("127.0.0.1:5000", None, ("https", "http")),
    ("127.8.9.10:5000", None, ("https", "http")),
    ("localhost:5000", None, ("https", "http")),
    ("localhost", None, ("https", "http")),
    ("[::1]:5000", None, ("https", "http")),
    ("ghcr.io", None, ("https",)),
    ("registry.local:5000", None, ("https",)),
    ("10.0.0.5:5000", None, ("https",)),  # private but not loopback: HTTPS only
    ("localhost.evil.example", None, ("https",)),
    ("ghcr.io", True, ("http",)),
    ("127.0.0.1:5000", True, ("http",)),
    ("127.0.0.1:5000", False, ("https",)),
])
def test_https_first_and_plain_http_only_as_loopback_fallback_or_forced(
        host: str, insecure: bool | None, schemes: tuple[str, ...]) -> None:
    """The scheme decision: unset `insecure` gives loopback HTTPS then plain HTTP (the
    fallback), every other host HTTPS alone; `insecure` forces one scheme."""
    assert candidate_schemes(host, insecure) == schemes


@pytest.mark.parametrize(("scheme", "host", "allowed"), [
    ("https", "ghcr.io", True), ("https", "127.0.0.1:5000", True),
    ("http", "127.0.0.1:5000", True), ("http", "localhost", True), ("http", "[::1]:5000", True),
    ("http", "ghcr.io", False), ("http", "10.0.0.5:5000", False),
])
def test_credentials_in_the_clear_only_to_loopback(scheme: str, host: str,
                                                   allowed: bool) -> None:
    assert credentials_allowed(scheme, host) is allowed


def test_challenge_parsing() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:o/i:pull"')
    assert scheme == "bearer"
    assert params == {"realm": "https://ghcr.io/token", "service": "ghcr.io",
                      "scope": "repository:o/i:pull"}
    assert parse_challenge('Basic realm="registry"') == ("basic", {"realm": "registry"})


def test_environment_token_wins_over_docker_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"ghcr.io": {
        "auth": base64.b64encode(b"someone:from-file").decode()}}}))
    env = {"GPURL_REGISTRY_TOKEN": "from-env", "HOME": str(tmp_path)}
    creds = credentials_for("ghcr.io", registry_host="ghcr.io", env=env, user="penfever",
                            docker_config=config)
    assert creds is not None
    assert (creds.username, creds.secret) == ("penfever", "from-env")
    creds = credentials_for("ghcr.io", registry_host="ghcr.io", env={"HOME": str(tmp_path)},
                            docker_config=config)
    assert creds is not None
    assert (creds.username, creds.secret) == ("someone", "from-file")


def test_docker_config_matches_the_host_and_scheme_prefixed_keys(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "https://ghcr.io/v1/": {"username": "u", "password": "p"},
        "quay.io": {"auth": base64.b64encode(b"q:r").decode()},
    }}))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    creds = credentials_for("ghcr.io", registry_host="ghcr.io", env=env)
    assert creds is not None and (creds.username, creds.secret) == ("u", "p")
    assert credentials_for("docker.io", registry_host="ghcr.io", env=env) is None


def test_no_credentials_anywhere_is_anonymous(tmp_path: Path) -> None:
    assert credentials_for("ghcr.io", registry_host="ghcr.io", env={"HOME": str(tmp_path)}) is None


def test_secret_is_not_in_repr() -> None:
    creds = Credentials(username="u", secret="canary-7d1f")
    assert "canary-7d1f" not in repr(creds)
    assert "canary-7d1f" not in str(creds)


def test_the_token_is_only_offered_to_the_configured_registry(tmp_path: Path) -> None:
    from gpurl_tasks.config import load_config
    from gpurl_tasks.oci.connect import open_client

    repo = REPO_ROOT
    config = load_config(repo, env={"GPURL_REGISTRY_HOST": "ghcr.io"})
    env = {"GPURL_REGISTRY_TOKEN": "canary-3e1", "HOME": str(tmp_path)}
    ours = parse_reference("ghcr.io/org/img:gpu-rl-abc1234", default_host="ghcr.io")
    foreign = parse_reference("evil.example/org/img:gpu-rl-abc1234", default_host="ghcr.io")
    with open_client(client_settings(config), ours, env) as client:
        assert client._credentials is not None and client._credentials.secret == "canary-3e1"
        assert client._credentials.username == config.registry.user
        assert client.base_url == "https://ghcr.io"
    with open_client(client_settings(config), foreign, env) as client:
        assert client._credentials is None


@pytest.mark.parametrize("variable", ["GPURL_REGISTRY_TOKEN", "GHCR_TOKEN", "gh auth token"])
def test_a_token_goes_to_the_configured_host_only(tmp_path: Path, variable: str) -> None:
    """Every source of the team's token is withheld from a foreign host, which gets its own
    config.json entry (not the token, even though the token is set) or nothing."""
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "quay.io": {"auth": base64.b64encode(b"q:from-file").decode()}}}))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    gh = (lambda: "canary-gh") if variable == "gh auth token" else (lambda: None)
    if variable != "gh auth token":
        env[variable] = "canary-env"
    ours = credentials_for("ghcr.io", registry_host="ghcr.io", env=env, gh_token=gh)
    assert ours is not None and ours.secret in ("canary-env", "canary-gh")
    quay = credentials_for("quay.io", registry_host="ghcr.io", env=env, gh_token=gh)
    assert quay is not None and (quay.username, quay.secret) == ("q", "from-file")
    assert credentials_for("evil.example", registry_host="ghcr.io", env=env, gh_token=gh) is None


@pytest.mark.parametrize("body", ["{not json", json.dumps({"auths": {"ghcr.io": {"auth": "%%%"}}}),
                                  json.dumps({"auths": {"ghcr.io": {"auth": "bm9jb2xvbg=="}}})])
def test_a_broken_docker_config_is_one_clear_error(tmp_path: Path, body: str) -> None:
    (tmp_path / "config.json").write_text(body)
    with pytest.raises(RegistryError, match=r"config\.json"):
        credentials_for("ghcr.io", registry_host="ghcr.io", env={"DOCKER_CONFIG": str(tmp_path)})


def test_a_docker_config_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b'{"auths": {"\xe9": {}}}')
    with pytest.raises(RegistryError, match=r"not UTF-8 text: byte 0xe9 at offset 12"):
        credentials_for("ghcr.io", registry_host="ghcr.io", env={"DOCKER_CONFIG": str(tmp_path)})
