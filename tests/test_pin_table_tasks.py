"""`invoke pin` into a typed image table (launcher.table), end to end: images pushed to a real
`docker-registry` on 127.0.0.1 (tests/support/pusher.py, as test_pin_tasks.py does), verified,
and pinned into a module shaped like the team's `cloud/iris/gpu_rl_images.py`, checked byte
for byte; the table's bad inputs through the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.image_table import KEYS, SOURCE, evaluate, key_of, old_digest, table_module
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, free_port
from tests.support.tasks_runner import REPO_ROOT, head_short_sha, one_variant, run_task

pytestmark = pytest.mark.integration


def five_layers(seed: int) -> list:  # type: ignore[type-arg]
    return [tar_gz_layer({"os": f"debian {seed}".encode()}, "ADD rootfs /")] + [
        random_layer(40_000, f"RUN uv sync --frozen # {seed}.{i}", seed=seed * 10 + i)
        for i in range(4)]


def full_commit(source_id: str) -> str:
    """The 40-hex commit a source id (`abc1234` or `abc1234-dirty-...`) names in this clone."""
    return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", source_id.split("-")[0]],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def module(repo_tmp: Path) -> Path:
    """The table module inside the repository (launcher.path may not leave it)."""
    path = repo_tmp / "cloud" / "iris" / "gpu_rl_images.py"
    path.parent.mkdir(parents=True)
    path.write_text(table_module())
    return path


def env_for(host: str, module: Path, **more: str) -> dict[str, str]:
    return {"GPURL_REGISTRY_HOST": host, "GPURL_REGISTRY_REPOSITORY": "org/img",
            "GPURL_LAUNCHER_PATH": str(module), "GPURL_LAUNCHER_TABLE": "GPU_RL_IMAGES",
            "GPURL_LAYERS_CAP": "1MB", "GPURL_VERIFY_HARD_LIMIT": "2MB",
            "GPURL_VERIFY_MIN_LAYERS": "5",
            # the tests' pusher attaches no SBOM or provenance
            "GPURL_VERIFY_ATTESTATIONS": "if-present", "HOME": str(module.parent), **more}


def replaced(text: str, key: tuple[str, str], field: str, value: str) -> str:
    """`text` with the line of `field` in `key`'s entry holding the literal `value` (the
    test's own edit, line by line, of the fixture's layout)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(f"    {key_of(*key)}: GpuRlImage(\n")
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(f"        {field}="))
    lines[at] = f'        {field}="{value}",\n'
    return "".join(lines)


def test_both_amd64_images_pin_into_their_entries_only(registry: RegistryServer,
                                                       module: Path) -> None:
    """gpu-rl's two amd64 variants: their entries get their own digest, tag and commit as
    literals, since the arm64 entries still read SOURCE_COMMIT; every other byte stays, a
    second pin writes nothing, and the table still runs."""
    sha = head_short_sha()
    standard = push_image(registry.url, "org/img", five_layers(1), tag=f"gpu-rl-{sha}")
    megatron = push_image(registry.url, "org/img", five_layers(2), tag=f"gpu-rl-megatron-{sha}")
    env = env_for(registry.host, module)
    old = module.read_text()
    done = run_task("pin", env=env)
    assert done.returncode == 0, done.stderr
    commit = full_commit(sha)
    expected = old
    for key, image, tag in ((("AMD64", "STANDARD"), standard, f"gpu-rl-{sha}"),
                            (("AMD64", "MEGATRON"), megatron, f"gpu-rl-megatron-{sha}")):
        expected = replaced(expected, key, "digest", image.manifest_digest)
        expected = replaced(expected, key, "tag", tag)
        expected = replaced(expected, key, "source_commit", commit)
    assert module.read_text() == expected
    table = evaluate(expected)
    assert table[("AMD64", "MEGATRON")]["digest"] == megatron.manifest_digest
    assert table[("ARM64", "STANDARD")]["source_commit"] == SOURCE
    assert f"pinned {key_of('AMD64', 'STANDARD')}" in done.stdout

    before = module.stat()
    again = run_task("pin", env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert module.read_text() == expected and module.stat().st_ino == before.st_ino


def test_dry_run_and_json(registry: RegistryServer, module: Path) -> None:
    """--dry-run prints the unified diff and writes nothing; --json is one object per run."""
    sha = head_short_sha()
    image = push_image(registry.url, "org/img", five_layers(3), tag=f"gpu-rl-{sha}")
    env = env_for(registry.host, module)
    old = module.read_text()
    dry = run_task("pin", "--variant", "standard", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert module.read_text() == old
    assert dry.stdout.startswith("--- a/")
    assert f'-        digest="{old_digest(("AMD64", "STANDARD"))}",' in dry.stdout
    assert f'+        digest="{image.manifest_digest}",' in dry.stdout
    document = one_variant(run_task("pin", "--variant", "standard", "--json", env=env).stdout)
    assert document["written"] and document["changed"]
    assert document["entries"] == {"standard": {
        "key": key_of("AMD64", "STANDARD"), "digest": image.manifest_digest,
        "tag": f"gpu-rl-{sha}", "source_commit": full_commit(sha)}}
    assert document["reports"]["standard"]["ok"]


def test_every_entry_of_one_commit_pinned_together_moves_it_once(
        registry: RegistryServer, repo_tmp: Path) -> None:
    """The multiarch profile's h100 (amd64) and gb200 (arm64) images into a table whose two
    entries both read SOURCE_COMMIT: it changes once, each digest is written; the tags, which
    carry the short sha and so differ from the f-string's, become the images' own. Then
    rebuild-needed starts from the commit the table records."""
    keys = (("AMD64", "STANDARD"), ("ARM64", "STANDARD"))
    path = repo_tmp / "gpu_rl_images.py"
    path.write_text(table_module(keys=keys))
    old = path.read_text()
    sha = head_short_sha_of("multiarch")
    amd = push_image(registry.url, "org/img", five_layers(4), tag=f"multiarch-{sha}")
    arm = push_image(registry.url, "org/img", five_layers(5), tag=f"multiarch-gb200-{sha}",
                     architecture="arm64")
    env = env_for(registry.host, path, GPURL_VERIFY_MIN_LAYERS="3",
                  GPURL_LAUNCHER_TABLE_KEY="(ImageArchitecture.{ARCH}, ImageVariant.STANDARD)")
    done = run_task("pin", "-p", "multiarch", env=env)
    assert done.returncode == 0, done.stderr
    commit = full_commit(sha)
    expected = old.replace(f'SOURCE_COMMIT = "{SOURCE}"', f'SOURCE_COMMIT = "{commit}"')
    for key, image, tag in ((keys[0], amd, f"multiarch-{sha}"),
                            (keys[1], arm, f"multiarch-gb200-{sha}")):
        expected = replaced(expected, key, "digest", image.manifest_digest)
        expected = replaced(expected, key, "tag", tag)
    assert path.read_text() == expected
    assert "source_commit=SOURCE_COMMIT" in expected and expected.count(commit) == 1

    decided = json.loads(run_task("rebuild-needed", "-p", "multiarch", "--json",
                                  env=env).stdout)["variants"]
    assert {v: (d["since"]["commit"], d["since"]["source"]) for v, d in decided.items()} == {
        "h100": (commit, f"GPU_RL_IMAGES[{key_of(*keys[0])}] in gpu_rl_images.py"),
        "gb200": (commit, f"GPU_RL_IMAGES[{key_of(*keys[1])}] in gpu_rl_images.py")}


def head_short_sha_of(profile: str) -> str:
    from gpurl_tasks.config import load_config
    from gpurl_tasks.dockerfile.context import source_id

    return source_id(load_config(REPO_ROOT, profile=profile, env={}))


def _one_key(text: str, key: tuple[str, str], into: tuple[str, str]) -> str:
    """`text` with `key`'s entry keyed as `into` (a missing entry and a doubled one)."""
    return text.replace(f"    {key_of(*key)}: GpuRlImage(", f"    {key_of(*into)}: GpuRlImage(")


@pytest.mark.parametrize(("content", "ref", "message"), [
    (None, None, "does not exist"),
    ("GPU_RL_IMAGES = {\n", None, "is not valid Python"),
    (_one_key(table_module(), ("AMD64", "STANDARD"), ("ARM64", "STANDARD")), None,
     f"has no entry {key_of('AMD64', 'STANDARD')} in GPU_RL_IMAGES"),
    (_one_key(table_module(), ("ARM64", "STANDARD"), ("AMD64", "STANDARD")), None,
     f"has 2 entries {key_of('AMD64', 'STANDARD')} in GPU_RL_IMAGES"),
    (table_module().replace(old_digest(KEYS[3]), "sha256:" + "ab" * 16), None,
     "not sha256:<64 hex digits>"),
    (table_module(), "@sha256:" + "cd" * 32, "an entry records the image's immutable"),
])
def test_bad_tables_are_refused_before_any_network(repo_tmp: Path, content: str | None,
                                                    ref: str | None, message: str) -> None:
    """One `error:` line with a hint, exit 2, the module as it was and nothing else written;
    the registry's port is closed: nothing is fetched before the table is known to be good."""
    closed = f"127.0.0.1:{free_port()}"
    path = repo_tmp / "gpu_rl_images.py"
    if content is not None:
        path.write_text(content)
    flags = ("--variant", "standard", "--ref", f"{closed}/org/img{ref}") if ref else ()
    done = run_task("pin", *flags, env=env_for(closed, path))
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "hint:" in done.stderr and "Traceback" not in done.stderr
    assert (path.read_text() if content is not None else None) == content
    assert sorted(p.name for p in repo_tmp.iterdir()) == (["gpu_rl_images.py"] if content else [])


def test_variable_flag_pins_a_variable_instead(registry: RegistryServer, module: Path) -> None:
    """`--launcher FILE --variable NAME` still pins one variable, with launcher.table set."""
    sha = head_short_sha()
    image = push_image(registry.url, "org/img", five_layers(6), tag=f"gpu-rl-{sha}")
    other = module.parent / "launch.py"
    other.write_text('IMAGE = "old"\n')
    done = run_task("pin", "--variant", "standard", "--launcher", str(other), "--variable", "IMAGE",
                    env=env_for(registry.host, module))
    assert done.returncode == 0, done.stderr
    assert f'IMAGE = "{registry.host}/org/img@{image.manifest_digest}"' in other.read_text()
    assert module.read_text() == table_module()
