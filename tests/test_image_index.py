"""The image index of the multiarch profile (h100: linux/amd64, gb200: linux/arm64, one
launcher variable): composed at a real `docker-registry` on 127.0.0.1, read back through the
registry API, verified per platform, pinned into a copy of the multiarch launcher with each
platform's own pin beside it, and diffed per platform.

The images are test-built (tests/support/pusher.py: real gzip'd tar layers and a config whose
os/architecture say linux/amd64 or linux/arm64), not built by kaniko: a real arm64 image
cannot be built on this x86_64 machine, which has no emulation (binfmt/qemu). What a layer
holds does not matter to the index; its config's platform does, and is checked.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.errors import CheckFailed, ConfigError, RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.image import Descriptor, ImageIndex, PulledImage
from gpurl_tasks.rebuild.inputs import provenance_commit
from gpurl_tasks.release.index import Member, check_listed, compose_index
from gpurl_tasks.writer.ocispec import OCI_INDEX
from tests.conftest import REPO_ROOT
from tests.support.launchers import assigned
from tests.support.pusher import PushedImage, push_image, push_index, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import run_task

REPO = "gpurl/multiarch"
LAUNCHER = REPO_ROOT / "examples/multiarch/cloud/iris/launch_rl_iris.py"

# --- pure: the index document ---------------------------------------------------------------

_hex = st.text("0123456789abcdef", min_size=64, max_size=64)
_platforms = st.sampled_from(["linux/amd64", "linux/arm64", "linux/arm64/v8", "linux/arm/v7",
                              "linux/s390x"])
_entries = st.lists(st.tuples(_hex, st.integers(0, 2**40), _platforms), min_size=1, max_size=6)


@given(_entries)
def test_index_json_is_deterministic_and_round_trips(entries: list[tuple[str, int, str]]) -> None:
    """The same members give byte-identical JSON (so one digest: a second compose finds the
    index it put), entries keep the order given, and reading the bytes back gives the index."""
    manifests = tuple(Descriptor(media_type="application/vnd.oci.image.manifest.v1+json",
                                 digest=f"sha256:{h}", size=size, platform=platform)
                      for h, size, platform in entries)
    index = ImageIndex(manifests=manifests)
    body = index.to_bytes()
    assert ImageIndex(manifests=tuple(manifests)).to_bytes() == body
    document = json.loads(body)
    assert document["mediaType"] == OCI_INDEX and document["schemaVersion"] == 2
    assert json.dumps(document, sort_keys=True, separators=(",", ":")).encode() == body
    assert ImageIndex.from_json(document, "index") == index
    assert index.platforms == tuple(p for _, _, p in entries)


def _pulled(platform: str, digest: str = "sha256:" + "1" * 64) -> PulledImage:
    return PulledImage(ref=parse_reference(f"127.0.0.1:5005/{REPO}:multiarch-1234567"),
                       top_digest=digest, top_media_type="", manifest_digest=digest, layers=(),
                       config_digest="sha256:" + "2" * 64, labels={}, history=(),
                       platform=platform, manifest_size=10,
                       manifest_media_type="application/vnd.oci.image.manifest.v1+json")


def test_an_image_of_another_platform_than_its_target_is_refused() -> None:
    members = [Member(variant="h100", cluster="c", platform="linux/amd64",
                      image=_pulled("linux/amd64")),
               Member(variant="gb200", cluster="cw-us-east-08a", platform="linux/arm64",
                      image=_pulled("linux/amd64", "sha256:" + "3" * 64))]
    with pytest.raises(CheckFailed) as info:
        compose_index(members)
    assert "gb200" in info.value.message and "linux/arm64" in info.value.message
    assert "cw-us-east-08a" in (info.value.hint or "")


def test_an_arm64_config_stating_v8_is_its_platform_and_a_read_back_index_must_match() -> None:
    amd = Member(variant="h100", cluster="c", platform="linux/amd64", image=_pulled("linux/amd64"))
    arm = Member(variant="gb200", cluster="g", platform="linux/arm64",
                 image=_pulled("linux/arm64/v8", "sha256:" + "3" * 64))
    index = compose_index([amd, arm])
    assert index.platforms == ("linux/amd64", "linux/arm64/v8")
    check_listed("x", index, [amd, arm])
    with pytest.raises(CheckFailed, match="not the verified images"):
        check_listed("x", ImageIndex(manifests=index.manifests[:1]), [amd, arm])


def test_two_variants_of_one_platform_naming_one_variable_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpurl.profiles.p.variants.a]\n'
        '[tool.gpurl.profiles.p.variants.b]\nlauncher-variable = "DEFAULT_RL_DOCKER_IMAGE"\n')
    with pytest.raises(ConfigError, match=r"variants 'a' and 'b' of profile 'p' both pin a "
                                          r"linux/amd64 image into DEFAULT_RL_DOCKER_IMAGE"):
        load_config(tmp_path, env={}, profile="p")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpurl.profiles.p.variants.a]\n'
        '[tool.gpurl.profiles.p.variants.b]\nlauncher-variable = "DEFAULT_RL_DOCKER_IMAGE"\n'
        '[tool.gpurl.profiles.p.variants.b.target]\narch = "aarch64"\n')
    config = load_config(tmp_path, env={}, profile="p")  # two platforms: one index
    assert [v.target.platform for v in config.variants] == ["linux/amd64", "linux/arm64"]


# --- against the registry -------------------------------------------------------------------

def _layers(seed: int) -> list:  # type: ignore[type-arg]
    return [tar_gz_layer({"etc/os-release": f"ID=debian {seed}\n".encode()}, "ADD rootfs /")] + [
        random_layer(30_000, f"RUN uv sync --frozen # {seed}.{i}", seed=seed * 10 + i)
        for i in range(4)]


def _source() -> str:
    return source_id(load_config(REPO_ROOT, profile="multiarch", env={}))


def _push_pair(server: RegistryServer, sha: str, seed: int, *, arm_arch: str = "arm64"
               ) -> tuple[PushedImage, PushedImage]:
    amd = push_image(server.url, REPO, _layers(seed), tag=f"multiarch-{sha}")
    arm = push_image(server.url, REPO, _layers(seed + 1), tag=f"multiarch-gb200-{sha}",
                     architecture=arm_arch)
    return amd, arm


def _env(server: RegistryServer, launcher: Path) -> dict[str, str]:
    return {"GPURL_REGISTRY_HOST": server.host, "GPURL_LAUNCHER_PATH": str(launcher),
            # the tests' pusher attaches no SBOM or provenance
            "GPURL_VERIFY_ATTESTATIONS": "if-present", "HOME": str(launcher.parent)}


@pytest.fixture
def launcher(repo_tmp: Path) -> Path:
    """A copy of the multiarch launcher (launcher.path stays inside the repository)."""
    path = repo_tmp / "launch_rl_iris.py"
    shutil.copy(LAUNCHER, path)
    return path


def _read_index(server: RegistryServer, reference: str) -> tuple[str, str, dict]:  # type: ignore[type-arg]
    """The index through the registry API itself (not gpurl's client): digest, type, JSON."""
    answer = httpx.get(f"{server.url}/v2/{REPO}/manifests/{reference}",
                       headers={"Accept": OCI_INDEX}, timeout=10)
    answer.raise_for_status()
    digest = "sha256:" + hashlib.sha256(answer.content).hexdigest()
    assert answer.headers["Docker-Content-Digest"] == digest
    return digest, answer.headers["Content-Type"], answer.json()


@pytest.mark.integration
def test_pin_composes_the_index_verifies_both_platforms_and_pins_it(
        registry: RegistryServer, launcher: Path) -> None:
    sha = _source()
    amd, arm = _push_pair(registry, sha, 1)
    env = _env(registry, launcher)
    done = run_task("pin", "-p", "multiarch", "--json", env=env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)["variants"]["h100+gb200"]
    index = outcome["index"]
    assert index["state"] == "composed"
    assert index["reference"] == f"{registry.host}/{REPO}:multiarch-{sha}-index"
    assert [(m["variant"], m["platform"], m["digest"]) for m in index["manifests"]] == [
        ("h100", "linux/amd64", amd.manifest_digest), ("gb200", "linux/arm64", arm.manifest_digest)]
    assert outcome["reports"]["h100"]["ok"] and outcome["reports"]["gb200"]["ok"]
    assert outcome["reports"]["gb200"]["platform"] == "linux/arm64"

    # read back through the registry API: exactly those two manifests, each with its platform
    digest, media_type, document = _read_index(registry, f"multiarch-{sha}-index")
    assert digest == index["digest"] and media_type == OCI_INDEX
    assert [(m["digest"], m["size"], m["platform"]) for m in document["manifests"]] == [
        (amd.manifest_digest, len(amd.manifest), {"os": "linux", "architecture": "amd64"}),
        (arm.manifest_digest, len(arm.manifest), {"os": "linux", "architecture": "arm64"})]

    text = launcher.read_text()
    name = f"{registry.host}/{REPO}"
    assert assigned(text) == {"DEFAULT_RL_DOCKER_IMAGE": f"{name}@{digest}",
                               "DEFAULT_RL_AMD64_DOCKER_IMAGE": f"{name}@{amd.manifest_digest}",
                               "DEFAULT_RL_ARM64_DOCKER_IMAGE": f"{name}@{arm.manifest_digest}",
                               "RL_PYTHON": "/opt/multiarch/envs/rl/bin/python"}
    said = " ".join(line.removeprefix("# gpurl pin:").strip() for line in text.splitlines()
                    if line.startswith("# gpurl pin:"))
    assert f"multiarch-{sha}-index, image index, linux/amd64 5 layers" in said, said
    assert f"multiarch-gb200-{sha}, linux/arm64, 5 layers" in said, said
    assert all(len(line) <= 110 for line in text.splitlines()  # the repository's ruff line length
               if line.startswith("# gpurl pin:")), text
    # rebuild-needed reads the index pin's commit where it reads a variant's
    assert provenance_commit(text, "DEFAULT_RL_DOCKER_IMAGE", "multiarch") == sha.split("-")[0]

    # rebuild-needed of each variant starts from its own platform pin's commit
    decided = json.loads(run_task("rebuild-needed", "-p", "multiarch", "--json",
                                  env=env).stdout)["variants"]
    assert {v: (d["platform"], d["since"]["commit"][:7], d["since"]["source"].split(" in ")[0])
            for v, d in decided.items()} == {
        "h100": ("linux/amd64", sha[:7], "provenance comment"),
        "gb200": ("linux/arm64", sha[:7], "provenance comment")}

    again = run_task("pin", "-p", "multiarch", env=env)
    assert again.returncode == 0, again.stderr
    assert "(found)" in again.stdout and "nothing to do" in again.stdout
    assert launcher.read_text() == text

    # verify-layers of the index: each platform's manifest, under its variant's rules
    verified = run_task("verify-layers", "-p", "multiarch", "--ref",
                        f"{name}:multiarch-{sha}-index", env=env)
    assert verified.returncode == 0, verified.stderr
    assert "== linux/amd64 (variant h100) ==" in verified.stdout
    assert "== linux/arm64 (variant gb200) ==" in verified.stdout
    assert f"manifest {arm.manifest_digest} (linux/arm64)" in verified.stdout


@pytest.mark.integration
def test_dry_run_puts_nothing_and_writes_nothing(tmp_path: Path, launcher: Path) -> None:
    with running_registry(tmp_path / "r") as server:
        sha = _source()
        _push_pair(server, sha, 11)
        done = run_task("pin", "-p", "multiarch", "--dry-run", env=_env(server, launcher))
        assert done.returncode == 0, done.stderr
        assert "(not put (dry run))" in done.stdout and "+DEFAULT_RL_DOCKER_IMAGE" in done.stdout
        assert launcher.read_text() == LAUNCHER.read_text()
        answer = httpx.head(f"{server.url}/v2/{REPO}/manifests/multiarch-{sha}-index",
                            headers={"Accept": OCI_INDEX})
        assert answer.status_code == 404


@pytest.mark.integration
def test_a_missing_platform_refuses_the_shared_pin_and_the_other_pins_alone(
        tmp_path: Path, launcher: Path) -> None:
    with running_registry(tmp_path / "r") as server:
        sha = _source()
        amd = push_image(server.url, REPO, _layers(21), tag=f"multiarch-{sha}")
        env = _env(server, launcher)
        refused = run_task("pin", "-p", "multiarch", env=env)
        assert refused.returncode != 0
        line = refused.stderr.strip().splitlines()[0]
        assert "gb200" in line and "linux/arm64" in line and "cw-us-east-08a" in line, line
        assert "--variant h100" in refused.stderr and "Traceback" not in refused.stderr
        assert launcher.read_text() == LAUNCHER.read_text()

        alone = run_task("pin", "-p", "multiarch", "--variant", "h100", env=env)
        assert alone.returncode == 0, alone.stderr
        pins = assigned(launcher.read_text())
        assert pins["DEFAULT_RL_AMD64_DOCKER_IMAGE"] == f"{server.host}/{REPO}@{amd.manifest_digest}"
        assert pins["DEFAULT_RL_DOCKER_IMAGE"] == "127.0.0.1:5005/gpurl/multiarch:multiarch"


@pytest.mark.integration
def test_an_image_whose_config_is_another_platform_is_refused(tmp_path: Path,
                                                              launcher: Path) -> None:
    with running_registry(tmp_path / "r") as server:
        sha = _source()
        _push_pair(server, sha, 31, arm_arch="amd64")  # gb200's tag holds an amd64 image
        done = run_task("pin", "-p", "multiarch", env=_env(server, launcher))
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "gb200" in done.stderr and "not its target's linux/arm64" in done.stderr
        assert launcher.read_text() == LAUNCHER.read_text()
        alone = run_task("pin", "-p", "multiarch", "--variant", "gb200", env=_env(server, launcher))
        assert alone.returncode != 0 and "Traceback" not in alone.stderr
        assert "its config says linux/amd64, the variant's target is linux/arm64" in alone.stderr
        assert launcher.read_text() == LAUNCHER.read_text()


@pytest.mark.integration
def test_an_index_listing_an_unverified_platform_is_not_pinned(tmp_path: Path,
                                                               launcher: Path) -> None:
    """An index given by --ref is read back and compared: an entry no variant builds (here
    s390x) was never verified, so the index is refused."""
    with running_registry(tmp_path / "r") as server:
        amd, arm = _push_pair(server, "1234567", 41)
        other = push_image(server.url, REPO, _layers(43), tag=None, architecture="s390x")
        push_index(server.url, REPO, {"linux/amd64": amd, "linux/arm64": arm,
                                      "linux/s390x": other}, tag="multiarch-1234567-index")
        done = run_task("pin", "-p", "multiarch", "--ref",
                        f"{server.host}/{REPO}:multiarch-1234567-index",
                        env=_env(server, launcher))
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "linux/s390x" in done.stderr and "nobody verified it" in done.stderr
        assert launcher.read_text() == LAUNCHER.read_text()
        push_index(server.url, REPO, {"linux/amd64": amd, "linux/arm64": arm},
                   tag="multiarch-1234567-index")
        done = run_task("pin", "-p", "multiarch", "--ref",
                        f"{server.host}/{REPO}:multiarch-1234567-index", "--json",
                        env=_env(server, launcher))
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout)["variants"]["h100+gb200"]
        assert outcome["index"]["state"] == "found"
        assert assigned(launcher.read_text())["DEFAULT_RL_ARM64_DOCKER_IMAGE"] == \
            f"{server.host}/{REPO}@{arm.manifest_digest}"


@pytest.mark.integration
def test_diff_of_two_indexes_compares_each_platform(tmp_path: Path) -> None:
    with running_registry(tmp_path / "r") as server:
        old = _push_pair(server, "1111111", 51)
        new = (old[0], push_image(server.url, REPO, _layers(53)[:3] + _layers(52)[3:],
                                  tag="multiarch-gb200-2222222", architecture="arm64"))
        for sha, (amd, arm) in (("1111111", old), ("2222222", new)):
            push_index(server.url, REPO, {"linux/amd64": amd, "linux/arm64": arm},
                       tag=f"multiarch-{sha}-index")
        done = run_task("diff", "-p", "multiarch", "--json",
                        f"{server.host}/{REPO}:multiarch-1111111-index",
                        f"{server.host}/{REPO}:multiarch-2222222-index",
                        env={"GPURL_REGISTRY_HOST": server.host, "HOME": str(tmp_path)})
        assert done.returncode == 0, done.stderr
        platforms = json.loads(done.stdout)["platforms"]
        assert list(platforms) == ["linux/amd64", "linux/arm64"]
        assert platforms["linux/amd64"]["pull_bytes"] == 0  # the same amd64 image
        changed = {layer["digest"] for layer in platforms["linux/arm64"]["new_layers"]}
        assert changed == {layer.digest for layer in new[1].layers[:3]}


@pytest.mark.integration
def test_the_client_reads_an_index_back_and_refuses_a_manifest_as_one(
        registry: RegistryServer) -> None:
    from gpurl_tasks.oci.registry import RegistryClient

    amd, arm = _push_pair(registry, "7654321", 61)
    ref = parse_reference(f"{registry.host}/{REPO}:multiarch-7654321-index")
    with RegistryClient(registry.host, insecure=True) as client:
        images = client.pull_each(parse_reference(f"{registry.host}/{REPO}:multiarch-7654321"))
        assert len(images) == 1 and images[0].platform == "linux/amd64"
        members = [Member(variant="h100", cluster="c", platform="linux/amd64", image=images[0]),
                   Member(variant="gb200", cluster="g", platform="linux/arm64", image=client.pull(
                       parse_reference(f"{registry.host}/{REPO}:multiarch-gb200-7654321")))]
        index = compose_index(members)
        digest = client.put_index(ref, ref.tag or "", index)
        got_digest, got = client.read_index(ref)
        assert (got_digest, got) == (digest, index)
        assert [i.manifest_digest for i in client.pull_each(ref)] == [amd.manifest_digest,
                                                                       arm.manifest_digest]
        assert client.pull(ref, platform="linux/arm64").manifest_digest == arm.manifest_digest
        with pytest.raises(RegistryError, match="is an image manifest"):
            client.read_index(parse_reference(f"{registry.host}/{REPO}:multiarch-7654321"))


@pytest.mark.integration
def test_verify_of_an_index_reports_the_failing_platform(tmp_path: Path) -> None:
    """An index given to verify-layers: each platform checked, the one whose layer blob is gone
    fails, and the closing line names it; the other still passes."""
    with running_registry(tmp_path / "r") as server:
        amd, arm = _push_pair(server, "3333333", 71)
        push_index(server.url, REPO, {"linux/amd64": amd, "linux/arm64": arm},
                   tag="multiarch-3333333-index")
        server.remove_blob(arm.layers[2].digest)
        done = run_task("verify-layers", "-p", "multiarch", "--json", "--ref",
                        f"{server.host}/{REPO}:multiarch-3333333-index",
                        env={"GPURL_REGISTRY_HOST": server.host, "HOME": str(tmp_path),
                             "GPURL_VERIFY_ATTESTATIONS": "if-present"})
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "linux/arm64" in done.stderr.splitlines()[-1]
        platforms = json.loads(done.stdout)["variants"]["h100"]["platforms"]
        assert platforms["linux/amd64"]["ok"] and platforms["linux/amd64"]["variant"] == "h100"
        assert not platforms["linux/arm64"]["ok"] and platforms["linux/arm64"]["variant"] == "gb200"
        assert [f["code"] for f in platforms["linux/arm64"]["findings"]] == ["missing-blob"]


@pytest.mark.integration
def test_the_index_tag_is_immutable_unless_forced(tmp_path: Path, launcher: Path) -> None:
    """The index tag at this commit already holds an index of other images: pin refuses to
    move it (nodes may have pulled it) and writes nothing; --force composes and moves it."""
    with running_registry(tmp_path / "r") as server:
        sha = _source()
        amd, arm = _push_pair(server, sha, 81)
        stale = push_image(server.url, REPO, _layers(83), tag=None, architecture="arm64")
        push_index(server.url, REPO, {"linux/amd64": amd, "linux/arm64": stale},
                   tag=f"multiarch-{sha}-index")
        env = _env(server, launcher)
        refused = run_task("pin", "-p", "multiarch", env=env)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "not the verified images" in refused.stderr and "--force" in refused.stderr
        assert launcher.read_text() == LAUNCHER.read_text()
        forced = run_task("pin", "-p", "multiarch", "--force", "--json", env=env)
        assert forced.returncode == 0, forced.stderr
        index = json.loads(forced.stdout)["variants"]["h100+gb200"]["index"]
        assert index["state"] == "composed"
        digest, _, document = _read_index(server, f"multiarch-{sha}-index")
        assert digest == index["digest"]
        assert [m["digest"] for m in document["manifests"]] == [amd.manifest_digest,
                                                                arm.manifest_digest]
