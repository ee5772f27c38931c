"""An sdist whose build needs a package from a lower slice is staged with the lock's build
settings (`[tool.uv]` no-build-isolation-package / extra-build-dependencies), and fails,
with uv's reason, without them.

Real parts: real uv running the staging shell the local path's container runs
(`local/stage.stage_script`, built on `writer/staging`'s install argv and build-environment
script) and the cluster job's staging (writer/job.py, on the same argv), gpurl's loopback
index (`local/pyindex.serve`, which serves sdists), a real sdist whose in-tree build backend
imports a package that only a lower slice holds, and the repository's SkyRL workspace
pyproject for the settings."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpurl_tasks.dockerfile.recipe import slice_run
from gpurl_tasks.errors import ConfigError, PlanError
from gpurl_tasks.local.pyindex import serve
from gpurl_tasks.local.stage import StageBuild, stage_script
from gpurl_tasks.plan.buildenv import (
    BUILD_NOTE,
    UvBuildSettings,
    build_note,
    load_build_settings,
    parse_build_settings,
    slice_builds,
)
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, Slice, SliceBuild
from gpurl_tasks.writer.job import JobInputs, stager
from gpurl_tasks.writer.orchestration import ComposeError, Slot
from gpurl_tasks.writer.records import IndexLine, written_history
from gpurl_tasks.writer.retry import RetryRules
from tests.support.pyindex import make_wheel

ROOT = Path(__file__).resolve().parent.parent

# A PEP 517 backend inside the sdist: building it imports `basepkg`, and the built module
# records what basepkg said, so the test sees the build ran against the lower slice's copy.
_BACKEND = '''
import base64, hashlib, os, zipfile
import basepkg.build_help

def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = "needsbase-1.0.dist-info"
    files = {"needsbase.py": ("BUILT_WITH = %r\\n" % basepkg.build_help.version()).encode(),
             info + "/METADATA": b"Metadata-Version: 2.1\\nName: needsbase\\nVersion: 1.0\\n",
             info + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
                              b"Tag: py3-none-any\\n"}
    record = "".join(f"{p},{_hash(d)},{len(d)}\\n" for p, d in files.items()) + info + "/RECORD,,\\n"
    name = "needsbase-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for path, data in files.items():
            whl.writestr(path, data)
        whl.writestr(info + "/RECORD", record)
    return name
'''


def _sdist(directory: Path) -> Path:
    files = {"backend.py": _BACKEND.encode(),
             "PKG-INFO": b"Metadata-Version: 2.1\nName: needsbase\nVersion: 1.0\n",
             "pyproject.toml": b"[build-system]\nrequires = []\nbuild-backend = 'backend'\n"
                               b"backend-path = ['.']\n\n[project]\nname = 'needsbase'\n"
                               b"version = '1.0'\n"}
    path = directory / "needsbase-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"needsbase-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _pin(name: str, path: Path) -> str:
    return f"{name}==1.0 --hash=sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> object:
    if shutil.which("uv") is None:
        pytest.skip("no uv on PATH")
    files = tmp_path_factory.mktemp("files")
    base = make_wheel(files, "basepkg", "1.0", extra_files={
        "basepkg/build_help.py": b"def version():\n    return 'from-the-lower-slice'\n"})
    sdist = _sdist(files)
    others = tmp_path_factory.mktemp("other-index")
    other = make_wheel(others, "otherpkg", "1.0")
    with serve(files) as index, serve(others) as second:
        yield Served(url=index.url, base=base, sdist=sdist, other_url=second.url, other=other)


@dataclasses.dataclass(frozen=True)
class Served:
    """Two loopback indexes: basepkg and the sdist on one, otherpkg on the other (each lower
    slice names its own index, as the torch slice and the PyPI ones do)."""

    url: str
    base: Path
    sdist: Path
    other_url: str
    other: Path

    def lower_slices(self, directory: Path) -> list[Path]:
        other, base = directory / "00-other.txt", directory / "01-base.txt"
        other.write_text(f"--index-url {self.other_url}\n{_pin('otherpkg', self.other)}\n")
        base.write_text(f"--index-url {self.url}\n{_pin('basepkg', self.base)}\n")
        return [other, base]

    def upper_slice(self, directory: Path) -> Path:
        path = directory / "02-needsbase.txt"
        path.write_text(f"--index-url {self.url}\n{_pin('needsbase', self.sdist)}\n")
        return path


def _stage(tmp: Path, served: Served, no_isolation: tuple[str, ...] | None,
           ) -> subprocess.CompletedProcess[str]:
    """Stage the sdist's slice above basepkg's: with the settings (`no_isolation`: the
    packages built without isolation), or as a plain slice (None)."""
    venv = tmp / "opt" / "venv"
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   capture_output=True)
    lower, upper = served.lower_slices(tmp), served.upper_slice(tmp)
    build = None if no_isolation is None else \
        StageBuild(lower=tuple((p, str(p)) for p in lower), no_isolation=no_isolation)
    script = stage_script(venv=str(venv), slice_file=str(upper), stage=str(tmp / "stage"),
                          build=build, build_prefix=str(tmp / "build"))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={"PATH": str(Path(str(shutil.which("uv"))).parent) + ":/usr/bin:/bin",
                               "UV_CACHE_DIR": str(tmp / "uv-cache"), "HOME": str(tmp)})


def _built(tmp: Path) -> str:
    found = sorted((tmp / "stage").glob("lib/python*/site-packages/needsbase.py"))
    assert len(found) == 1, sorted(p.name for p in (tmp / "stage").rglob("*"))
    return found[0].read_text()


@pytest.mark.integration
@pytest.mark.parametrize("no_isolation", [("needsbase",), ()],
                         ids=["no-build-isolation-package", "match-runtime"])
def test_an_sdist_builds_against_the_slice_below_it(tmp_path: Path, served: Served,
                                                    no_isolation: tuple[str, ...]) -> None:
    done = _stage(tmp_path, served, no_isolation)
    assert done.returncode == 0, done.stderr
    assert _built(tmp_path) == "BUILT_WITH = 'from-the-lower-slice'\n"
    # the build environment never reaches the layer: the stage holds the slice alone
    staged = {p.name for p in (tmp_path / "stage").glob("lib/python*/site-packages/*")}
    assert staged == {"needsbase.py", "needsbase-1.0.dist-info"}, staged


@pytest.mark.integration
def test_without_the_settings_the_build_fails_naming_the_missing_package(
        tmp_path: Path, served: Served) -> None:
    done = _stage(tmp_path, served, None)
    assert done.returncode != 0
    assert "needsbase" in done.stderr and "basepkg" in done.stderr, done.stderr
    assert not list((tmp_path / "stage").glob("lib/python*/site-packages/needsbase.py"))


def test_the_skyrl_workspace_settings_are_read_from_its_pyproject() -> None:
    text = (ROOT / "examples/skyrl/skyrl-train/pyproject.toml").read_text()
    settings = parse_build_settings(text)
    assert "transformer-engine-torch" in settings.no_isolation
    assert settings.match_runtime["transformer-engine-torch"] == ("torch",)
    assert settings.extra["transformer-engine-torch"] == ("torch", "build-tools", "ninja")
    assert settings.builds_on_lower("flash-attn") and not settings.builds_on_lower("numpy")


def test_a_lock_wide_no_build_isolation_is_refused_with_what_to_set() -> None:
    with pytest.raises(ConfigError, match="no-build-isolation-package"):
        parse_build_settings("[tool.uv]\nno-build-isolation = true\n")
    with pytest.raises(ConfigError, match="not a requirement"):
        parse_build_settings("[tool.uv.extra-build-dependencies]\nx = [{requirement = 3}]\n")


def _plan(*slices: tuple[str, tuple[tuple[str, bool], ...]]) -> Plan:
    layers = tuple(Layer(slice=Slice(position=i, label=label), packages=tuple(
        PlannedPackage(name=n, version="1.0", compressed_bytes=1, installed_bytes=None, built=b)
        for n, b in members)) for i, (label, members) in enumerate(slices))
    return Plan(cap_bytes=10, basis="compressed", sync_flags=(), layers=layers, local=(),
                lower_bound_layers=1)


def test_only_a_slice_that_builds_a_named_package_is_staged_on_the_ones_below() -> None:
    settings = UvBuildSettings(no_isolation=frozenset({"te-torch", "wheel-only"}),
                             match_runtime={"te-torch": ("torch",)})
    plan = _plan(("torch", (("torch", False),)), ("mid", (("wheel-only", False),)),
                 ("te", (("te-torch", True), ("numpy", False))))
    builds = slice_builds(plan, settings)
    assert [b.name for b in builds] == ["02-te"]  # wheel-only has a wheel: nothing is built
    assert builds[0].lower == ("00-torch", "01-mid")
    assert builds[0].no_isolation == ("te-torch",)


def test_a_match_runtime_requirement_above_its_package_is_a_plan_error() -> None:
    settings = parse_build_settings('[tool.uv.extra-build-dependencies]\n'
                                    'te-torch = [{requirement = "torch", match-runtime = true}]\n')
    plan = _plan(("te", (("te-torch", True),)), ("torch", (("torch", False),)))
    with pytest.raises(PlanError, match=r"builds against torch .* 01-torch, not below it"):
        slice_builds(plan, settings)


def test_the_chain_installs_a_named_sdist_without_isolation_on_the_slices_below() -> None:
    """env-source = chain installs each slice into the venv the lower ones are in: only the
    isolation flag is needed, in the slice's own RUN."""
    plan = _plan(("torch", (("torch", False),)), ("te", (("te-torch", True),)))
    builds = slice_builds(plan, UvBuildSettings(no_isolation=frozenset({"te-torch"})))
    plan = dataclasses.replace(plan, builds=builds)
    te, torch = plan.layers[1], plan.layers[0]
    assert "--no-build-isolation-package te-torch" in slice_run(te, plan.build_of(te)).render()
    assert "isolation" not in slice_run(torch, plan.build_of(torch)).render()


@pytest.mark.integration
@pytest.mark.parametrize("build", ["lower --no-build-isolation-package needsbase", ""],
                         ids=["with-the-settings", "plain"])
def test_the_cluster_job_stages_the_sdist_on_the_slice_below(
        tmp_path: Path, served: Served, build: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's own staging (writer/job.py's `stager`, what the layer tool's `compose-env`
    runs in env-base) with real uv on the slice index's build column, its layer written by the
    real writer; the registry half is test_registry_faults' (the kaniko e2e runs it all)."""
    venv = tmp_path / "opt" / "venv"
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   capture_output=True)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    files = [*served.lower_slices(tmp_path), served.upper_slice(tmp_path)]
    lines = {p.stem: IndexLine(name=p.stem, label=p.stem.split("-", 1)[1], file=p.name,
                               created_by=written_history(f"/tmp/gpurl-layers/{p.name}",
                                                          str(venv), hashed=False),
                               build=build if p.stem == "02-needsbase" else "")
             for p in files}
    inputs = JobInputs(cache_repo="unused", env_base="unused", work=tmp_path, context=tmp_path,
                       slice_index=tmp_path / "unused", venv=str(venv), level=1,
                       rules=RetryRules())
    (tmp_path / "slices").mkdir()
    stage = stager(inputs, lines, tmp_path / "slices")
    slot = Slot(name="02-needsbase", tag="slice-needsbase-0", created_by="")
    if not build:
        with pytest.raises(ComposeError, match=r"installing slice 02-needsbase "
                                               r"\(02-needsbase.txt\) failed"):
            stage(slot)
        assert "basepkg" in (tmp_path / "slices" / "02-needsbase.log").read_text()
        return
    staged = stage(slot)
    with tarfile.open(staged.path) as layer:
        names = {m.name.split("/site-packages/")[1].split("/")[0] for m in layer.getmembers()
                 if "/site-packages/" in m.name}
        text = next(layer.extractfile(m).read() for m in layer.getmembers()  # type: ignore[union-attr]
                    if m.name.endswith("site-packages/needsbase.py"))
    assert names == {"needsbase.py", "needsbase-1.0.dist-info"}, names
    assert b"from-the-lower-slice" in text
    assert not (tmp_path / "slices" / "02-needsbase").exists()  # the scratch trees are gone


@pytest.mark.parametrize("text", [
    '[tool.uv]\nno-build-isolation-package = ["te; rm -rf /"]\n',
    '[tool.uv]\nno-build-isolation-package = "te"\n',
    '[tool.uv.extra-build-dependencies]\n"te torch" = ["torch"]\n',
    '[tool.uv]\nextra-build-dependencies = ["torch"]\n',
])
def test_a_bad_setting_is_one_config_error_naming_it(text: str) -> None:
    with pytest.raises(ConfigError, match=r"pyproject.toml: \[tool.uv"):
        parse_build_settings(text)


def test_a_workspace_uv_toml_is_read_instead_of_its_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.uv]\nno-build-isolation-package = ["a"]\n')
    assert load_build_settings(tmp_path).no_isolation == {"a"}
    (tmp_path / "uv.toml").write_text('no-build-isolation-package = ["B_c"]\n')
    assert load_build_settings(tmp_path).no_isolation == {"b-c"}
    assert load_build_settings(tmp_path / "none") == UvBuildSettings()


def test_the_slice_file_note_changes_with_the_slices_below() -> None:
    """The note is in the slice file, whose bytes are its cache tag's: a new torch below
    means the sdist is built again."""
    build = SliceBuild(name="02-te", lower=("00-torch", "01-mid"), no_isolation=("te-torch",))
    old = build_note(build, ["torch==2.8.0\n", "mid==1\n"])
    new = build_note(build, ["torch==2.9.1\n", "mid==1\n"])
    assert old != new and old.startswith(BUILD_NOTE) and old.endswith("te-torch\n")
