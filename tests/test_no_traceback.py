"""Issue 14: bad input ends in one clear line and an exit code, never a traceback.

The registry cases run `invoke` in a subprocess against the real loopback registry behind the
fault proxy; the config and file cases call the task's one function inside the tasks' own
handler (`cli.clean_failures`), because the config root of a subprocess is the checkout.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from invoke.exceptions import Exit

from gpurl_tasks import cli
from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.generate import generate_profiles
from gpurl_tasks.errors import ExitCode
from tests.support.faults import Fault, FaultProxy
from tests.support.pusher import PushedImage, push_image, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import run_task

TAG = "gpu-rl-1234567"


def settle(call: Callable[[], Any]) -> tuple[int, str]:
    """Run `call` inside the tasks' handler -> (exit code, the line(s) a user would see)."""
    try:
        with cli.clean_failures():
            call()
    except Exit as exc:
        return exc.code, str(exc.message or "")
    return 0, ""


def one_clear_error(result: tuple[int, str], *needles: str) -> None:
    code, text = result
    assert code not in (0, ExitCode.INTERNAL), text
    assert text.startswith("error: ") and "Traceback" not in text, text
    for needle in needles:
        assert needle in text, text


# --- the handler itself ----------------------------------------------------------------


def test_an_unexpected_exception_is_one_internal_error_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.setenv("GHCR_TOKEN", "canary-internal-77a1")

    def boom() -> None:
        raise KeyError("canary-internal-77a1 in a message")

    code, text = settle(boom)
    assert code == ExitCode.INTERNAL
    assert text.startswith("internal error: KeyError: ") and "GPURL_DEBUG=1" in text
    assert "canary-internal-77a1" not in text and "\n" not in text
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(KeyError):
        settle(boom)


@pytest.mark.parametrize(("raised", "code"), [
    (lambda s: cli.ConfigError(f"bad {s}", hint=f"not {s}"), ExitCode.ERROR),
    (lambda s: KeyError(f"{s} in a bug"), ExitCode.INTERNAL),
    (lambda s: KeyboardInterrupt(), ExitCode.INTERRUPTED),
])
def test_under_json_every_failure_is_one_redacted_object_on_stdout(
        raised: Callable[[str], BaseException], code: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--json: an error, a bug and Ctrl-C each print {"error", "hint", "exit_code"} on stdout,
    with the exit status that object names and no secret from the environment in it."""
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    secret = "ghp_" + "j" * 36
    monkeypatch.setenv("GPURL_REGISTRY_TOKEN", secret)
    with pytest.raises(Exit) as info, cli.clean_failures(as_json=True):
        raise raised(secret)
    out = capsys.readouterr().out
    failure = json.loads(out)
    assert set(failure) == {"error", "hint", "exit_code"}
    assert failure["exit_code"] == info.value.code == code
    assert secret not in out + str(info.value.message)
    assert str(info.value.message).startswith(("error: ", "internal error: ", "interrupted"))


def test_the_internal_error_exit_code_reaches_the_shell() -> None:
    """A real task with GPURL_DEBUG unset: its error path is the handler's."""
    done = run_task("build", "--cpu", "-4", "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: --cpu must be a positive number, not '-4'")


# --- item 7 and flags -------------------------------------------------------------------

EMPTY = [("verify-layers", "--ref"), ("pin", "--ref"), ("rebuild-needed", "--since"),
         ("check-wheels", "--source"), ("plan", "--lock"), ("pin", "--launcher")]


@pytest.mark.parametrize(("task", "flag"), EMPTY, ids=[" ".join(e) for e in EMPTY])
def test_an_empty_value_is_an_error_not_the_default(task: str, flag: str) -> None:
    done = run_task(task, flag, "")
    assert done.returncode == 2, done.stderr
    assert "is empty" in done.stderr and "Traceback" not in done.stderr and not done.stdout


@pytest.mark.parametrize(("flag", "value"), [("--cpu", "-4"), ("--cpu", "0"), ("--cpu", "inf"),
                                             ("--cpu", "many"), ("--timeout", "-1"),
                                             ("--timeout", "1.5")])
def test_build_numbers_must_be_positive(flag: str, value: str) -> None:
    done = run_task("build", flag, value, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert f"{flag} must be a positive" in done.stderr and "Traceback" not in done.stderr


# --- item 3: config of the wrong type or shape --------------------------------------------

CONFIGS = [
    ("[tool.gpurl\nlock = 1\n", "is not valid TOML"),
    ('[tool.gpurl]\nprofiles = "gpu-rl"\n', "[tool.gpurl.profiles] must be a table, not 'gpu-rl'"),
    ('[tool.gpurl]\ndefault-profile = "a"\n[tool.gpurl.profiles]\na = "gpu-rl"\n',
     "[tool.gpurl.profiles.a] must be a table, not 'gpu-rl'"),
    ("[tool.gpurl.layers]\ncap = true\n", "layers.cap in [tool.gpurl] must be a size"),
    ("[tool.gpurl.verify]\nmin-layers = -3\n",
     "verify.min-layers in [tool.gpurl] must be a non-negative integer, not -3"),
    ("[tool.gpurl.verify]\nmin-layers = 2.5\n", "verify.min-layers in [tool.gpurl] must be an integer"),
    ('[tool.gpurl]\nlayers = "4GB"\n', "[tool.gpurl.layers] must be a table, not '4GB'"),
    ("[tool]\ngpurl = 3\n", "[tool.gpurl] must be a table, not 3"),
    ("tool = []\n", "[tool] must be a table"),
    ('[tool.gpurl.python]\nextras = "vllm"\n', "python.extras in [tool.gpurl] must be a list of strings"),
    ("[tool.gpurl.registry]\nhost = 5\n", "registry.host in [tool.gpurl] must be a string, not 5"),
    ('[tool.gpurl]\nbackend = "irs"\n', "did you mean 'iris'"),
    ("[tool.gpurl.cluster]\ncpu = 1e400\n", "cluster.cpu in [tool.gpurl] must be an integer"),
    ('[tool.gpurl]\ndefault-profile = ""\n', "default-profile in [tool.gpurl] must be a profile"),
    ('[tool.gpurl.launcher]\npath = ""\n', "launcher.path in [tool.gpurl] must be a path, not empty"),
    ("[tool.gpurl.layers]\ncap = -5\n",
     'layers.cap in [tool.gpurl] must be a size like "4GB" or a byte count, not -5'),
    ('[tool.gpurl.profiles.a.layers]\ncap = "4 GB of bananas"\n[tool.gpurl]\ndefault-profile = "a"\n',
     "layers.cap in [tool.gpurl.profiles.a] must be a size"),
]


@pytest.mark.parametrize(("text", "needle"), CONFIGS, ids=[n[:40] for _, n in CONFIGS])
def test_bad_config_is_one_error_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    one_clear_error(settle(lambda: load_config(tmp_path, env={})), needle)
    if "profiles" in text or "[tool.gpurl\n" in text:  # generate reads only the profiles
        one_clear_error(settle(lambda: generate_profiles(tmp_path, None, check=False)), needle)


def test_bad_environment_values_name_the_variable(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.gpurl]\n")
    one_clear_error(settle(lambda: load_config(tmp_path, env={"GPURL_VERIFY_MIN_LAYERS": "-4"})),
                    "verify.min-layers in $GPURL_VERIFY_MIN_LAYERS must be a non-negative integer")
    one_clear_error(settle(lambda: load_config(tmp_path, env={"GPURL_LAYERS_CAP": "true"})),
                    "layers.cap in $GPURL_LAYERS_CAP must be a size")


def test_a_pyproject_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b"[tool.gpurl]\n# caf\xe9\n")
    one_clear_error(settle(lambda: load_config(tmp_path, env={})),
                    "is not UTF-8 text: byte 0xe9 at offset 18")


# --- item 6: files that are not UTF-8 (in the tree and in git history) -------------------


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def latin1_repo(tmp_path: Path) -> Path:
    """A workspace whose Dockerfile has a Latin-1 byte, committed and in the tree."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpurl]\n[tool.gpurl.build]\ndockerfile = "Dockerfile"\n'
        f'wheelhouse = "{tmp_path / "wheels"}"\n')
    (tmp_path / "Dockerfile").write_bytes(b"FROM debian\n# r\xe9sum\xe9\nARG TORCH_VERSION=2.11.0\n")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "MANIFEST").write_bytes(b"caf\xe9  sha256\n")
    (tmp_path / "uv.lock").write_text(
        'version = 1\nrequires-python = ">=3.11"\n\n[[package]]\nname = "ws"\n'
        'version = "0.1.0"\nsource = { virtual = "." }\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "latin-1")
    return tmp_path


def test_rebuild_needed_names_the_file_and_offset(latin1_repo: Path) -> None:
    from gpurl_tasks.rebuild.inputs import rebuild_needed

    config = load_config(latin1_repo, env={})
    one_clear_error(settle(lambda: rebuild_needed(config, since="HEAD", env={})),
                    "Dockerfile", "byte 0xe9 at offset 15")
    (latin1_repo / "Dockerfile").write_text("FROM debian\n")  # the tree is fine, history is not
    one_clear_error(settle(lambda: rebuild_needed(config, since="HEAD", env={})),
                    ":Dockerfile is not UTF-8", "byte 0xe9 at offset 15")


def test_check_wheels_names_the_file_and_offset(latin1_repo: Path) -> None:
    from gpurl_tasks.rebuild.wheelhouse import check_source

    # a profile with a compiled wheel (one without any has nothing to check)
    config = load_config(latin1_repo, env={}, overrides={"build.wheel-globs": ["ext-*.whl"]})
    one_clear_error(settle(lambda: check_source(config, None)), "byte 0xe9 at offset")
    (latin1_repo / "Dockerfile").write_text("FROM debian\n")
    one_clear_error(settle(lambda: check_source(config, None)), "MANIFEST", "byte 0xe9 at offset 3")


def test_size_files_that_are_not_utf8_name_the_byte(latin1_repo: Path) -> None:
    from gpurl_tasks.plan.sizes import load_size_sources

    bad = latin1_repo / "sizes.json"
    bad.write_bytes(b'{"caf\xe9": 1}')
    one_clear_error(settle(lambda: load_size_sources(bad, None)), "sizes.json",
                    "byte 0xe9 at offset 5")
    one_clear_error(settle(lambda: load_size_sources(None, bad)), "byte 0xe9 at offset 5")


# --- items 4 and 5: registry documents and HTTP faults --------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[RegistryServer, FaultProxy, PushedImage]]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp)) as server, \
            FaultProxy(server.port) as proxy:
        layers = [tar_gz_layer({"os": b"debian"}, "ADD rootfs /"),
                  random_layer(20_000, "RUN uv sync --frozen", seed=3)]
        yield server, proxy, push_image(server.url, "org/img", layers, tag=TAG)


def verify_via(proxy: FaultProxy, *faults: Fault) -> subprocess.CompletedProcess[str]:
    proxy.faults.clear()
    for fault in faults:
        proxy.inject(fault)
    return run_task("verify-layers", "--ref", f"{proxy.host}/org/img:{TAG}", "--min-layers", "1",
                    env={"GPURL_REGISTRY_HOST": proxy.host, "HOME": "/nonexistent"})


def _manifest(image: PushedImage, **changes: Any) -> bytes:
    document = json.loads(image.manifest)
    document.update(changes)
    return json.dumps(document).encode()


def _serve(body: bytes, content_type: str = "application/vnd.oci.image.manifest.v1+json"
           ) -> Fault:
    return Fault("/manifests/", "serve", times=10, body=body, content_type=content_type)


def _layer(image: PushedImage, **changes: Any) -> dict[str, Any]:
    return {**json.loads(image.manifest)["layers"][0], **changes}


DOCS: list[tuple[str, Callable[[PushedImage], bytes], str, str]] = [
    ("layers of strings", lambda i: _manifest(i, layers=["a", "b"]), "manifest",
     "layers[0] is 'a', not an object"),
    ("negative size", lambda i: _manifest(i, layers=[_layer(i, size=-120)]), "manifest",
     "layers[0]: size -120 is negative"),
    ("float size", lambda i: _manifest(i, layers=[_layer(i, size=1.5)]), "manifest",
     "field 'size' is 1.5"),
    ("string size", lambda i: _manifest(i, layers=[_layer(i, size="12")]), "manifest",
     "field 'size' is '12'"),
    ("boolean size", lambda i: _manifest(i, layers=[_layer(i, size=True)]), "manifest",
     "field 'size' is True"),
    ("layers is an object", lambda i: _manifest(i, layers={"a": 1}), "manifest",
     "field 'layers' is {'a': 1}"),
    ("config is a list", lambda i: _manifest(i, config=[1]), "manifest", "config is [1]"),
    ("bad digest", lambda i: _manifest(i, layers=[_layer(i, digest="md5:00")]), "manifest",
     "digest 'md5:00' is not sha256"),
    ("index of a string", lambda i: json.dumps({"schemaVersion": 2, "manifests": "x"}).encode(),
     "index", "field 'manifests' is 'x'"),
    ("index of numbers", lambda i: json.dumps({"schemaVersion": 2, "manifests": [1]}).encode(),
     "index", "manifests[0] is 1, not an object"),
    ("not an object", lambda i: b"[1, 2]", "manifest", "is not a JSON object"),
    ("not JSON", lambda i: b"\xff\xfe{", "manifest", "is not valid JSON"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("what", "body", "kind", "needle"), DOCS, ids=[d[0] for d in DOCS])
def test_registry_documents_of_another_shape(
        served: tuple[RegistryServer, FaultProxy, PushedImage], what: str,
        body: Callable[[PushedImage], bytes], kind: str, needle: str) -> None:
    _, proxy, image = served
    content_type = ("application/vnd.oci.image.index.v1+json" if kind == "index"
                    else "application/vnd.oci.image.manifest.v1+json")
    done = verify_via(proxy, _serve(body(image), content_type))
    assert done.returncode == 2, done.stdout + done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "OK" not in done.stdout and "internal error" not in done.stderr


@pytest.mark.integration
def test_a_config_blob_that_is_not_an_object(
        served: tuple[RegistryServer, FaultProxy, PushedImage]) -> None:
    _, proxy, image = served
    config = b'{"config": "x"}'
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = _manifest(image, config={"mediaType": "application/vnd.oci.image.config.v1+json",
                                        "digest": digest, "size": len(config)})
    done = verify_via(proxy, _serve(manifest), Fault(f"blobs/{digest}", "serve", times=10,
                                                     body=config, content_type="application/json"))
    assert done.returncode == 2 and "field 'config' is 'x', not an object" in done.stderr, \
        done.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("fault", "needle"), [
    (Fault(f"manifests/{TAG}", "loop", times=100), "too many redirects"),
    (Fault("/manifests/", "gzip", times=10), "does not decode as its Content-Encoding"),
])
def test_http_faults_are_one_line_naming_the_registry(
        served: tuple[RegistryServer, FaultProxy, PushedImage], fault: Fault,
        needle: str) -> None:
    _, proxy, _ = served
    done = verify_via(proxy, Fault(fault.path, fault.kind, times=fault.times))
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and proxy.host in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()  # a note on whose rules apply, the error, its hint
    assert "Traceback" not in done.stderr and len(lines) <= 3 and lines[-1].startswith("  hint: ")
