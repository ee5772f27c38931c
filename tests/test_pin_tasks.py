"""`invoke pin` end to end against a real `docker-registry` on 127.0.0.1 and a launcher file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpurl_tasks.errors import ExitCode
from tests.support.pusher import PushedImage, push_image, push_index, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, free_port
from tests.support.tasks_runner import head_short_sha, one_variant, run_task

pytestmark = pytest.mark.integration

OLD = "ghcr.io/open-thoughts/openthoughts-agent@sha256:" + "e8" * 32
LAUNCHER = textwrap.dedent(f'''\
    """Launch RL on iris."""

    import os

    # pinned image (updated by `invoke pin`)
    DEFAULT_RL_DOCKER_IMAGE = "{OLD}"
    OTHER = {{"image": DEFAULT_RL_DOCKER_IMAGE}}
    ''')


def five_layers(seed: int) -> list:  # type: ignore[type-arg]
    return [tar_gz_layer({"os": b"debian"}, "ADD rootfs /")] + [
        random_layer(50_000, f"RUN uv sync --frozen # {i}", seed=seed * 10 + i) for i in range(4)]


@pytest.fixture
def launcher(repo_tmp: Path) -> Path:
    """A launcher inside the repository (launcher.path may not leave it)."""
    path = repo_tmp / "cloud" / "iris" / "launch_rl_iris.py"
    path.parent.mkdir(parents=True)
    path.write_text(LAUNCHER)
    # the launcher's own linter config: pin keeps within it (test_pin.py covers the wrapping)
    (repo_tmp / "ruff.toml").write_text("line-length = 200\n")
    return path


def env_for(server_host: str, launcher: Path) -> dict[str, str]:
    return {"GPURL_REGISTRY_HOST": server_host, "GPURL_REGISTRY_REPOSITORY": "org/img",
            "GPURL_LAUNCHER_PATH": str(launcher), "GPURL_LAYERS_CAP": "1MB",
            "GPURL_VERIFY_HARD_LIMIT": "2MB", "GPURL_VERIFY_MIN_LAYERS": "5",
            # the tests' pusher attaches no SBOM or provenance (as an image built before gpurl
            # attached them); test_pin_refuses_an_image_without_them_by_default drops this
            "GPURL_VERIFY_ATTESTATIONS": "if-present",
            "HOME": str(launcher.parent)}


def pushed(registry: RegistryServer, tag: str, seed: int) -> PushedImage:
    return push_image(registry.url, "org/img", five_layers(seed), tag=tag)


def test_pin_refuses_an_image_without_them_by_default(registry: RegistryServer,
                                                     launcher: Path) -> None:
    """verify.attestations defaults to required: an image with no SBOM and provenance attached
    is not pinned, the launcher untouched, and the message names the setting; `if-present`
    (for an image built before gpurl attached them) pins it."""
    pushed(registry, "gpu-rl-abcabca", 9)
    env = {k: v for k, v in env_for(registry.host, launcher).items()
           if k != "GPURL_VERIFY_ATTESTATIONS"}
    before = launcher.read_text()
    refused = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-abcabca", env=env)
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert "no SBOM is attached" in said and "verify.attestations = required" in said, said
    assert "Traceback" not in said
    assert launcher.read_text() == before
    lenient = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-abcabca",
                       env={**env, "GPURL_VERIFY_ATTESTATIONS": "if-present"})
    assert lenient.returncode == 0, lenient.stderr


def test_pin_writes_the_digest_and_a_second_pin_is_a_no_op(registry: RegistryServer,
                                                           launcher: Path) -> None:
    image = pushed(registry, "gpu-rl-aaaaaaa", 1)
    env = env_for(registry.host, launcher)
    done = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-aaaaaaa", env=env)
    assert done.returncode == 0, done.stderr
    value = f"{registry.host}/org/img@{image.manifest_digest}"
    text = launcher.read_text()
    assert f'DEFAULT_RL_DOCKER_IMAGE = "{value}"' in text
    lines = text.splitlines()
    comment = lines[lines.index(f'DEFAULT_RL_DOCKER_IMAGE = "{value}"') - 1]
    assert comment.startswith("# gpurl pin: gpu-rl-aaaaaaa, linux/amd64, 5 layers, largest ")
    assert text.replace(comment + "\n", "").replace(value, OLD) == LAUNCHER
    before = launcher.stat()
    again = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-aaaaaaa", env=env)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    after = launcher.stat()
    assert launcher.read_text() == text and after.st_ino == before.st_ino  # not even rewritten


def test_dry_run_prints_the_diff_and_writes_nothing(registry: RegistryServer,
                                                    launcher: Path) -> None:
    image = pushed(registry, "gpu-rl-bbbbbbb", 2)
    done = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-bbbbbbb", "--dry-run",
                    env=env_for(registry.host, launcher))
    assert done.returncode == 0, done.stderr
    assert launcher.read_text() == LAUNCHER
    assert f'-DEFAULT_RL_DOCKER_IMAGE = "{OLD}"' in done.stdout
    assert f'+DEFAULT_RL_DOCKER_IMAGE = "{registry.host}/org/img@{image.manifest_digest}"' \
        in done.stdout
    assert done.stdout.startswith("--- a/")


def test_index_pins_the_linux_amd64_manifest_digest(registry: RegistryServer,
                                                    launcher: Path) -> None:
    amd64 = pushed(registry, "gpu-rl-ccccccc", 3)
    arm = push_image(registry.url, "org/img", five_layers(4), tag=None, architecture="arm64")
    index = push_index(registry.url, "org/img", {"linux/amd64": amd64, "linux/arm64": arm},
                       tag="gpu-rl-ccccccc")
    done = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-ccccccc",
                    env=env_for(registry.host, launcher))
    assert done.returncode == 0, done.stderr
    text = launcher.read_text()
    assert amd64.manifest_digest in text and index not in text


def test_floating_tag_is_refused_before_any_network(launcher: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"  # nothing listens here
    done = run_task("pin", "--ref", f"{closed}/org/img:gpu-rl", env=env_for(closed, launcher))
    assert done.returncode == 2
    assert "refusing to pin the floating tag 'gpu-rl'" in done.stderr
    assert "Traceback" not in done.stderr and launcher.read_text() == LAUNCHER


def test_failing_image_needs_force(registry: RegistryServer, launcher: Path) -> None:
    image = push_image(registry.url, "org/img", five_layers(5)[:2], tag="gpu-rl-ddddddd")
    env = env_for(registry.host, launcher)
    refused = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-ddddddd", env=env)
    assert refused.returncode == ExitCode.CHECK_FAILED  # the code verify-layers exits with
    assert "fails the layer rules" in refused.stderr and "--force" in refused.stderr
    assert launcher.read_text() == LAUNCHER
    forced = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-ddddddd", "--force",
                      env=env)
    assert forced.returncode == 0, forced.stderr
    assert "despite failing rules" in forced.stderr
    assert image.manifest_digest in launcher.read_text()


def test_a_launcher_whose_python_is_outside_the_images_environment_is_refused(
        registry: RegistryServer, launcher: Path) -> None:
    """The launcher runs RL_PYTHON: an image whose environment is elsewhere would fail every
    task, so pin refuses it, naming both paths, and writes nothing."""
    pushed(registry, "gpu-rl-bbbbbbb", 2)
    wrong = LAUNCHER + 'RL_PYTHON = "/opt/venv/bin/python"\n'
    launcher.write_text(wrong)
    env = env_for(registry.host, launcher)
    refused = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-bbbbbbb", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "RL_PYTHON = '/opt/venv/bin/python' is not in the image's environment " \
           "/opt/openthoughts/envs/rl" in refused.stderr  # gpu-rl's build.venv
    assert 'set build.venv = "/opt/venv"' in refused.stderr
    assert "Traceback" not in refused.stderr and launcher.read_text() == wrong
    launcher.write_text(LAUNCHER + 'RL_PYTHON = "/opt/openthoughts/envs/rl/bin/python"\n')
    done = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-bbbbbbb", env=env)
    assert done.returncode == 0, done.stderr


def test_default_reference_and_launcher_flags(registry: RegistryServer, repo_tmp: Path) -> None:
    image = pushed(registry, f"gpu-rl-{head_short_sha()}", 6)
    other = repo_tmp / "other.py"
    other.write_text("IMAGE = 'x'  # odd quotes kept\n")
    (repo_tmp / "ruff.toml").write_text("line-length = 200\n")
    done = run_task("pin", "--variant", "standard", "--launcher", str(other), "--variable", "IMAGE",
                    env=env_for(registry.host, repo_tmp / "missing.py"))
    assert done.returncode == 0, done.stderr
    assert f"IMAGE = '{registry.host}/org/img@{image.manifest_digest}'  # odd quotes kept" \
        in other.read_text()


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist"),
    ("X = 1\n", "has no assignment to DEFAULT_RL_DOCKER_IMAGE"),
    ("DEFAULT_RL_DOCKER_IMAGE = 'a'\nDEFAULT_RL_DOCKER_IMAGE = 'b'\n", "2 times (lines 1, 2)"),
])
def test_launcher_problems_are_clear(registry: RegistryServer, repo_tmp: Path,
                                     content: str | None, message: str) -> None:
    pushed(registry, "gpu-rl-eeeeeee", 7)
    path = repo_tmp / "launch.py"
    if content is not None:
        path.write_text(content)
    done = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-eeeeeee",
                    env=env_for(registry.host, path))
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr
    assert (path.read_text() if content is not None else None) == content
    assert sorted(p.name for p in repo_tmp.iterdir()) == (["launch.py"] if content else [])


def test_json_output(registry: RegistryServer, launcher: Path) -> None:

    image = pushed(registry, "gpu-rl-fffffff", 8)
    env = env_for(registry.host, launcher)
    first = one_variant(run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-fffffff",
                                 "--json", env=env).stdout)
    assert first["value"] == f"{registry.host}/org/img@{image.manifest_digest}"
    assert first["changed"] and first["written"] and first["report"]["ok"]
    assert first["report"]["layer_count"] == 5
    second = one_variant(run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-fffffff",
                                  "--json", "--dry-run", env=env).stdout)
    assert (second["changed"], second["written"], second["diff"]) == (False, False, "")
    # the README's decision: a pin's dry run keeps the per-variant shape, marked as a dry run
    assert (first["dry_run"], second["dry_run"]) == (False, True)


def test_pin_without_variant_pins_every_variant_to_its_own_variable(
        registry: RegistryServer, repo_tmp: Path) -> None:
    """gpu-rl has two variants: each image built at HEAD goes to its own launcher variable,
    and every other byte of the launcher stays."""
    sha = head_short_sha()
    standard = pushed(registry, f"gpu-rl-{sha}", 11)
    megatron = pushed(registry, f"gpu-rl-megatron-{sha}", 12)
    path = repo_tmp / "launch.py"
    path.write_text(LAUNCHER + 'DEFAULT_RL_MEGATRON_DOCKER_IMAGE = "old"  # megatron\n')
    (repo_tmp / "ruff.toml").write_text("line-length = 200\n")  # no wrapping of the long pins
    done = run_task("pin", env=env_for(registry.host, path))
    assert done.returncode == 0, done.stderr
    assert "== variant standard ==" in done.stdout and "== variant megatron ==" in done.stdout
    text = path.read_text()
    assert f'DEFAULT_RL_DOCKER_IMAGE = "{registry.host}/org/img@{standard.manifest_digest}"' in text
    assert (f'DEFAULT_RL_MEGATRON_DOCKER_IMAGE = "{registry.host}/org/img@'
            f'{megatron.manifest_digest}"  # megatron') in text
    assert f"# gpurl pin: gpu-rl-megatron-{sha}, linux/amd64, 5 layers" in text
    assert 'OTHER = {"image": DEFAULT_RL_DOCKER_IMAGE}' in text


def test_a_bare_digest_needs_the_variant(registry: RegistryServer, launcher: Path) -> None:
    done = run_task("pin", "--ref", f"{registry.host}/org/img@sha256:" + "ab" * 32,
                    env=env_for(registry.host, launcher))
    assert done.returncode == 2
    assert "carries no variant's tag" in done.stderr and "--variant" in done.stderr


def test_an_image_with_a_missing_blob_is_never_pinned(registry: RegistryServer,
                                                      launcher: Path) -> None:
    """A layer's bytes deleted from the registry's storage after the push: pin refuses,
    even with --force (no node could pull what it would pin), and the launcher is as it was."""
    image = push_image(registry.url, "org/img", five_layers(61), tag="gpu-rl-6161616")
    registry.remove_blob(image.layers[2].digest)
    env = env_for(registry.host, launcher)
    for flags in ((), ("--force",)):
        refused = run_task("pin", "--ref", f"{registry.host}/org/img:gpu-rl-6161616", *flags,
                           env=env)
        assert refused.returncode == ExitCode.CHECK_FAILED, refused.stdout + refused.stderr
        assert "layer 2 " in refused.stderr and image.layers[2].digest[:19] in refused.stderr
        assert "Traceback" not in refused.stderr
    assert launcher.read_text() == LAUNCHER


def test_pin_requires_a_passing_gpu_check_when_told(registry: RegistryServer,
                                                    launcher: Path) -> None:
    """verify.gpu = required: without a verdict attached, one error line naming what to run
    and nothing written; with a passing one attached, it is pinned (a failing one's refusal is
    checked in process by tests/test_verify_gpu.py). The verdicts are what `invoke verify-gpu`
    attaches, built by tests/test_verify_gpu.py: the GPU job itself needs a CoreWeave node."""
    from gpurl_tasks.imageref import parse_reference
    from gpurl_tasks.oci.registry import RegistryClient
    from gpurl_tasks.release.gpu import attach_summary
    from tests.test_verify_gpu import check_result, statement

    image = pushed(registry, "gpu-rl-eeeeeee", 14)
    ref = f"{registry.host}/org/img:gpu-rl-eeeeeee"
    env = {**env_for(registry.host, launcher), "GPURL_VERIFY_GPU": "required"}
    refused = run_task("pin", "--ref", ref, env=env)
    assert refused.returncode == ExitCode.CHECK_FAILED
    first = refused.stderr.splitlines()[0]
    assert first.startswith(f"error: refusing to pin {ref}: no GPU check ran for sha256:"), first
    assert "run `invoke verify-gpu --variant standard` to check the image" in first
    assert launcher.read_text() == LAUNCHER
    digest = image.manifest_digest
    with RegistryClient(registry.host) as client:
        where = parse_reference(ref)
        attach_summary(client, where, digest, statement(check_result(digest), digest,
                                                        at="2026-12-03T19:00:00Z"))
    done = run_task("pin", "--ref", ref, env=env)
    assert done.returncode == 0, done.stderr
    assert digest in launcher.read_text()
