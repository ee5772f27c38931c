"""The registry path under faults: a seeded fault-injecting proxy (tests/support/faults.py) in
front of the real TLS + htpasswd loopback registry, and the real clients talking to it.

- The local path: `compose_at_registry` (local/compose_env.py's registry half: records,
  composition, the blob check before the manifest) with gpurl's RegistryClient. Staging is the
  one stand-in: a slice's tree is a few files of seeded random bytes instead of what uv
  installs in a container of env-base (that needs the Docker engine and takes minutes); the
  layer is written by the real writer (writer/blob.py), as the staging container does.
- The cluster job: real crane (built from go-containerregistry v0.20.3's source archive)
  through the generated script's retry wrapper (cluster/kaniko.py renders it), as the job
  runs every registry call.

For each case the registry is read afterwards (plain httpx, not the client under test): every
manifest of the cache and image repositories names blobs the registry holds, the composed
(immutable) tag is absent or complete, and a rerun reuses the slices that were fully written.
The outcome of each case is collected into the table docs/build.md shows (`OUTCOMES`).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import random
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.cluster.kaniko import _retry
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import BuildError, RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.compose_env import BaseDocuments, Wanted, compose_at_registry
from gpurl_tasks.local.composed import SliceOutcome
from gpurl_tasks.local.from_source import setup_kaniko
from gpurl_tasks.local.stage import StagedSlice
from gpurl_tasks.oci.auth import Credentials
from gpurl_tasks.oci.connect import registry_client
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.oci.retry import RETRIED_ANSWERS
from gpurl_tasks.plan.model import Layer, Slice
from gpurl_tasks.release.configured import client_settings
from gpurl_tasks.writer.blob import write_layer
from gpurl_tasks.writer.ocispec import canonical_json
from gpurl_tasks.writer.records import slice_image, write_layout
from tests.conftest import REPO_ROOT
from tests.support.faults import Fault, FaultProxy, Rates
from tests.support.htpasswd import basic_auth_yaml
from tests.support.local_parts import need
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.registry_state import manifest as _manifest
from tests.support.registry_state import missing_blobs as _missing_blobs
from tests.support.registry_state import sound
from tests.support.tls import LocalCA, make_ca

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER = "gpurl"
CANARY = "ghp_CANARYregistryFaults4e1d7c"
VENV = "/opt/venv"
CACHE_REPO = "gpurl/faults/cache"
IMAGE_REPO = "gpurl/faults"
OCI = "application/vnd.oci.image.manifest.v1+json"
CRANE_ARCHIVE = REPO_ROOT / ".cache" / "gpurl" / "builders" / "crane"

# (case, path, outcome, retries, the rerun's reuse): filled by the tests, written at the end
OUTCOMES: list[dict[str, str]] = []


def _outcome(case: str, path: str, outcome: str, retries: int | str, reuse: str = "-") -> None:
    OUTCOMES.append({"case": case, "path": path, "outcome": outcome, "retries": str(retries),
                     "reuse": reuse})


DOC = REPO_ROOT / "docs" / "build.md"
_BEGIN, _END = "<!-- registry-faults:begin -->\n", "<!-- registry-faults:end -->\n"
_COLUMNS = ("case", "path", "outcome", "retries", "reuse")


def _table_text(rows: Sequence[dict[str, str]]) -> str:
    return ("| case | path | outcome | retries | rerun's reuse |\n|---|---|---|---|---|\n"
            + "".join("| " + " | ".join(row[c] for c in _COLUMNS) + " |\n" for row in rows))


def _doc_rows(text: str) -> list[tuple[str, ...]]:
    block = text.split(_BEGIN, 1)[1].split(_END, 1)[0]
    return [tuple(cell.strip() for cell in line.strip("|").split(" | "))
            for line in block.splitlines()[2:]]


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    if OUTCOMES:
        print("\n" + _table_text(OUTCOMES))


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def registry(tmp_path: Path, ca: LocalCA, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryServer]:
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca))
    with running_registry(tmp_path / "registry", tls=ca,
                          auth_yaml=basic_auth_yaml(tmp_path, USER, CANARY)) as server:
        yield server


def _config(host: str, *, retries: int = 4, max_wait: int = 3) -> Config:
    return load_config(REPO_ROOT, profile="demo", env={}, overrides={
        "registry.host": host, "registry.retries": retries, "registry.retry-max-wait": max_wait})


CREDENTIALS = Credentials(username=USER, secret=CANARY)


def _client(host: str, lines: list[str] | None = None, **config: int) -> RegistryClient:
    """gpurl's client as every registry read and write makes it (`registry_client`)."""
    return registry_client(client_settings(_config(host, **config)), host, CREDENTIALS,
                           on_retry=None if lines is None else lines.append)


# --- what the registry holds, read without the client under test -------------------------

def _http(server: RegistryServer, ca: LocalCA) -> httpx.Client:
    return httpx.Client(base_url=server.url, verify=ca.context(), auth=(USER, CANARY),
                        timeout=30)


def _sound(server: RegistryServer, ca: LocalCA, settle: float = 0.0) -> dict[str, list[str]]:
    """{repo: its tags}, every manifest under every tag naming only blobs the registry holds
    (a registry's cleanup aside, nothing this path wrote is half there)."""
    with _http(server, ca) as http:
        return sound(http, (CACHE_REPO, IMAGE_REPO), settle=settle)


# --- the local path's registry half --------------------------------------------------------

def _tree(root: Path, label: str, size: int) -> Path:
    """A staged slice's tree: seeded random files (incompressible, so the blob is `size`)."""
    rng = random.Random(label)
    tree = root / f"tree-{label}"
    if not tree.exists():
        site = tree / "lib" / "python3.11" / "site-packages" / label
        site.mkdir(parents=True)
        for n in range(3):
            (site / f"part{n}.bin").write_bytes(rng.randbytes(size // 3))
        (site / "__init__.py").write_text(f"NAME = {label!r}\n")
    return tree


@dataclasses.dataclass
class Local:
    """One cache repository with env-base pushed, and what composing on it needs."""

    server: RegistryServer
    root: Path
    base: BaseDocuments
    staged: list[str] = dataclasses.field(default_factory=list)

    def wanted(self, host: str, labels: Sequence[str]) -> list[Wanted]:
        cache = parse_reference(f"{host}/{CACHE_REPO}", bare=True)
        return [Wanted(layer=Layer(slice=Slice(position=n + 1, label=label), packages=()),
                       path=self.root / f"{label}.txt",
                       ref=dataclasses.replace(cache, tag=f"slice-{label}-{_key(label)}",
                                               digest=None))
                for n, label in enumerate(labels)]

    def stage(self, w: Wanted) -> StagedSlice:
        """The stand-in for the staging container: the real writer over a seeded tree."""
        self.staged.append(w.layer.name)
        start = time.monotonic()
        out = self.root / "out" / f"{w.layer.name}-{time.monotonic_ns()}.tar.gz"
        blob = write_layer(_tree(self.root, w.layer.label, 240_000), out, prefix=VENV, level=1)
        return StagedSlice(path=out, blob=blob, seconds=time.monotonic() - start, log="staged")

    def compose(self, client: RegistryClient, host: str, labels: Sequence[str]
                ) -> tuple[tuple[SliceOutcome, ...], str, str]:
        self.staged = []
        return compose_at_registry(
            client, cache=parse_reference(f"{host}/{CACHE_REPO}", bare=True),
            target=parse_reference(f"{host}/{IMAGE_REPO}", bare=True), base=self.base,
            wanted=self.wanted(host, labels), stage=self.stage, venv=VENV,
            log_dir=self.root / "logs")


def _key(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:32]


def _push_env_base(client: RegistryClient, server: RegistryServer, root: Path) -> BaseDocuments:
    """env-base: one layer and a config, pushed straight to the registry (no faults)."""
    ref = parse_reference(f"{server.host}/{CACHE_REPO}:env-base", bare=False)
    tree = root / "env-base"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "python").write_text("#!/bin/sh\n")
    blob = write_layer(tree, root / "env-base.tar.gz", prefix="opt/venv", level=1)
    client.push_blob(ref, root / "env-base.tar.gz", blob.digest)
    config = canonical_json({"architecture": "amd64", "os": "linux",
                             "config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"]},
                             "rootfs": {"type": "layers", "diff_ids": [blob.diff_id]},
                             "history": [{"created_by": "RUN uv venv /opt/venv"}]})
    client.push_blob(ref, config)
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": OCI,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + hashlib.sha256(config).hexdigest(), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": blob.digest, "size": blob.size}]})
    client.put_manifest(ref, "env-base", manifest, OCI)
    return BaseDocuments(manifest=json.loads(manifest), config=json.loads(config))


@pytest.fixture
def local(registry: RegistryServer, tmp_path: Path) -> Local:
    with _client(registry.host) as client:
        base = _push_env_base(client, registry, tmp_path)
    return Local(server=registry, root=tmp_path, base=base)


LABELS = ("torch", "cuda", "numpy", "tail")


def _composed_complete(local: Local, ca: LocalCA, digest: str, labels: Sequence[str]) -> None:
    """The composed image is env-base's layer, then each slice's blob in order, all held."""
    with _http(local.server, ca) as http:
        manifest = _manifest(http, IMAGE_REPO, digest)
        assert manifest is not None
        assert not _missing_blobs(http, IMAGE_REPO, manifest)
        records = [_manifest(http, CACHE_REPO, f"slice-{label}-{_key(label)}") for label in labels]
    assert all(records)
    assert [d["digest"] for d in manifest["layers"]] == [
        local.base.manifest["layers"][0]["digest"],
        *(r["layers"][0]["digest"] for r in records if r is not None)]


@pytest.mark.parametrize(("case", "rates"), [
    ("5xx on uploads and manifest PUTs",
     Rates(seed=1, upload_5xx=0.3, manifest_put_5xx=0.4, only_agent="gpurl")),
    ("reset mid-body", Rates(seed=2, reset_mid_body=0.5, only_agent="gpurl")),
    ("all three at once", Rates(seed=4, upload_5xx=0.2, manifest_put_5xx=0.2,
                                reset_mid_body=0.3, only_agent="gpurl")),
])
def test_the_local_path_composes_through_fault_rates(case: str, rates: Rates, local: Local,
                                                     ca: LocalCA) -> None:
    """Seeded faults on every upload and manifest PUT: each is retried (one line each, as many
    lines as faults the proxy injected), the composition completes, and every manifest the
    registry holds names blobs it holds; a rerun reuses every slice."""
    lines: list[str] = []
    with FaultProxy(local.server.port, tls=ca, rates=rates) as proxy, \
            _client(proxy.host, lines) as client:
        outcomes, _, digest = local.compose(client, proxy.host, LABELS)
        injected = sum(proxy.injected.values())
        assert injected >= 3, proxy.injected  # the seed does put faults on this run
        assert len(lines) == injected, lines
        assert all(line.startswith("retry ") and " answered " in line for line in lines)
        assert [o.built for o in outcomes] == [True] * len(LABELS)
        _composed_complete(local, ca, digest, LABELS)
        again, _, digest_again = local.compose(client, proxy.host, LABELS)
    assert digest_again == digest and not any(o.built for o in again)
    assert local.staged == []
    _sound(local.server, ca)
    _outcome(case, "local", "complete", f"{injected} ({dict(proxy.injected)})",
             f"{len(LABELS)}/{len(LABELS)} reused")


def test_a_429_waits_for_its_retry_after(local: Local, ca: LocalCA) -> None:
    """A 429 with Retry-After: 2 on manifest PUTs and uploads: the client's next try of that
    request comes no sooner than 2 s later, and its line says it waited for Retry-After."""
    lines: list[str] = []
    rates = Rates(seed=3, too_many=0.15, retry_after="2", only_agent="gpurl")
    with FaultProxy(local.server.port, tls=ca, rates=rates) as proxy, \
            _client(proxy.host, lines) as client:
        _, _, digest = local.compose(client, proxy.host, LABELS[:2])
    assert proxy.injected["429"] >= 1
    assert len(lines) == proxy.injected["429"]
    assert all("(Retry-After 2)" in line and " in 2.0s" in line for line in lines)
    log = proxy.log
    for n, (when, method, path, what) in enumerate(log):
        if what == "429":
            later = [t for t, m, p, _ in log[n + 1:] if (m, p) == (method, path)
                     or (m == "POST" and "/blobs/uploads/" in path and "/blobs/uploads/" in p)]
            assert later and later[0] - when >= 1.9, (method, path)
    _composed_complete(local, ca, digest, LABELS[:2])
    _outcome("429 with Retry-After 2", "local", "complete, each retry after >= 2 s",
             proxy.injected["429"])


def test_uploads_that_always_fail_name_the_request_and_the_answer(local: Local,
                                                                  ca: LocalCA) -> None:
    """Every upload answered 503: the run stops after `registry.retries` retries with one error
    naming the blob, the PUT and the registry's answer (never the token); nothing under the
    composed tag; the rerun, the registry answering again, writes and composes everything."""
    lines: list[str] = []
    rates = Rates(seed=5, upload_5xx=1.0, streak=1000, only_agent="gpurl")
    with FaultProxy(local.server.port, tls=ca, rates=rates) as proxy, \
            _client(proxy.host, lines, retries=2, max_wait=1) as client:
        with pytest.raises(RegistryError) as info:
            local.compose(client, proxy.host, LABELS[:2])
        message = f"{info.value.message} {info.value.hint}"
        assert "503 (UNKNOWN)" in message and "POST /v2/gpurl/faults/cache/blobs/uploads/" \
            in message and "after 3 attempts" in message, message
        assert CANARY not in message + "".join(lines)
        assert base64.b64encode(f"{USER}:{CANARY}".encode()).decode() not in message
        held = _sound(local.server, ca)
        assert held[IMAGE_REPO] == [] and held[CACHE_REPO] == ["env-base"]
        proxy.rates = None
        outcomes, _, digest = local.compose(client, proxy.host, LABELS[:2])
    assert all(o.built for o in outcomes)
    _composed_complete(local, ca, digest, LABELS[:2])
    _outcome("every upload 503 (retries 2)", "local",
             "fails naming blob, request, 503; no tag", len(lines), "rerun writes 2/2")


def test_a_record_whose_blob_was_removed_is_written_again(local: Local, ca: LocalCA) -> None:
    """A slice record whose layer blob was deleted from the registry's storage (its tag left):
    the next composition does not trust it, writes that slice again and reuses the rest; the
    composed image's blobs are all there."""
    with _client(local.server.host) as client:
        first, _, _ = local.compose(client, local.server.host, LABELS)
        lost = first[1]
        local.server.remove_blob(lost.blob)
        second, _, digest = local.compose(client, local.server.host, LABELS)
    assert [(o.name, o.built, o.rewritten) for o in second] == \
        [(o.name, o.name == lost.name, o.name == lost.name) for o in first]
    assert local.staged == [lost.name]
    _composed_complete(local, ca, digest, LABELS)
    _sound(local.server, ca)
    _outcome("record whose blob was removed", "local", "slice rewritten, complete", 0,
             f"{len(LABELS) - 1}/{len(LABELS)} reused, 1 rewritten")


def _slice_tag(label: str) -> str:
    return f"slice-{label}-{_key(label)}"


@pytest.mark.parametrize("step", ["a slice's record", "the composition"])
def test_a_run_stopped_at_a_step_leaves_complete_records_and_the_rerun_reuses_them(
        step: str, local: Local, ca: LocalCA) -> None:
    """The registry refuses one step for good (its manifest PUT answered 500 until the run
    gives up): the run fails; every tag the registry holds is complete and the composed tag is
    absent; the rerun reuses exactly the slices whose records were written, writes the rest."""
    path = f"/manifests/{_slice_tag(LABELS[2])}" if step == "a slice's record" \
        else "/v2/gpurl/faults/manifests/env-"
    with FaultProxy(local.server.port, tls=ca) as proxy, \
            _client(proxy.host, retries=1, max_wait=1) as client:
        proxy.inject(Fault(path=path, kind="500", times=1000, method="PUT"))
        with pytest.raises((RegistryError, BuildError)):
            local.compose(client, proxy.host, LABELS)
        held = _sound(local.server, ca)
        assert held[IMAGE_REPO] == []
        written = {t for t in held[CACHE_REPO] if t.startswith("slice-")}
        assert _slice_tag(LABELS[2]) not in written or step != "a slice's record"
        proxy.faults.clear()
        outcomes, _, digest = local.compose(client, proxy.host, LABELS)
    reused = [o.name for o in outcomes if not o.built]
    assert sorted(reused) == sorted(f"{n + 1:02d}-{label}" for n, label in enumerate(LABELS)
                                    if _slice_tag(label) in written)
    if step == "the composition":
        assert len(reused) == len(LABELS)
    _composed_complete(local, ca, digest, LABELS)
    _outcome(f"stopped at {step}", "local", "fails; no composed tag; records complete",
             len([e for e in proxy.log if e[3] == "500"]) - 1,
             f"{len(reused)}/{len(LABELS)} reused")


# The composition in a process of its own, to be killed: the helpers above, over a base read
# from a file (argv: registry host, work directory, env-base's documents).
_CHILD = """
import json, sys
from pathlib import Path
from gpurl_tasks.local.compose_env import BaseDocuments
from tests.test_registry_faults import LABELS, Local, _client
docs = json.loads(Path(sys.argv[3]).read_text())
local = Local(server=None, root=Path(sys.argv[2]),
              base=BaseDocuments(manifest=docs["manifest"], config=docs["config"]))
with _client(sys.argv[1]) as client:
    local.compose(client, sys.argv[1], LABELS)
"""


@pytest.mark.parametrize("step", ["a slice", "the composition"])
def test_a_run_killed_at_a_step_leaves_complete_records_and_the_rerun_reuses_them(
        step: str, local: Local, ca: LocalCA, tmp_path: Path) -> None:
    """The composing process SIGKILLed as the proxy sees the step begin (the second slice
    record's manifest PUT; the first blob mount into the image's repository): every tag the
    registry holds is complete, the composed tag is absent, and the rerun reuses exactly the
    slices whose records were written (all of them when it was killed composing)."""
    docs = tmp_path / "env-base.json"
    docs.write_text(json.dumps({"manifest": dict(local.base.manifest),
                                "config": dict(local.base.config)}))
    child_root = tmp_path / "child"
    child_root.mkdir()
    with FaultProxy(local.server.port, tls=ca) as proxy:
        child = subprocess.Popen(
            [str(REPO_ROOT / ".venv" / "bin" / "python"), "-c", _CHILD, proxy.host,
             str(child_root), str(docs)], cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def begun() -> bool:
            if step == "a slice":
                return len([e for e in proxy.log if e[1] == "PUT" and "/manifests/slice-"
                            in e[2]]) >= 2
            return any("mount=" in e[2] and e[2].startswith(f"/v2/{IMAGE_REPO}/")
                       for e in proxy.log)

        deadline = time.monotonic() + 120
        while not begun() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        child.kill()
        _, stderr = child.communicate(timeout=30)
        assert child.returncode == -9, stderr.decode()[-2000:]
        held = _sound(local.server, ca, settle=1.0)  # a request in flight still lands
        assert held[IMAGE_REPO] == []
        written = {t for t in held[CACHE_REPO] if t.startswith("slice-")}
        if step == "the composition":
            assert written == {_slice_tag(label) for label in LABELS}
        with _client(proxy.host) as client:
            outcomes, _, digest = local.compose(client, proxy.host, LABELS)
    reused = {_slice_tag(o.name.split("-", 1)[1]) for o in outcomes if not o.built}
    assert reused == written
    _composed_complete(local, ca, digest, LABELS)
    _sound(local.server, ca)
    _outcome(f"killed (SIGKILL) at {step}", "local", "no composed tag; records complete", 0,
             f"{len(reused)}/{len(LABELS)} reused")


def test_two_compositions_at_once_on_one_cache_both_complete(local: Local, ca: LocalCA) -> None:
    """Two commits composed at once on one cache repository, through faults: they share two
    slices (the same key gives the same bytes, so the records' writes are idempotent) and each
    gets its own complete image of its own slices."""
    first_labels, second_labels = LABELS, ("torch", "cuda", "scipy", "tail")
    results: dict[str, tuple[tuple[SliceOutcome, ...], str, str]] = {}
    errors: list[BaseException] = []
    rates = Rates(seed=6, upload_5xx=0.2, manifest_put_5xx=0.2, only_agent="gpurl")
    with FaultProxy(local.server.port, tls=ca, rates=rates) as proxy:
        def run(name: str, labels: Sequence[str]) -> None:
            mine = Local(server=local.server, root=local.root / name, base=local.base)
            mine.root.mkdir()
            try:
                with _client(proxy.host) as client:
                    results[name] = mine.compose(client, proxy.host, labels)
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=run, args=("a", first_labels)),
                   threading.Thread(target=run, args=("b", second_labels))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert results["a"][2] != results["b"][2]
    _composed_complete(local, ca, results["a"][2], first_labels)
    _composed_complete(local, ca, results["b"][2], second_labels)
    _sound(local.server, ca)
    _outcome("two compositions at once", "local", "both complete, own slices",
             sum(proxy.injected.values()), "shared slices: same blobs")


# --- the cluster job's crane calls, through the generated wrapper ----------------------------

@pytest.fixture(scope="module")
def crane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real crane, from the release archive `invoke setup-kaniko` builds from its source
    archive: built here (crane alone, cached for the kaniko e2e) where the archives are."""
    archives = sorted(CRANE_ARCHIVE.glob("*.tar.gz")) if CRANE_ARCHIVE.is_dir() else []
    sources = load_config(REPO_ROOT, profile="demo", env={}).cluster.source_archives
    if not archives and sources.is_dir():
        archives = [setup_kaniko(CRANE_ARCHIVE.parent, sources, "127.0.0.1:5005",
                                 executors=()).crane_archive]
    need(archives, f"no crane release archive under {CRANE_ARCHIVE} and no source archives at "
         f"{sources} to build it from (invoke setup-kaniko)")
    out = tmp_path_factory.mktemp("crane")
    with tarfile.open(archives[0]) as archive:
        archive.extract("crane", out, filter="data")
    return out / "crane"


@dataclasses.dataclass
class Job:
    """The job's wrapper as the script renders it, and crane's login. The wrapper's part of
    the script runs first; each command then runs in a shell of its own that sources the file
    it wrote, as the composing build (a kaniko RUN in env-base) does."""

    crane: Path
    work: Path
    env: dict[str, str]
    wrapper: str

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        prelude = 'set -euo pipefail\ndie() { echo "error: $*" >&2; exit 1; }\n'
        wrote = subprocess.run(["bash", "-c", f"{prelude}WORK={self.work}\n{self.wrapper}"],
                               env=self.env, capture_output=True, text=True, timeout=60,
                               check=False)
        assert wrote.returncode == 0, wrote.stderr
        script = f'{prelude}WORK={self.work}\n. "$WORK/registry-retry.sh"\n{command}\n'
        return subprocess.run(["bash", "-c", script], env=self.env, capture_output=True,
                              text=True, timeout=300, check=False)


def _job(tmp: Path, crane: Path, ca: LocalCA, host: str, *, retries: int = 4,
         max_wait: int = 5) -> Job:
    docker = tmp / "docker"
    docker.mkdir(exist_ok=True)
    auth = base64.b64encode(f"{USER}:{CANARY}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "DOCKER_CONFIG": str(docker),
           "SSL_CERT_FILE": str(ca.ca), "CRANE": str(crane)}
    return Job(crane=crane, work=work, env=env,
               wrapper=_retry(_config(host, retries=retries, max_wait=max_wait)))


def _slice_layout(tmp: Path, label: str) -> Path:
    """A slice's one-layer image as the job's layer tool writes it (an OCI layout)."""
    layout = tmp / f"layout-{label}"
    written = tmp / f"{label}.tar.gz"
    blob = write_layer(_tree(tmp, label, 900_000), written, prefix=VENV.strip("/"), level=1)
    manifest, config = slice_image(blob, created_by=f"uv pip install {label}", media_type=OCI,
                                   platform={"architecture": "amd64", "os": "linux"})
    write_layout(layout, manifest, config, (blob, written))
    return layout


def _retry_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("    retry ")]


def test_crane_pushes_through_fault_rates_with_the_jobs_wrapper(
        registry: RegistryServer, ca: LocalCA, crane: Path, tmp_path: Path) -> None:
    """Three slices pushed by real crane through seeded 5xx on uploads and manifest PUTs and
    resets mid-body: crane's own retries take some, the wrapper retries the calls crane gives
    up on (one line each); every push completes and the registry holds whole images."""
    rates = Rates(seed=11, upload_5xx=0.35, manifest_put_5xx=0.8, reset_mid_body=0.4,
                  streak=3)
    with FaultProxy(registry.port, tls=ca, rates=rates) as proxy:
        job = _job(tmp_path, crane, ca, proxy.host)
        pushes = [f'retried "$WORK/{label}.err" "push of slice {label}" "$CRANE" push '
                  f'{_slice_layout(tmp_path, label)} {proxy.host}/{CACHE_REPO}:{_slice_tag(label)}'
                  f' >/dev/null || {{ echo "cannot push slice {label}: $(cat "$WORK/{label}.err")"'
                  ' >&2; exit 1; }'
                  for label in LABELS[:3]]
        done = job.run("\n".join(pushes))
        injected = dict(proxy.injected)
    assert done.returncode == 0, done.stderr[-3000:]
    assert injected.get("500") and injected.get("503") and injected.get("reset"), injected
    lines = _retry_lines(done)
    assert all(("push of slice" in line) for line in lines), lines
    assert CANARY not in done.stdout + done.stderr
    held = _sound(registry, ca)
    assert sorted(_slice_tag(label) for label in LABELS[:3]) == held[CACHE_REPO]
    _outcome("5xx + resets on crane push (3 slices)", "job (real crane)", "complete",
             f"{len(lines)} by the wrapper, {sum(injected.values())} faults ({injected})")


def test_crane_reads_wait_for_retry_after_which_crane_alone_ignores(
        registry: RegistryServer, ca: LocalCA, crane: Path, tmp_path: Path) -> None:
    """429s with Retry-After: 2 on a manifest read: crane alone fails at once (it retries no
    429 on a read, and reads no Retry-After); the wrapper tries the call again after 2 s each
    time, saying so, and gets the digest."""
    with FaultProxy(registry.port, tls=ca) as proxy:
        job = _job(tmp_path, crane, ca, proxy.host)
        pushed = job.run(f'"$CRANE" push {_slice_layout(tmp_path, "numpy")} '
                         f'{proxy.host}/{CACHE_REPO}:numpy >/dev/null')
        assert pushed.returncode == 0, pushed.stderr
        # crane digest asks HEAD, then GET when HEAD fails: a 429 on each fails the call
        proxy.inject(Fault(path="/manifests/numpy", kind="429", times=2, retry_after="2"))
        alone = job.run(f'"$CRANE" digest {proxy.host}/{CACHE_REPO}:numpy')
        assert alone.returncode != 0 and "TOOMANYREQUESTS" in alone.stderr
        proxy.faults.clear()
        proxy.log.clear()
        proxy.inject(Fault(path="/manifests/numpy", kind="429", times=4, retry_after="2"))
        start = time.monotonic()
        done = job.run(f'retried "$WORK/d.err" "lookup of numpy" "$CRANE" digest '
                       f'{proxy.host}/{CACHE_REPO}:numpy')
        elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("sha256:")
    lines = _retry_lines(done)
    assert len(lines) == 2 and all("Retry-After 2 s" in line for line in lines), lines
    assert elapsed >= 4.0
    _outcome("429 Retry-After 2 on a read (crane alone: fails at once)", "job (real crane)",
             "complete, each retry after >= 2 s", f"{len(lines)} ({elapsed:.1f} s in all)")


def test_a_crane_call_that_keeps_failing_names_the_request_and_the_answer(
        registry: RegistryServer, ca: LocalCA, crane: Path, tmp_path: Path) -> None:
    """Uploads answered 503 for good: the wrapper gives up after REGISTRY_RETRIES retries and
    leaves the registry's answer (the request, its error code) for the script's message,
    without the token; a 404 is answered at once, never retried."""
    with FaultProxy(registry.port, tls=ca) as proxy:
        job = _job(tmp_path, crane, ca, proxy.host, retries=2, max_wait=1)
        proxy.inject(Fault(path="/blobs/uploads/", kind="503", times=10_000))
        done = job.run(f'retried "$WORK/p.err" "push of slice cuda" "$CRANE" push '
                       f'{_slice_layout(tmp_path, "cuda")} {proxy.host}/{CACHE_REPO}:cuda '
                       '|| { echo "cannot push slice cuda: $(tr "\\n" " " <"$WORK/p.err")" >&2; '
                       'exit 1; }')
        missing = job.run(f'retried "$WORK/m.err" "lookup" "$CRANE" digest '
                          f'{proxy.host}/{CACHE_REPO}:absent || cat "$WORK/m.err"')
    assert done.returncode != 0
    message = done.stderr.splitlines()[-1]
    assert message.startswith("cannot push slice cuda: Error: ")
    assert f"POST https://{proxy.host}/v2/{CACHE_REPO}/blobs/uploads/" in message
    assert "UNKNOWN" in message and "after 3 attempts" in message, message
    assert len(_retry_lines(done)) == 2
    assert CANARY not in done.stdout + done.stderr
    assert base64.b64encode(f"{USER}:{CANARY}".encode()).decode() not in done.stderr
    assert _retry_lines(missing) == [] and "MANIFEST_UNKNOWN" in missing.stdout
    held = _sound(registry, ca)
    assert held[CACHE_REPO] == []
    _outcome("every upload 503 on crane push (retries 2)", "job (real crane)",
             "fails naming slice, POST, UNKNOWN; no tag", 2)


def test_the_outcome_table_in_the_docs_is_what_these_cases_give() -> None:
    """docs/build.md's table has one row per case above, its case, path and outcome as this
    run's (run last; UPDATE_DOCS=1 writes this run's rows, numbers included)."""
    expected = 14  # the cases above, one row each
    if len(OUTCOMES) != expected:
        pytest.skip(f"{len(OUTCOMES)} of the {expected} cases ran: the table needs them all")
    text = DOC.read_text()
    if os.environ.get("UPDATE_DOCS") == "1":
        head, rest = text.split(_BEGIN, 1)
        DOC.write_text(head + _BEGIN + _table_text(OUTCOMES) + _END + rest.split(_END, 1)[1])
        text = DOC.read_text()
    assert [row[:3] for row in _doc_rows(text)] == \
        [(row["case"], row["path"], row["outcome"]) for row in OUTCOMES]



_ANSWERS = [  # (crane's error line, worth sending again)
    ("Error: PUT https://r/v2/x/blobs/uploads/1?_state=REDACTED: UNKNOWN: unknown error", True),
    ("2026/12/02 06:17:02 pushing r/x/cache:compose-1: PATCH https://r/v2/x/blobs/uploads/8"
     "?_state=REDACTED UNKNOWN:  ", True),  # a rebase's last line
    ("Error: HEAD https://r/v2/x/blobs/sha256:48: unexpected status code 429 Too Many Requests",
     True),
    ("Error: GET https://r/v2/x/manifests/t: unexpected status code 503 Service Unavailable", True),
    ("Error: GET https://r/v2/x/manifests/t: MANIFEST_UNKNOWN: manifest unknown", False),
    ("Error: GET https://r/v2/x/blobs/sha256:1: BLOB_UNKNOWN: blob unknown to registry", False),
    ("Error: GET https://r/v2/x/manifests/t: NAME_UNKNOWN: repository name not known", False),
    ("Error: GET https://r/v2/x/manifests/t: unexpected status code 404 Not Found", False),
    ("Error: GET https://r/v2/x/manifests/t: DENIED: requested access to the resource is denied",
     False),
]


@pytest.mark.parametrize(("line", "retried"), _ANSWERS)
def test_the_job_retries_exactly_the_answers_worth_sending_again(line: str, retried: bool) -> None:
    """The wrapper's pattern through the real `grep -E` it runs in the job: a registry's
    transient code is retried wherever crane puts it; a final *_UNKNOWN, a 404 or a denial
    never is."""
    done = subprocess.run(["grep", "-qE", RETRIED_ANSWERS], input=line, text=True, check=False)
    assert (done.returncode == 0) is retried, line
