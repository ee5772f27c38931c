"""Issue 24: no value can change the structure of a generated artifact.

Hostile strings (newlines, quotes, `$()`, backticks, `;`, `../`, a leading `-`, spaces plus
options, non-ASCII, very long) are fed into uv.lock fields (through `parse_lock` and the slice
writer) and into config keys (through the real `generate` of a copy of the demo profile, and
`render_script` for the kaniko script). Each run ends in one GpurlError (never another
exception), or in an artifact whose parsed structure equals the one a benign value gives:
every slice line a `packaging` Requirement plus `--hash` options; the Dockerfile's instruction
list (dockerfile-parse) and the word count of each RUN; the script passing `bash -n` with the
same assignments, and its auth file naming exactly the configured host.
"""

from __future__ import annotations

import functools
import io
import json
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from gpurl_tasks.cluster.kaniko import render_script
from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.generate import generate
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.plan.lock import parse_lock
from gpurl_tasks.plan.slices import render_slice, slice_line
from tests.conftest import REPO_ROOT
from tests.test_lock_values import COMMIT, SHA, lock_text

ATTACKS = [
    "\n-r /etc/passwd", "\r\nRUN touch PWNED", " --index-url http://evil.example/simple",
    "$(touch PWNED)", "`touch PWNED`", '"; touch PWNED; "', "'; touch PWNED; '", "; id",
    "../../etc/passwd", "-o APT::Get::AllowUnauthenticated=1", "--upload-pack=touch PWNED",
    "${HOME}", "$HOME", "\\", "é✓", "\u2028", "\x00", "x" * 300, " ", "#", "\t-e",
]
hostile = st.one_of(
    st.sampled_from(ATTACKS),
    st.tuples(st.sampled_from(ATTACKS), st.text(
        alphabet=st.sampled_from(list("ab-_.:/@$`\"'\\;&|<>(){}[]*? \n\r\t#=,é")), max_size=12)
    ).map("".join),
)


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def outcome(make: Callable[[], Any]) -> Any:
    """The artifact `make` returns, or None for a clear error: any other exception fails."""
    try:
        return make()
    except GpurlError as exc:
        assert exc.message and "\n" not in exc.message.strip(), exc.message
        return None


# --- lock fields -> slice files -----------------------------------------------------------

def slice_shape(text: str) -> list[tuple[str, ...]]:
    """Each line of a slice file: a comment, one index option with one value, or one
    requirement (packaging parses it) with --hash options of `algo:hex`."""
    shape: list[tuple[str, ...]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            shape.append(("comment",))
            continue
        words = line.split(" ")
        if words[0] in ("--index-url", "--extra-index-url"):
            assert len(words) == 2 and not words[1].startswith("-"), line
            shape.append(("option", words[0]))
            continue
        head, *hashes = line.split(" --hash=")
        Requirement(head)
        assert all(h.count(":") == 1 and " " not in h for h in hashes), line
        shape.append(("requirement", str(len(hashes))))
    return shape


def slices_of(text: str) -> str:
    lock = parse_lock(text)
    return render_slice(slice_line(p) for p in lock.packages if not p.is_local)


def _source(kind: str, value: str) -> str:
    return f"{{ {kind} = {json.dumps(value)} }}"


BENIGN_SLICE = slice_shape(slices_of(lock_text()))
LOCK_FIELDS: dict[str, Callable[[str], str]] = {
    "name": lambda v: lock_text(name=v),
    "version": lambda v: lock_text(version="6.0.4" + v),
    "url": lambda v: lock_text(url="https://files.example/pyyaml.whl" + v),
    "hash": lambda v: lock_text(hash_=SHA + v),
    "registry": lambda v: lock_text(source=_source("registry", "https://pypi.org/simple" + v)),
    "git": lambda v: lock_text(source=_source("git", f"{v}https://example.com/r?rev=m#{COMMIT}")),
}


@pytest.mark.parametrize("field", sorted(LOCK_FIELDS))
def test_a_hostile_lock_field_is_an_error_or_leaves_the_slice_shape_alone(field: str) -> None:
    @_settings(25)
    @given(hostile)
    def run(value: str) -> None:
        text = outcome(lambda: slices_of(LOCK_FIELDS[field](value)))
        if text is not None:
            shape = slice_shape(text)
            assert [s[0] for s in shape] == [s[0] for s in BENIGN_SLICE] or field == "git", text
    run()


def test_the_issues_lock_examples_are_refused() -> None:
    for text in (lock_text(version="6.0.4 --index-url http://evil.example/simple"),
                 lock_text(source=_source("git", f"--upload-pack=touch PWNED#{COMMIT}"))):
        assert outcome(functools.partial(slices_of, text)) is None


# --- config keys -> the Dockerfile (real generate on a copy of the demo profile) -----------

@pytest.fixture(scope="module")
def demo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo-copy")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    keep = ("pyproject.toml", ".dockerignore", "examples/demo/", "docker/layers/demo/",
            "docker/Dockerfile.demo", "docker/wheelhouse-demo/", "sizes/")
    for name in filter(None, listed):
        if name.startswith(keep) and (REPO_ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, root / name)
    return root


def dockerfile_shape(text: str) -> list[tuple[str, int]]:
    parser = DockerfileParser(fileobj=io.BytesIO())  # in memory: no file written
    parser.content = text
    return [(i["instruction"], len(shlex.split(i["value"])) if i["instruction"] == "RUN" else 0)
            for i in parser.structure]


def generated(root: Path, env: dict[str, str]) -> str:
    config = load_config(root, profile="demo", env=env)
    generate(config)
    return config.build.dockerfile.read_text()


CONFIG_KEYS = {  # environment variable -> a benign value the hostile one is appended to
    "GPURL_BUILD_APT_PACKAGES": "ca-certificates",
    "GPURL_BUILD_INDEX_URL": "http://127.0.0.1:5006/simple",
    "GPURL_BUILD_IMPORT_ASSERTS": "import yaml",
    "GPURL_BUILD_UV_VERSION": "0.13.9",
    "GPURL_BUILD_BASE_IMAGE": "gpurl/bookworm-python:3.11",
    "GPURL_BUILD_WHEEL_GLOBS": "gpurl_demo_ext-*.whl",
    "GPURL_BUILD_BUILDER_REQUIREMENTS": "wheel",
}


@pytest.mark.parametrize("variable", sorted(CONFIG_KEYS))
def test_a_hostile_config_value_is_an_error_or_leaves_the_dockerfile_shape_alone(
        variable: str, demo_copy: Path) -> None:
    benign = dockerfile_shape(generated(demo_copy, {variable: CONFIG_KEYS[variable]}))

    @_settings(12)
    @given(hostile)
    def run(value: str) -> None:
        text = outcome(lambda: generated(demo_copy, {variable: CONFIG_KEYS[variable] + value}))
        if text is not None:
            assert dockerfile_shape(text) == benign, text
    run()


def test_the_issues_dockerfile_examples_are_refused(demo_copy: Path) -> None:
    for env in ({"GPURL_BUILD_APT_PACKAGES": "git$(touch PWNED)"},
                {"GPURL_BUILD_UV_VERSION": "0.13.9 --index-url http://evil.example/simple"},
                {"GPURL_BUILD_APT_PACKAGES": "git\nRUN touch PWNED"}):
        assert outcome(functools.partial(generated, demo_copy, env)) is None, env
    assert outcome(lambda: load_config(demo_copy, env={"GPURL_PROFILE": "demo\nRUN x"})) is None


def test_an_accepted_import_assert_stays_one_quoted_word(demo_copy: Path) -> None:
    text = generated(demo_copy, {"GPURL_BUILD_IMPORT_ASSERTS": 'print("$(id)" + "`id`" + "x")'})
    assert '"print(\\"\\$(id)\\" + \\"\\`id\\`\\" + \\"x\\")"' in text


# --- config keys -> the kaniko script and its auth file -------------------------------------

def script_shape(text: str, tmp: Path) -> list[str]:
    path = tmp / "script.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True, capture_output=True)
    return [line.split("=", 1)[0] for line in text.splitlines()
            if line[:1].isupper() and "=" in line.split(" ", 1)[0]]


def auth_hosts(text: str) -> list[str]:
    """Run the script's own auth `printf` line (the host its rendered JSON word), to stdout
    instead of the auth file: the hosts the file names."""
    line = next(ln for ln in text.splitlines() if ln.startswith("printf '{\"auths\""))
    printf, redirect = line.rsplit(' >"$DOCKER_CONFIG/', 1)
    assert redirect == '.config.tmp"'
    body = "\n".join(['AUTH="dTp0"', printf])
    out = subprocess.run(["bash", "-c", body], check=True, capture_output=True, text=True).stdout
    return list(json.loads(out)["auths"])


KANIKO_KEYS = {"registry.host": "ghcr.io", "registry.user": "builder",
               "registry.tag-prefix": "gpu-rl", "cluster.cache-repo": "ghcr.io/org/cache",
               "build.wheel-base-url": "https://example.com/wheels",
               "build.wheelhouse": "docker/wheelhouse"}


@pytest.mark.parametrize("key", sorted(KANIKO_KEYS))
def test_a_hostile_value_is_an_error_or_leaves_the_kaniko_script_shape_alone(
        key: str, tmp_path: Path) -> None:
    def script(value: str) -> str:
        return render_script(load_config(REPO_ROOT, profile="gpu-rl", env={},
                                          overrides={key: value}))

    benign = script_shape(script(KANIKO_KEYS[key]), tmp_path)

    @_settings(15)
    @given(hostile)
    def run(value: str) -> None:
        text = outcome(lambda: script(KANIKO_KEYS[key] + value))
        if text is not None:
            assert script_shape(text, tmp_path) == benign
            if key == "registry.host":
                assert auth_hosts(text) == [KANIKO_KEYS[key] + value]
    run()


def test_the_auth_file_names_exactly_the_configured_host(tmp_path: Path) -> None:
    text = render_script(load_config(REPO_ROOT, profile="gpu-rl", env={}))
    assert auth_hosts(text) == ["ghcr.io"]
    crafted = 'ghcr.io":{"auth":"x"},"evil.example'
    assert outcome(lambda: render_script(load_config(
        REPO_ROOT, profile="gpu-rl", env={}, overrides={"registry.host": crafted}))) is None
