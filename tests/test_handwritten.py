"""Profiles built from hand-written Dockerfiles (build.generate = false).

The fixture (tests/data/handwritten) is a small repository with two such profiles shaped like
the team's own images: `sft` (one stage, its ARGs set from build.build-args, the repository
root as context) and `sandbox` (multi-stage with a `debug` stage the image never uses, its own
registry host and a context directory with its own .dockerignore). Each test copies it into a
real git repository; the kaniko script runs for real under bash with the harness's stand-in
crane and executor (kaniko cannot run here; tests/test_kaniko_e2e.py runs the real one).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.cluster import doctor
from gpurl_tasks.cluster.kaniko import SKELETON, job_files, render_script
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.generate import generate_profiles
from gpurl_tasks.dockerfile.handwritten import base_image, image_inputs
from gpurl_tasks.dockerfile.ignore import ignore_rules, is_ignored
from gpurl_tasks.errors import ConfigError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.image import Descriptor, HistoryEntry, PulledImage
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.plan.probe import survey_sizes
from gpurl_tasks.plan.profile import plan_for_config
from gpurl_tasks.rebuild.inputs import rebuild_needed
from gpurl_tasks.release.flow import pin_task, verify_image
from gpurl_tasks.release.verify import Rules, check_layers
from tests.conftest import REPO_ROOT
from tests.support.git import git
from tests.support.kaniko_harness import rig
from tests.support.local_parts import need, shellcheck
from tests.support.pusher import push_image as push_test_image
from tests.support.pusher import random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer

FIXTURE = REPO_ROOT / "tests" / "data" / "handwritten"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The fixture as a git repository with one commit."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root)
    git(root, "init", "-q")
    _commit(root, "init")
    return root


def _commit(root: Path, message: str) -> None:
    git(root, "add", "-A", "-f")
    git(root, "commit", "-q", "-m", message)


def _config(root: Path, profile: str) -> Config:
    return load_config(root, profile=profile, env={})


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new))


# --- config ---------------------------------------------------------------------------------


def test_both_profiles_read_as_hand_written(repo: Path) -> None:
    sft, sandbox = _config(repo, "sft"), _config(repo, "sandbox")
    assert not sft.build.generate and not sandbox.build.generate
    assert sft.build.build_args == ("SFT_VERSION=0.3.1", "BASE_IMAGE=debian:bookworm-slim")
    assert sft.build.context == repo
    assert sandbox.build.context == repo / "sandbox"
    assert sandbox.registry.image == "sandbox-registry.example.test/team/images"
    assert _config(REPO_ROOT, "gpu-rl").build.generate  # the default stays generated


@pytest.mark.parametrize("arg", ["SFT_VERSION", "1X=2", "A-B=1", "X=a\nb"])
def test_a_build_arg_not_spelled_name_equals_value_is_refused(repo: Path, arg: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(repo, profile="sft", env={}, overrides={"build.build-args": [arg]})
    assert "build.build-args[0]" in caught.value.message


def test_a_context_outside_the_repository_is_refused(repo: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(repo, profile="sft", env={}, overrides={"build.context": "../elsewhere"})
    assert "build.context" in caught.value.message


def test_planning_or_sizing_a_hand_written_profile_is_one_clear_refusal(repo: Path) -> None:
    config = _config(repo, "sft")
    for task in (lambda: plan_for_config(config),
                 lambda: survey_sizes([config], probe=False, dry_run=True)):
        with pytest.raises(ConfigError) as caught:
            task()
        assert caught.value.message == ("profile 'sft' builds the hand-written "
                                        "docker/Dockerfile.sft (build.generate = false): gpurl "
                                        "plans no layers for it")


# --- generate: the Dockerfile is read, never written; the job's files are rendered at submit -


def test_generate_writes_nothing_for_the_hand_written_dockerfiles(repo: Path) -> None:
    before = {p: p.read_bytes() for p in (repo / "docker").iterdir()}
    summary = generate_profiles(repo, None, check=False)
    assert {p: p.read_bytes() for p in before} == before  # not a byte of either Dockerfile
    assert sorted((repo / "docker").iterdir()) == sorted(before)  # and no file of its own
    assert all(r.hand_written and r.steps == 0 and not r.slices and not r.others
               for r in summary.results)
    assert "docker/Dockerfile.sft: hand-written (build.generate = false), not generated" \
        in summary.human()
    assert not (repo / "docker" / "layers").exists()  # nothing planned, no slice file
    generate_profiles(repo, None, check=True)  # current: no error
    # the provenance names the Dockerfile's own base, as the build args make it
    skeleton = json.loads(job_files(_config(repo, "sft"))[SKELETON])
    assert skeleton["base_image"] == "debian:bookworm-slim" and skeleton["python"] == []


def test_a_missing_hand_written_dockerfile_is_one_error_and_nothing_is_written(repo: Path) -> None:
    (repo / "docker" / "Dockerfile.sandbox").unlink()
    before = sorted(repo.rglob("*"))
    with pytest.raises(ConfigError) as caught:
        generate_profiles(repo, None, check=False)
    assert "docker/Dockerfile.sandbox does not exist" in caught.value.message
    assert "build.generate = false" in caught.value.message
    assert sorted(repo.rglob("*")) == before  # the other profile's files neither


# --- the kaniko script ----------------------------------------------------------------------


def test_both_rendered_scripts_are_shellcheck_clean(repo: Path, tmp_path: Path) -> None:
    paths = []
    for profile in ("sft", "sandbox"):
        path = tmp_path / f"{profile}.sh"
        path.write_text(render_script(_config(repo, profile)))
        paths.append(str(path))
    done = subprocess.run([shellcheck(), *paths], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def _executor_argv(calls: list[str]) -> list[str]:
    (call,) = calls
    return shlex.split(call)[1:]


@pytest.mark.integration
def test_the_sandbox_job_builds_its_context_with_the_same_guard_rails(repo: Path,
                                                                       tmp_path: Path) -> None:
    """The script as the iris job runs it (stand-in crane and executor): the context is the
    profile's directory, unused stages skipped, the immutable tag, no composition, and the
    token never in the log even under bash -x."""
    need(shutil.which("bash") and shutil.which("curl"), "bash and curl are needed")
    canary = "ghp_CANARY0handwritten9"
    with rig(tmp_path, None, project=repo, profile="sandbox") as r:
        done = r.run({"GITSHA": "0123abc", "DOCKER_TOKEN": canary, "DOCKER_USER_ID": "bob"},
                     trace=True)
        argv = _executor_argv(r.calls("executor"))
    assert done.returncode == 0, done.stderr
    assert argv[argv.index("--context") + 1] == f"dir://{r.root}/kaniko/context/sandbox"
    assert argv[argv.index("--dockerfile") + 1] == "docker/Dockerfile.sandbox"
    assert "--skip-unused-stages" in argv and "--custom-platform=linux/amd64" in argv
    image = "sandbox-registry.example.test/team/images"
    assert argv[argv.index("--destination") + 1] == f"{image}:sandbox-0123abc"
    assert "--cache-repo=" + image + "/cache" in argv
    assert [a for a in argv if a.startswith("--build-arg")] == ["--build-arg"]  # GITSHA's only
    # no RUN of its own keeps a wholly cached last stage unpacked for attest: no COPY caching
    assert "--cache-copy-layers" not in argv
    assert len(r.calls("executor")) == 1  # built as written: no env-base, no composing build
    assert canary not in done.stdout + done.stderr


@pytest.mark.integration
def test_the_sft_job_passes_its_build_args(repo: Path, tmp_path: Path) -> None:
    need(shutil.which("bash") and shutil.which("curl"), "bash and curl are needed")
    with rig(tmp_path, None, project=repo, profile="sft") as r:
        done = r.run({"GITSHA": "0123abc", "DOCKER_TOKEN": "t", "DOCKER_USER_ID": "bob"})
        argv = _executor_argv(r.calls("executor"))
    assert done.returncode == 0, done.stderr
    args = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert args == ["SFT_VERSION=0.3.1", "BASE_IMAGE=debian:bookworm-slim", "GITSHA=0123abc"]
    assert argv[argv.index("--context") + 1] == f"dir://{r.root}/kaniko/context"


# --- what the build reads: stages, ARGs, .dockerignore --------------------------------------


def test_the_unused_stage_and_its_args_are_not_inputs() -> None:
    inputs = image_inputs((FIXTURE / "docker" / "Dockerfile.sandbox").read_text(), {})
    assert [s.name for s in inputs.stages] == ["tools", "sandbox"]
    assert "debug/DEBUG_LEVEL" not in inputs.arg_map
    assert base_image(inputs) == "debian:bookworm-slim"
    sft = image_inputs((FIXTURE / "docker" / "Dockerfile.sft").read_text(),
                       {"BASE_IMAGE": "ubuntu:22.04", "SFT_VERSION": "9"})
    assert base_image(sft) == "ubuntu:22.04"
    assert sft.arg_map["0/SFT_VERSION"] == "9"


@pytest.mark.parametrize(("rules", "path", "ignored"), [
    ("**/*.md", "sft/NOTES.md", True),
    ("**/*.md", "README.md", True),
    ("**/*.md\n!README.md", "README.md", False),
    ("build/", "build/a/b.o", True),
    ("*.pyc", "src/a.pyc", False),  # `*` stays within one component, as the builders match
    ("# a comment\n\n*.pyc", "a.pyc", True),
    ("a/[bc]?.txt", "a/b1.txt", True),
    ("a/[bc]?.txt", "a/d1.txt", False),
    ("docs\n!docs/keep.md", "docs/keep.md", False),
])
def test_dockerignore_rules_match_as_the_builders_do(rules: str, path: str, ignored: bool) -> None:
    assert is_ignored(path, ignore_rules(rules)) is ignored


_COMPONENT = st.text(alphabet="abcxyz019._-", min_size=1, max_size=6).filter(
    lambda c: c not in (".", ".."))
_PATH = st.lists(_COMPONENT, min_size=1, max_size=4).map("/".join)


@settings(max_examples=60, deadline=None)
@given(rule=_PATH, below=st.lists(_COMPONENT, max_size=2).map("/".join), other=_PATH)
def test_a_plain_rule_keeps_out_its_path_and_what_is_under_it(rule: str, below: str,
                                                              other: str) -> None:
    """A glob-free rule excludes its path and everything under it, nothing else; the same
    rule as an exception after it lets that path back in."""
    path = f"{rule}/{below}" if below else rule
    assert is_ignored(path, ignore_rules(rule))
    assert not is_ignored(path, ignore_rules(f"{rule}\n!{path}"))
    outside = not (other == rule or other.startswith(rule + "/"))
    assert is_ignored(other, ignore_rules(rule)) is not outside


# --- rebuild-needed across real commits ------------------------------------------------------


def _decide(repo: Path, profile: str) -> tuple[str, list[str]]:
    report = rebuild_needed(_config(repo, profile), since="HEAD~1", env={})
    return report.verdict, [r.kind for r in report.decision.reasons]


@pytest.mark.parametrize(("profile", "path", "old", "new", "verdict", "kinds"), [
    # a file the Dockerfile copies: image
    ("sft", "sft/train.py", "train", "train2", "image", ["context"]),
    # the Dockerfile itself (an instruction of the image's stage): image
    ("sft", "docker/Dockerfile.sft", "> /opt/sft/VERSION", "> /opt/sft/V", "image",
     ["instructions"]),
    # an ARG value, as build.build-args sets it: image
    ("sft", "pyproject.toml", "SFT_VERSION=0.3.1", "SFT_VERSION=0.4.0", "image",
     ["config", "build-arg"]),
    # an ARG default the build args override: what the build reads is the same
    ("sft", "docker/Dockerfile.sft", "SFT_VERSION=0.1.0", "SFT_VERSION=0.2.0", "none", []),
    # files outside what the build reads: elsewhere, and kept out by .dockerignore
    ("sft", "docs/notes.md", "builds", "builds it", "none", []),
    ("sft", "sft/NOTES.md", "notes", "more notes", "none", []),
    ("sft", "sandbox/server.py", "serve", "serve2", "none", []),
    # the sandbox: its unused stage's files and ARG are nothing; the stage it copies from is
    ("sandbox", "sandbox/debug/run.sh", "debug", "debug2", "none", []),
    ("sandbox", "docker/Dockerfile.sandbox", "DEBUG_LEVEL=3", "DEBUG_LEVEL=4", "none", []),
    ("sandbox", "sandbox/tools.sh", "tools", "tools2", "image", ["context"]),
    ("sandbox", "docker/Dockerfile.sandbox", "SANDBOX_PORT=8080", "SANDBOX_PORT=9090", "image",
     ["build-arg"]),
    ("sandbox", "sft/train.py", "train", "train2", "none", []),
])
def test_rebuild_needed_answers_from_what_the_build_reads(
        repo: Path, profile: str, path: str, old: str, new: str, verdict: str,
        kinds: list[str]) -> None:
    _edit(repo / path, old, new)
    _commit(repo, f"edit {path}")
    assert _decide(repo, profile) == (verdict, kinds)


def test_a_file_the_context_ignores_is_no_rebuild_and_one_it_takes_is(repo: Path) -> None:
    (repo / "sandbox" / "cache.pyc").write_bytes(b"\0compiled")
    _commit(repo, "a compiled file (sandbox/.dockerignore: *.pyc)")
    assert _decide(repo, "sandbox") == ("none", [])
    (repo / "sft" / "extra.yaml").write_text("more: 1\n")
    _commit(repo, "a new file under sft/, which COPY sft/ takes")
    report = rebuild_needed(_config(repo, "sft"), since="HEAD~1", env={})
    assert report.verdict == "image"
    assert "+sft/extra.yaml" in report.decision.reasons[0].detail


def test_uncommitted_edits_count_against_the_commit(repo: Path) -> None:
    """The working tree is compared with --since, as for a generated profile."""
    _edit(repo / "sandbox" / "server.py", "serve", "serve3")
    assert rebuild_needed(_config(repo, "sandbox"), since="HEAD", env={}).verdict == "image"


# --- verify-layers: a hand-written layer over the cap is named ------------------------------


def _image(sizes: list[int], made_by: list[str]) -> PulledImage:
    layers = tuple(Descriptor(media_type="application/vnd.oci.image.layer.v1.tar+gzip",
                              digest="sha256:" + f"{i:064x}", size=size)
                   for i, size in enumerate(sizes))
    return PulledImage(ref=parse_reference("registry.example.test/team/images:sft-0123abc"),
                       top_digest="sha256:" + "f" * 64, manifest_digest="sha256:" + "f" * 64,
                       top_media_type="application/vnd.oci.image.manifest.v1+json",
                       config_digest="sha256:" + "e" * 64, layers=layers, labels={},
                       platform="linux/amd64",
                       history=tuple(HistoryEntry(created_by=text, empty_layer=False)
                                     for text in made_by))


def test_a_hand_written_layer_over_the_cap_is_named_by_its_instruction() -> None:
    image = _image([10**8, 6 * 10**9, 2 * 10**8],
                   ["/bin/sh -c #(nop) ADD file:abc in /", "RUN /bin/sh -c pip install "
                    "torch vllm flash-attn", "COPY sft/ /opt/sft/"])
    report = check_layers(image, Rules(cap=4 * 10**9, hard_limit=8 * 10**9, min_layers=1),
                          hand_written="docker/Dockerfile.sft")
    (cap,) = [f for f in report.findings if f.code == "cap"]
    assert cap.layer == 1 and cap.failing
    assert "`RUN pip install torch vllm flash-attn` of the hand-written docker/Dockerfile.sft" \
        in cap.message
    assert "split that instruction" in cap.message
    generated = check_layers(image, Rules(cap=4 * 10**9, hard_limit=8 * 10**9, min_layers=1))
    (plain,) = [f for f in generated.findings if f.code == "cap"]
    assert "hand-written" not in plain.message  # a generated image's planner re-layers it


@pytest.mark.integration
def test_verify_layers_of_a_pushed_hand_written_image_names_its_instruction(
        registry: RegistryServer) -> None:
    """A real registry (loopback) and gpurl's own verify path: the image is pushed by the
    tests' own pusher, shaped as kaniko pushes the sft image, with a layer over a small cap."""
    config = load_config(FIXTURE, profile="sft", env={
        "GPURL_REGISTRY_HOST": registry.host, "GPURL_VERIFY_CAP": "100000",
        "GPURL_VERIFY_MIN_LAYERS": "2", "GPURL_VERIFY_ATTESTATIONS": "off"})
    push_test_image(registry.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(150_000, "RUN /bin/sh -c pip install --no-cache-dir torch vllm", seed=7),
        tar_gz_layer({"opt/sft/train.py": b"print('train')\n"}, "COPY sft/ /opt/sft/")],
        tag="sft-0123abc")
    client = RegistryClient(registry.host)
    try:
        _, report = verify_image(config, parse_reference(f"{config.registry.image}:sft-0123abc"),
                                 client)
    finally:
        client.close()
    (cap,) = [f for f in report.findings if f.code == "cap"]
    assert cap.layer == 1 and not report.ok
    assert "`RUN pip install --no-cache-dir torch vllm` of the hand-written " \
           "docker/Dockerfile.sft" in cap.message


@pytest.mark.integration
def test_pin_writes_a_hand_written_image_into_its_launcher_variable(
        repo: Path, registry: RegistryServer) -> None:
    """The same pin as a generated image's: verified first, its digest written into the
    profile's own launcher variable, the other profile's left alone."""
    config = load_config(repo, profile="sft", env={
        "GPURL_REGISTRY_HOST": registry.host, "GPURL_VERIFY_MIN_LAYERS": "2",
        "GPURL_VERIFY_ATTESTATIONS": "off"})
    pushed = push_test_image(registry.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        tar_gz_layer({"opt/sft/train.py": b"print('train')\n"}, "COPY sft/ /opt/sft/")],
        tag="sft-0123abc")
    outcome = pin_task(config, f"{config.registry.image}:sft-0123abc", force=False,
                       dry_run=False, warn=print)
    assert outcome.written and outcome.report.ok
    launcher = (repo / "cloud" / "iris" / "launch_rl_iris.py").read_text()
    assert f"{config.registry.image}@{pushed.manifest_digest}" in launcher
    assert launcher.count(pushed.manifest_digest) == 1
    assert 'SANDBOX_IMAGE = "sandbox-registry.example.test/team/images:sandbox-0000000"' \
        in launcher


# --- doctor ---------------------------------------------------------------------------------


def test_doctor_passes_the_fixture_and_names_what_would_break_its_build(repo: Path) -> None:
    for profile in ("sft", "sandbox"):
        assert not doctor.hand_written(_config(repo, profile)).failed
    assert doctor.hand_written(_config(REPO_ROOT, "gpu-rl")).status == "skipped"
    _edit(repo / "pyproject.toml", '"BASE_IMAGE=debian:bookworm-slim"',
          '"BASE_IMAGE=debian:bookworm-slim", "SFT_VERSON=1"')
    (repo / "sft" / "train.py").unlink()
    (repo / "sft" / "config.yaml").unlink()
    check = doctor.hand_written(_config(repo, "sft"))
    assert check.failed
    assert "SFT_VERSON, which it declares no ARG for" in check.detail
    assert "COPY/ADD sft/ takes no file of the context" in check.detail
    (repo / "sandbox" / ".dockerignore").write_text("*.pyc\nserver.py\n")
    check = doctor.hand_written(_config(repo, "sandbox"))
    assert "COPY/ADD server.py takes no file of the context sandbox (missing, or kept out by " \
           ".dockerignore)" in check.detail
