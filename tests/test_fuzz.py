"""Issue 14 fuzzers: arbitrary input through the real task code ends in success or one clear
error, never a traceback or an internal error, and a failed run changes no file.

Each target runs the task's one function inside the tasks' own handler (`cli.clean_failures`):
registry documents are served by the loopback fault proxy in front of the real registry;
config values are written as TOML into a scratch checkout; launcher, Dockerfile and lock
bytes are written where the config points. Example counts are bounded (FUZZ_EXAMPLES) so the
whole file stays well under two minutes on two cores; GPURL_FUZZ_SCALE multiplies them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invoke.exceptions import Exit

from gpurl_tasks import cli
from gpurl_tasks.config import _known_keys, load_config
from gpurl_tasks.errors import ExitCode
from tests.support.faults import Fault, FaultProxy
from tests.support.pusher import PushedImage, push_image, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, require_registry, running_registry
from tests.support.tasks_runner import REPO_ROOT

SCALE = float(os.environ.get("GPURL_FUZZ_SCALE", "1"))
FUZZ_EXAMPLES = {"manifest": 120, "index": 60, "image-config": 60, "toml": 150, "launcher": 80,
                 "dockerfile": 60, "lock": 150, "slices": 80}
TAG = "gpu-rl-abc1234"  # an immutable tag, so pin gets as far as the launcher


def examples(target: str) -> Any:
    return settings(max_examples=max(1, int(FUZZ_EXAMPLES[target] * SCALE)), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def settle(call: Callable[[], Any], seen: list[dict[str, Any]] | None = None) -> tuple[int, str]:
    """Run one task function as the task does -> (exit code, the line(s) a user sees); the
    outcome's JSON is appended to `seen` when given."""
    try:
        with cli.clean_failures():
            outcome = call()
            if outcome is not None and hasattr(outcome, "exit_code"):
                outcome.human()
                document = json.loads(json.dumps(outcome.to_json()))
                if seen is not None:
                    seen.append(document)
                return int(outcome.exit_code), ""
    except Exit as exc:
        return exc.code, str(exc.message or "")
    return 0, ""


def assert_clean(result: tuple[int, str]) -> int:
    code, text = result
    assert code != ExitCode.INTERNAL, text
    assert "Traceback" not in text
    if code and text:
        assert text.startswith("error: "), text
        assert len(text.splitlines()) <= 2 and len(text) < 2000, text
    return code


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.parts}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12)


# --- registry documents ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[RegistryServer, FaultProxy, PushedImage]]:
    require_registry()
    with running_registry(tmp_path_factory.mktemp("fuzzreg")) as server, \
            FaultProxy(server.port) as proxy:
        layers = [tar_gz_layer({"os": b"debian"}, "ADD rootfs /"),
                  random_layer(5_000, "RUN uv sync --frozen", seed=7)]
        yield server, proxy, push_image(server.url, "org/img", layers, tag=TAG)


def _verify(proxy: FaultProxy, *faults: Fault) -> int:
    from gpurl_tasks.release.flow import verify_reference

    proxy.faults.clear()
    for fault in faults:
        proxy.inject(fault)
    config = load_config(REPO_ROOT, profile="demo",
                         env={"GPURL_REGISTRY_HOST": proxy.host, "HOME": "/nonexistent",
                              "GPURL_VERIFY_MIN_LAYERS": "1"})
    seen: list[dict[str, Any]] = []
    code = assert_clean(settle(lambda: verify_reference(config, f"{proxy.host}/org/img:{TAG}"),
                               seen))
    if seen:  # the verdict agrees with the rules on what was read, whatever the registry served
        report = seen[0]
        rules, sizes = report["rules"], [layer["size"] for layer in report["layers"]]
        holds = (len(sizes) >= rules["min_layers"] and all(0 <= n <= rules["cap"] for n in sizes)
                 and not any(f["failing"] for f in report["findings"]))
        assert report["ok"] == holds == (code == 0), report
        assert report["total_bytes"] == sum(sizes) and report["layer_count"] == len(sizes)
    return code


def _field_mutations(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with some fields (top level or in a layer / entry) replaced by arbitrary JSON."""
    def mutate(doc: dict[str, Any], edits: list[tuple[int, str, Any]]) -> dict[str, Any]:
        doc = json.loads(json.dumps(doc))
        for where, key, value in edits:
            lists = [v for v in doc.values() if isinstance(v, list) and v]
            target = doc
            if where and lists and isinstance(lists[0][0], dict):
                target = lists[0][where % len(lists[0])]
            target[key] = value
        return doc
    keys = st.sampled_from(sorted({*base, "size", "digest", "mediaType", "platform", "layers",
                                   "manifests", "config", "history", "Labels"}))
    return st.builds(mutate, st.just(base),
                     st.lists(st.tuples(st.integers(0, 3), keys, json_values), max_size=3))


@pytest.mark.integration
def test_fuzz_manifest(served: tuple[RegistryServer, FaultProxy, PushedImage]) -> None:
    _, proxy, image = served

    base = json.loads(image.manifest)

    def sized(sizes: list[int]) -> dict[str, Any]:
        """The real manifest with layer sizes of any magnitude (verify's arithmetic)."""
        layers = [{**base["layers"][i % len(base["layers"])], "size": size}
                  for i, size in enumerate(sizes)]
        return {**base, "layers": layers}

    @examples("manifest")
    @given(st.one_of(json_values, _field_mutations(base), st.builds(
        sized, st.lists(st.integers(0, 2**80), max_size=30))))
    def run(document: Any) -> None:
        body = json.dumps(document).encode()
        _verify(proxy, Fault("/manifests/", "serve", times=4, body=body))
    run()


@pytest.mark.integration
def test_fuzz_index(served: tuple[RegistryServer, FaultProxy, PushedImage]) -> None:
    _, proxy, image = served
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "digest": image.manifest_digest, "size": len(image.manifest),
                            "platform": {"os": "linux", "architecture": "amd64"}}]}

    @examples("index")
    @given(st.one_of(json_values, _field_mutations(index)))
    def run(document: Any) -> None:
        body = json.dumps(document).encode()
        _verify(proxy, Fault(f"/manifests/{TAG}", "serve", times=2, body=body,
                             content_type="application/vnd.oci.image.index.v1+json"),
                Fault("/manifests/sha256:" + hashlib.sha256(body).hexdigest(), "serve",
                      times=2, body=body, content_type="application/vnd.oci.image.index.v1+json"))
    run()


@pytest.mark.integration
def test_fuzz_image_config(served: tuple[RegistryServer, FaultProxy, PushedImage]) -> None:
    _, proxy, image = served
    base = {"architecture": "amd64", "os": "linux", "config": {"Labels": {"a": "b"}},
            "history": [{"created_by": "ADD rootfs /"}, {"created_by": "RUN uv sync"}]}

    @examples("image-config")
    @given(st.one_of(json_values, _field_mutations(base)))
    def run(document: Any) -> None:
        config = json.dumps(document).encode()
        digest = "sha256:" + hashlib.sha256(config).hexdigest()
        manifest = json.loads(image.manifest)
        manifest["config"] = {**manifest["config"], "digest": digest, "size": len(config)}
        _verify(proxy, Fault("/manifests/", "serve", times=4, body=json.dumps(manifest).encode()),
                Fault(f"/blobs/{digest}", "serve", times=2, body=config,
                      content_type="application/json"))
    run()


# --- launcher bytes through pin ----------------------------------------------------------------


@pytest.mark.integration
def test_fuzz_launcher(served: tuple[RegistryServer, FaultProxy, PushedImage],
                       repo_tmp: Path) -> None:
    from gpurl_tasks.release.flow import pin_task

    server, _, _ = served
    launcher = repo_tmp / "launch.py"
    valid = b'IMAGE = "old"\n'
    config_env = {"GPURL_REGISTRY_HOST": server.host, "HOME": "/nonexistent",
                  "GPURL_VERIFY_MIN_LAYERS": "1", "GPURL_LAUNCHER_PATH": str(launcher),
                  "GPURL_LAUNCHER_VARIABLE": "IMAGE", "GPURL_REGISTRY_TAG_PREFIX": "gpu-rl"}
    texts = st.one_of(
        st.binary(max_size=200),
        st.builds(lambda a, b: a + valid + b, st.binary(max_size=40), st.binary(max_size=40)),
        st.text(max_size=120).map(str.encode),
        st.sampled_from([b'IMAGE = f"x"\n', b"IMAGE = 1\n", b'IMAGE: str = "a"\nIMAGE = "b"\n',
                         b'def f():\n    IMAGE = "x"\n', b'IMAGE = "a" "b"\n', b"\xef\xbb\xbf" + valid,
                         b'IMAGE = """x"""\n', b"IMAGE = (\n'x')\n", b'IMAGE = "x" # \xe9\n']))

    @examples("launcher")
    @given(texts)
    def run(data: bytes) -> None:
        launcher.write_bytes(data)
        config = load_config(REPO_ROOT, profile="demo", env=config_env)
        code = assert_clean(settle(lambda: pin_task(
            config, f"{server.host}/org/img:{TAG}", force=True, dry_run=False,
            today=dt.date(2026, 1, 1), warn=lambda _: None)))
        if code:
            assert launcher.read_bytes() == data
    run()


# --- [tool.gpurl] values ----------------------------------------------------------------------

_SAFE_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="/\\"),
                     max_size=10)
toml_values = st.recursive(
    st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | _SAFE_TEXT
    | st.sampled_from(["4GB", "1MB", "0", "-1GB", "iris", "local", "compressed", "gpu-rl",
                       "demo", "1e3", "4 GB", "true"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_SAFE_TEXT, inner, max_size=3),
    max_leaves=8)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") \
            if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml(v)}"
                           for k, v in value.items()) + "}"


def _tool_table() -> st.SearchStrategy[dict[str, Any]]:
    keys = sorted(_known_keys())
    sections = sorted({k.split(".")[0] for k in keys if "." in k})
    entry = st.one_of(
        st.tuples(st.sampled_from(keys), toml_values),
        st.tuples(st.sampled_from(sections), toml_values),
        st.tuples(st.sampled_from(["profiles", "default-profile"]), toml_values),
        st.tuples(st.sampled_from([f"profiles.demo.{k}" for k in keys]), toml_values),
        st.tuples(_SAFE_TEXT, toml_values))

    def build(entries: list[tuple[str, Any]]) -> dict[str, Any]:
        table: dict[str, Any] = {"default-profile": "demo", "profiles": {"demo": {}}}
        for dotted, value in entries:
            node = table
            *parents, last = dotted.split(".") if dotted.count(".") <= 3 else [dotted]
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[last] = value
        return table
    return st.builds(build, st.lists(entry, max_size=4))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch checkout: a workspace with a one-package lock and a committed Dockerfile."""
    root = tmp_path_factory.mktemp("fuzzcheckout")
    (root / "uv.lock").write_text(
        'version = 1\nrequires-python = ">=3.11"\n\n[[package]]\nname = "ws"\n'
        'version = "0.1.0"\nsource = { virtual = "." }\n')
    return root


@pytest.mark.integration
def test_fuzz_config(checkout: Path) -> None:
    from gpurl_tasks.dockerfile.generate import generate_profiles
    from gpurl_tasks.plan.profile import plan_for_config

    @examples("toml")
    @given(_tool_table())
    def run(table: dict[str, Any]) -> None:
        for path in checkout.iterdir():
            if path.name != "uv.lock":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        text = "[tool.gpurl]\n" + "".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml(v)}\n"
                                          for k, v in table.items())
        (checkout / "pyproject.toml").write_text(text)
        before = snapshot(checkout)
        assert_clean(settle(lambda: plan_for_config(load_config(checkout, env={}))))
        assert snapshot(checkout) == before
        code = assert_clean(settle(lambda: generate_profiles(checkout, None, check=False)))
        if code:
            assert snapshot(checkout) == before
    run()


# --- Dockerfile and lock bytes --------------------------------------------------------------

VALID_DOCKERFILE = (REPO_ROOT / "docker" / "Dockerfile.demo").read_bytes() \
    if (REPO_ROOT / "docker" / "Dockerfile.demo").exists() else b"FROM debian\n"


def _bytes_like(valid: bytes) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, and the valid file with a few bytes spliced in or cut out."""
    def splice(cuts: list[tuple[int, bytes, int]]) -> bytes:
        data = valid
        for at, insert, drop in cuts:
            at %= len(data) + 1
            data = data[:at] + insert + data[at + drop:]
        return data
    return st.one_of(st.binary(max_size=300),
                     st.builds(splice, st.lists(st.tuples(st.integers(0, 10**6),
                                                          st.binary(max_size=8),
                                                          st.integers(0, 40)),
                                                min_size=1, max_size=3)))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, checkout: Path) -> Path:
    """A git repository with a valid Dockerfile and lock committed (rebuild-needed's --since)."""
    root = tmp_path_factory.mktemp("fuzzrepo")
    (root / "pyproject.toml").write_text(
        '[tool.gpurl]\n[tool.gpurl.build]\ndockerfile = "Dockerfile"\n'
        f'wheelhouse = "{root / "wheels"}"\n')
    (root / "wheels").mkdir()
    (root / "Dockerfile").write_bytes(VALID_DOCKERFILE)
    shutil.copy(checkout / "uv.lock", root / "uv.lock")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "valid"]):
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True)
    return root


@pytest.mark.integration
def test_fuzz_dockerfile(repo: Path) -> None:
    from gpurl_tasks.rebuild.inputs import rebuild_needed
    from gpurl_tasks.rebuild.wheelhouse import check_source

    config = load_config(repo, env={})

    @examples("dockerfile")
    @given(_bytes_like(VALID_DOCKERFILE))
    def run(data: bytes) -> None:
        (repo / "Dockerfile").write_bytes(data)
        assert_clean(settle(lambda: rebuild_needed(config, since="HEAD", env={})))
        assert_clean(settle(lambda: check_source(config, None)))
        assert (repo / "Dockerfile").read_bytes() == data
    run()


@pytest.mark.integration
def test_fuzz_lock(checkout: Path) -> None:
    from gpurl_tasks.plan.profile import plan_for_config

    sample = REPO_ROOT / "examples" / "demo" / "uv.lock"
    valid = sample.read_bytes() if sample.exists() else (checkout / "uv.lock").read_bytes()
    root = checkout.parent / "fuzzlock"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("[tool.gpurl]\n")

    @examples("lock")
    @given(_bytes_like(valid))
    def run(data: bytes) -> None:
        (root / "uv.lock").write_bytes(data)
        code = assert_clean(settle(lambda: plan_for_config(load_config(root, env={}))))
        if code == 0:  # a plan comes only from a lock the one reader accepts whole
            from gpurl_tasks.plan.lock import parse_lock
            assert parse_lock(data.decode("utf-8")).packages
    run()


@pytest.mark.integration
def test_fuzz_slice_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Arbitrary bytes in a committed slice file (the previous plan) reach the real planner and
    generator: success or one clear error; generated files change only when generate succeeds."""
    from gpurl_tasks.dockerfile.generate import generate
    from gpurl_tasks.plan.profile import plan_for_config

    root = tmp_path_factory.mktemp("fuzzslices")
    shutil.copytree(REPO_ROOT / "examples" / "demo", root / "examples" / "demo")
    shutil.copytree(REPO_ROOT / "docker" / "layers" / "demo", root / "docker" / "layers" / "demo")
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO_ROOT / "sizes", root / "sizes")
    config = load_config(root, profile="demo", env={})
    generate(config)  # a valid starting point: Dockerfile and slices as committed
    slices = sorted((root / "docker" / "layers" / "demo").rglob("*.txt"))  # shared/ and per variant
    valid = slices[-1].read_bytes()

    @examples("slices")
    @given(_bytes_like(valid), st.booleans())
    def run(data: bytes, write: bool) -> None:
        slices[-1].write_bytes(data)
        before = snapshot(root / "docker")
        assert_clean(settle(lambda: plan_for_config(config)))
        code = assert_clean(settle(lambda: generate(config, check=not write)))
        if code:  # a failed run leaves every generated file as it was
            assert snapshot(root / "docker") == before
    run()
