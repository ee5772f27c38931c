"""The registry path under faults: a seeded fault-injecting proxy (tests/support/faults.py) in
front of the real TLS + htpasswd loopback registry, and the one orchestration of a composition
(writer/orchestration.py: records, composition, the blob check before the manifest) talking to
it through each of its two registries, every case written once and run against both:

- the local path's: gpurl's RegistryClient (oci/composing.py);
- the cluster job's: real crane (built from go-containerregistry v0.20.3's source archive) as
  a subprocess (writer/crane.py), retried by the same rules; skipped, saying why, where no
  crane can be had.

Staging is the one stand-in: a slice's tree is a few files of seeded random bytes instead of
what uv installs in env-base (that needs the Docker engine or a package index and takes
minutes); the layer is written by the real writer (writer/blob.py), as staging does.

For each case the registry is read afterwards (plain httpx, not the client under test): every
manifest of the cache and image repositories names blobs the registry holds, the composed
(immutable) tag is absent or complete, and a rerun reuses the slices that were fully written.
The outcome of each case is collected into the table docs/build.md shows (`OUTCOMES`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import email.utils
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpurl_tasks.cluster.kaniko import job_app
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.auth import Credentials
from gpurl_tasks.oci.composing import ClientRegistry
from gpurl_tasks.oci.connect import registry_client
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.configured import client_settings
from gpurl_tasks.writer.blob import write_layer
from gpurl_tasks.writer.crane import Crane, crane_answer, retry_after_of
from gpurl_tasks.writer.ocispec import canonical_json
from gpurl_tasks.writer.orchestration import (
    BaseDocuments,
    Composed,
    ComposeError,
    Registry,
    SliceFailures,
    Slot,
    StagedSlice,
    compose_env,
)
from gpurl_tasks.writer.records import IndexLine, record_of, slice_of, written_history
from gpurl_tasks.writer.retry import RETRIED_ANSWERS, RetryRules
from tests.conftest import REPO_ROOT
from tests.support.faults import Fault, FaultProxy, Rates
from tests.support.htpasswd import basic_auth_yaml
from tests.support.local_parts import pure_wheel, real_crane
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


# --- the two registries the one orchestration runs against ---------------------------------

@pytest.fixture(scope="module")
def crane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real crane (`real_crane`: skipped, saying why, where none can be had)."""
    return real_crane(tmp_path_factory.mktemp("crane"))


_LOGIN = threading.Lock()  # two compositions at once log in from two threads


def _login(host: str) -> None:
    """crane's login for `host` in $DOCKER_CONFIG, as the job writes it: read, changed and
    replaced whole under a lock, so a thread's crane never reads a file half written."""
    path = Path(os.environ["DOCKER_CONFIG"]) / "config.json"
    with _LOGIN:
        auths = json.loads(path.read_text())["auths"] if path.exists() else {}
        auths[host] = {"auth": base64.b64encode(f"{USER}:{CANARY}".encode()).decode()}
        written = path.with_suffix(".json.tmp")
        written.write_text(json.dumps({"auths": auths}))
        written.replace(path)


@contextlib.contextmanager
def open_registry(host: str, *, crane: Path | None, scratch: Path,
                  lines: list[str] | None = None, retries: int = 4, max_wait: int = 3,
                  cache_repo: str = CACHE_REPO) -> Iterator[Registry]:
    """The orchestration's registry: gpurl's client (the local path: the image composed in
    IMAGE_REPO), or real crane as the job runs it (`crane`: composed in the cache repository)."""
    if crane is None:
        with _client(host, lines, retries=retries, max_wait=max_wait) as client:
            yield ClientRegistry(client=client,
                                 cache=parse_reference(f"{host}/{cache_repo}", bare=True),
                                 target=parse_reference(f"{host}/{IMAGE_REPO}", bare=True))
        return
    _login(host)
    scratch.mkdir(parents=True, exist_ok=True)
    yield Crane(binary=crane, repository=f"{host}/{cache_repo}", scratch=scratch,
                rules=RetryRules(attempts=retries + 1, max_wait=float(max_wait)),
                on_retry=(lambda _: None) if lines is None else lines.append)


@dataclasses.dataclass(frozen=True)
class Adapter:
    """One of the two registries a case runs against, and what differs between them: the
    User-Agent the seeded faults pick, where the composed image goes, and whether every fault
    is a retry of ours (crane retries some itself, and answers a failed HEAD with a GET)."""

    path: str  # the docs table's column
    agent: str
    composed_repo: str
    crane: Path | None

    def open(self, host: str, scratch: Path, lines: list[str] | None = None, *,
             retries: int = 4, max_wait: int = 3) -> contextlib.AbstractContextManager[Registry]:
        return open_registry(host, crane=self.crane, scratch=scratch, lines=lines,
                             retries=retries, max_wait=max_wait)

    def rates(self, rates: Rates) -> Rates:
        return dataclasses.replace(rates, only_agent=self.agent)


@pytest.fixture(params=["local", "crane"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Adapter:
    if request.param == "local":
        return Adapter(path="local", agent="gpurl", composed_repo=IMAGE_REPO, crane=None)
    binary = request.getfixturevalue("crane")  # skips, saying why, where crane is absent
    docker = tmp_path / "docker"
    docker.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    return Adapter(path="job (real crane)", agent="crane", composed_repo=CACHE_REPO, crane=binary)


# --- the composition's inputs: env-base, and slices staged by a stand-in -----------------------

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


def _key(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:32]


def _slice_tag(label: str) -> str:
    return f"slice-{label}-{_key(label)}"


@dataclasses.dataclass
class Local:
    """One cache repository with env-base pushed, and what composing on it needs."""

    server: RegistryServer | None
    root: Path
    base: BaseDocuments
    staged: list[str] = dataclasses.field(default_factory=list)

    @staticmethod
    def slots(labels: Sequence[str]) -> list[Slot]:
        return [Slot(name=f"{n + 1:02d}-{label}", tag=_slice_tag(label),
                     created_by=written_history(f"/tmp/gpurl-layers/{n + 1:02d}-{label}.txt", VENV))
                for n, label in enumerate(labels)]

    def stage(self, slot: Slot) -> StagedSlice:
        """The stand-in for the staging install: the real writer over a seeded tree."""
        self.staged.append(slot.name)
        start = time.monotonic()
        out = self.root / "out" / f"{slot.name}-{time.monotonic_ns()}.tar.gz"
        out.parent.mkdir(parents=True, exist_ok=True)
        blob = write_layer(_tree(self.root, slot.name.split("-", 1)[1], 240_000), out,
                           prefix=VENV, level=1)
        return StagedSlice(path=out, blob=blob, seconds=time.monotonic() - start, log="staged")

    def compose(self, registry: Registry, labels: Sequence[str]) -> Composed:
        self.staged = []
        return compose_env(registry, base=self.base, wanted=self.slots(labels), stage=self.stage)


def _push_env_base(client: RegistryClient, server: RegistryServer, root: Path,
                   repository: str = CACHE_REPO) -> BaseDocuments:
    """env-base: one layer and a config, pushed straight to the registry (no faults)."""
    ref = parse_reference(f"{server.host}/{repository}:env-base", bare=False)
    tree = root / "env-base"
    (tree / "bin").mkdir(parents=True, exist_ok=True)
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


def _port(local: Local) -> int:
    assert local.server is not None
    return local.server.port
_COMPOSED_TAG = re.compile(r"env-[0-9a-f]{32}")


def _composed_tags(held: dict[str, list[str]]) -> list[str]:
    return [tag for tags in held.values() for tag in tags if _COMPOSED_TAG.fullmatch(tag)]


def _composed_complete(local: Local, ca: LocalCA, adapter: Adapter, digest: str,
                       labels: Sequence[str]) -> None:
    """The composed image is env-base's layer, then each slice's blob in order, all held."""
    assert local.server is not None
    with _http(local.server, ca) as http:
        manifest = _manifest(http, adapter.composed_repo, digest)
        assert manifest is not None
        assert not _missing_blobs(http, adapter.composed_repo, manifest)
        records = [_manifest(http, CACHE_REPO, _slice_tag(label)) for label in labels]
    assert all(records)
    assert [d["digest"] for d in manifest["layers"]] == [
        local.base.manifest["layers"][0]["digest"],
        *(r["layers"][0]["digest"] for r in records if r is not None)]


def _reason(info: pytest.ExceptionInfo[BaseException]) -> str:
    """What the run said when it stopped: the first failed slice's own reason."""
    error = info.value
    if isinstance(error, SliceFailures):
        error = next(iter(error.failures.values()))
    return f"{getattr(error, 'message', error)} {getattr(error, 'hint', '')}"


_WAIT = re.compile(r"retry \d+/\d+ in (\d+\.\d)s")

# --- the cases, each run against both registries ----------------------------------------------


@pytest.mark.parametrize(("case", "rates"), [
    ("5xx on uploads and manifest PUTs", Rates(seed=1, upload_5xx=0.3, manifest_put_5xx=0.4)),
    ("reset mid-body", Rates(seed=2, reset_mid_body=0.5)),
    ("all three at once", Rates(seed=4, upload_5xx=0.2, manifest_put_5xx=0.2,
                                reset_mid_body=0.3)),
])
def test_a_composition_completes_through_fault_rates(case: str, rates: Rates, adapter: Adapter,
                                                     local: Local, ca: LocalCA) -> None:
    """Seeded faults on every upload and manifest PUT: each is retried (one line each; with
    crane, those crane does not retry itself), the composition completes, and every manifest
    the registry holds names blobs it holds; a rerun reuses every slice."""
    lines: list[str] = []
    with FaultProxy(_port(local), tls=ca,
                    rates=adapter.rates(rates)) as proxy, \
            adapter.open(proxy.host, local.root / "scratch", lines) as registry:
        composed = local.compose(registry, LABELS)
        injected = sum(proxy.injected.values())
        assert injected >= 3, proxy.injected  # the seed does put faults on this run
        assert len(lines) == injected if adapter.crane is None else len(lines) <= injected, lines
        assert all(line.lstrip().startswith("retry ") for line in lines)
        assert [o.state for o in composed.slices] == ["written"] * len(LABELS)
        _composed_complete(local, ca, adapter, composed.digest, LABELS)
        again = local.compose(registry, LABELS)
    assert again.digest == composed.digest and all(o.state == "cached" for o in again.slices)
    assert local.staged == [] and local.server is not None
    _sound(local.server, ca)
    _outcome(case, adapter.path, "complete", f"{len(lines)} ({dict(proxy.injected)})",
             f"{len(LABELS)}/{len(LABELS)} reused")


@pytest.mark.parametrize("form", ["seconds", "HTTP date"])
def test_a_429_waits_for_its_retry_after(form: str, adapter: Adapter, local: Local,
                                         ca: LocalCA) -> None:
    """429s with Retry-After (2 s, or an HTTP date 3 s ahead) on the records' manifests:
    every retry waits what the registry asked (crane alone retries no 429 on a read and reads
    no Retry-After), its line says so, and no request is sent again sooner."""
    def after() -> str:
        return email.utils.format_datetime(
            datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3), usegmt=True)

    lines: list[str] = []
    with FaultProxy(_port(local), tls=ca) as proxy, \
            adapter.open(proxy.host, local.root / "scratch", lines) as registry:
        proxy.inject(Fault(path="/manifests/slice-", kind="429", times=4,
                           retry_after="2" if form == "seconds" else after))
        composed = local.compose(registry, LABELS[:2])
    assert lines and all("Retry-After" in line for line in lines), lines
    assert all(float(m[1]) >= 1.9 for m in map(_WAIT.search, lines) if m), lines
    assert len([m for m in map(_WAIT.search, lines) if m]) == len(lines)
    log = proxy.log
    gaps = [later[0] - when for n, (when, method, path, what) in enumerate(log) if what == "429"
            if (later := [t for t, m, p, _ in log[n + 1:] if (m, p) == (method, path)])]
    assert gaps and min(gaps) >= 1.9, gaps
    _composed_complete(local, ca, adapter, composed.digest, LABELS[:2])
    _outcome(f"429 with Retry-After as {form}", adapter.path,
             "complete, each retry after >= 2 s", len(lines))


def test_uploads_that_always_fail_name_the_request_and_the_answer(adapter: Adapter, local: Local,
                                                                  ca: LocalCA) -> None:
    """Every upload answered 503: the run stops after `registry.retries` retries with one error
    naming the request and the registry's answer (never the token); nothing under the
    composed tag; the rerun, the registry answering again, writes and composes everything."""
    lines: list[str] = []
    with FaultProxy(_port(local), tls=ca) as proxy, \
            adapter.open(proxy.host, local.root / "scratch", lines, retries=2,
                         max_wait=1) as registry:
        proxy.inject(Fault(path="/blobs/uploads/", kind="503", times=100_000))
        with pytest.raises(SliceFailures) as info:
            local.compose(registry, LABELS[:2])
        reason = _reason(info)
        assert "POST " in reason and f"/v2/{CACHE_REPO}/blobs/uploads/" in reason, reason
        assert "UNKNOWN" in reason and "after 3 attempts" in reason, reason
        assert CANARY not in reason + "".join(lines)
        assert base64.b64encode(f"{USER}:{CANARY}".encode()).decode() not in reason + "".join(lines)
        assert local.server is not None
        held = _sound(local.server, ca)
        assert _composed_tags(held) == [] and held[CACHE_REPO] == ["env-base"]
        proxy.faults.clear()
        composed = local.compose(registry, LABELS[:2])
    assert all(o.state == "written" for o in composed.slices)
    _composed_complete(local, ca, adapter, composed.digest, LABELS[:2])
    _outcome("every upload 503 (retries 2)", adapter.path,
             "fails naming request, UNKNOWN; no tag", len(lines), "rerun writes 2/2")


def test_a_record_whose_blob_was_removed_is_written_again(adapter: Adapter, local: Local,
                                                          ca: LocalCA) -> None:
    """A slice record whose layer blob was deleted from the registry's storage (its tag left):
    the next composition does not trust it, writes that slice again (its blob uploaded, even
    by crane, which pushes nothing under a tag naming the same manifest) and reuses the rest;
    the composed image's blobs are all there."""
    assert local.server is not None
    with adapter.open(local.server.host, local.root / "scratch") as registry:
        first = local.compose(registry, LABELS)
        lost = first.slices[1]
        local.server.remove_blob(lost.blob.digest)
        second = local.compose(registry, LABELS)
    assert [(o.name, o.state, o.rewritten) for o in second.slices] == \
        [(o.name, "written" if o.name == lost.name else "cached", o.name == lost.name)
         for o in first.slices]
    assert local.staged == [lost.name]
    _composed_complete(local, ca, adapter, second.digest, LABELS)
    _sound(local.server, ca)
    _outcome("record whose blob was removed", adapter.path, "slice rewritten, complete", 0,
             f"{len(LABELS) - 1}/{len(LABELS)} reused, 1 rewritten")


@pytest.mark.parametrize("step", ["a slice's record", "the composition"])
def test_a_run_stopped_at_a_step_leaves_complete_records_and_the_rerun_reuses_them(
        step: str, adapter: Adapter, local: Local, ca: LocalCA) -> None:
    """The registry refuses one step for good (its manifest PUT answered 500 until the run
    gives up): the run fails; every tag the registry holds is complete and the composed tag is
    absent; the rerun reuses exactly the slices whose records were written, writes the rest."""
    assert local.server is not None
    path = f"/manifests/{_slice_tag(LABELS[2])}" if step == "a slice's record" \
        else f"/v2/{adapter.composed_repo}/manifests/env-"
    with FaultProxy(local.server.port, tls=ca) as proxy, \
            adapter.open(proxy.host, local.root / "scratch", retries=1, max_wait=1) as registry:
        proxy.inject(Fault(path=path, kind="500", times=1000, method="PUT"))
        with pytest.raises((ComposeError, RegistryError)):
            local.compose(registry, LABELS)
        held = _sound(local.server, ca)
        assert _composed_tags(held) == []
        written = {t for t in held[CACHE_REPO] if t.startswith("slice-")}
        assert _slice_tag(LABELS[2]) not in written or step != "a slice's record"
        proxy.faults.clear()
        composed = local.compose(registry, LABELS)
    reused = [o.name for o in composed.slices if o.state == "cached"]
    assert sorted(reused) == sorted(f"{n + 1:02d}-{label}" for n, label in enumerate(LABELS)
                                    if _slice_tag(label) in written)
    if step == "the composition":
        assert len(reused) == len(LABELS)
    _composed_complete(local, ca, adapter, composed.digest, LABELS)
    _outcome(f"stopped at {step}", adapter.path, "fails; no composed tag; records complete",
             len([e for e in proxy.log if e[3] == "500"]) - 1,
             f"{len(reused)}/{len(LABELS)} reused")


# The composition in a process of its own, to be killed: the helpers above, over a base read
# from a file (argv: registry host, work directory, env-base's documents, crane or "").
_CHILD = """
import json, sys
from pathlib import Path
from gpurl_tasks.writer.orchestration import BaseDocuments
from tests.test_registry_faults import LABELS, Local, open_registry
host, root, docs, crane = sys.argv[1:5]
docs = json.loads(Path(docs).read_text())
local = Local(server=None, root=Path(root),
              base=BaseDocuments(manifest=docs["manifest"], config=docs["config"]))
with open_registry(host, crane=Path(crane) if crane else None, scratch=Path(root)) as registry:
    local.compose(registry, LABELS)
"""


@pytest.mark.parametrize("step", ["a slice", "the composition"])
def test_a_run_killed_at_a_step_leaves_complete_records_and_the_rerun_reuses_them(
        step: str, adapter: Adapter, local: Local, ca: LocalCA, tmp_path: Path) -> None:
    """The composing process group SIGKILLed (crane with it, as a node stops the job) as the
    proxy sees the step begin (the second slice record's manifest PUT; the first request
    after the last record's): every tag the registry holds is complete, the composed tag is
    absent, and the rerun reuses exactly the slices whose records were written (all of them
    when it was killed composing)."""
    assert local.server is not None
    docs = tmp_path / "env-base.json"
    docs.write_text(json.dumps({"manifest": dict(local.base.manifest),
                                "config": dict(local.base.config)}))
    child_root = tmp_path / "child"
    child_root.mkdir()
    with FaultProxy(local.server.port, tls=ca) as proxy:
        if adapter.crane is not None:
            _login(proxy.host)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, proxy.host,
             str(child_root), str(docs), str(adapter.crane or "")], cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def begun() -> bool:
            puts = [n for n, e in enumerate(proxy.log)
                    if e[1] == "PUT" and "/manifests/slice-" in e[2]]
            if step == "a slice":
                return len(puts) >= 2
            return len(puts) >= len(LABELS) and len(proxy.log) > puts[-1] + 1

        deadline = time.monotonic() + 120
        while not begun() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
        assert child.returncode == -9, stderr.decode()[-2000:]
        held = _sound(local.server, ca, settle=1.0)  # a request in flight still lands
        assert _composed_tags(held) == []
        written = {t for t in held[CACHE_REPO] if t.startswith("slice-")}
        if step == "the composition":
            assert written == {_slice_tag(label) for label in LABELS}
        with adapter.open(proxy.host, local.root / "scratch") as registry:
            composed = local.compose(registry, LABELS)
    reused = {_slice_tag(o.name.split("-", 1)[1]) for o in composed.slices if o.state == "cached"}
    assert reused == written
    _composed_complete(local, ca, adapter, composed.digest, LABELS)
    _sound(local.server, ca)
    _outcome(f"killed (SIGKILL) at {step}", adapter.path, "no composed tag; records complete", 0,
             f"{len(reused)}/{len(LABELS)} reused")


def test_two_compositions_at_once_on_one_cache_both_complete(adapter: Adapter, local: Local,
                                                             ca: LocalCA) -> None:
    """Two commits composed at once on one cache repository, through faults: they share two
    slices (the same key gives the same bytes, so the records' writes are idempotent) and each
    gets its own complete image of its own slices.

    The proxy caps a run of faults per request key (`Rates.streak`), and the two threads' upload
    POSTs share one key: the pass that ends a run can go to the other thread, so one client may
    meet more faults in a row than the cap. Each client gets retries enough for that."""
    first_labels, second_labels = LABELS, ("torch", "cuda", "scipy", "tail")
    results: dict[str, Composed] = {}
    errors: list[BaseException] = []
    rates = adapter.rates(Rates(seed=6, upload_5xx=0.2, manifest_put_5xx=0.2))
    assert local.server is not None
    with FaultProxy(local.server.port, tls=ca, rates=rates) as proxy:
        def run(name: str, labels: Sequence[str]) -> None:
            mine = Local(server=local.server, root=local.root / name, base=local.base)
            mine.root.mkdir()
            try:
                with adapter.open(proxy.host, mine.root / "scratch", retries=9) as registry:
                    results[name] = mine.compose(registry, labels)
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=run, args=("a", first_labels)),
                   threading.Thread(target=run, args=("b", second_labels))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert results["a"].digest != results["b"].digest
    _composed_complete(local, ca, adapter, results["a"].digest, first_labels)
    _composed_complete(local, ca, adapter, results["b"].digest, second_labels)
    _sound(local.server, ca)
    _outcome("two compositions at once", adapter.path, "both complete, own slices",
             sum(proxy.injected.values()), "shared slices: same blobs")


def test_both_registries_push_the_same_bytes(local: Local, ca: LocalCA, crane: Path,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """The same inputs composed through gpurl's client and through crane, each in a cache
    repository of its own: every slice record and the composed manifest and config are the
    same digests (the bytes pushed do not depend on the path)."""
    assert local.server is not None
    other = f"{CACHE_REPO}-crane"
    with _client(local.server.host) as client:
        assert _push_env_base(client, local.server, tmp_path / "other", other) == local.base
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    with open_registry(local.server.host, crane=None, scratch=tmp_path / "a") as registry:
        by_client = local.compose(registry, LABELS)
    with open_registry(local.server.host, crane=crane, scratch=tmp_path / "b",
                       cache_repo=other) as registry:
        by_crane = local.compose(registry, LABELS)
    assert by_crane.digest == by_client.digest and by_crane.tag == by_client.tag
    assert by_crane.reference == f"{local.server.host}/{other}@{by_client.digest}"
    with _http(local.server, ca) as http:
        def digests(repo: str) -> list[str | None]:
            return [http.head(f"/v2/{repo}/manifests/{_slice_tag(label)}",
                              headers={"Accept": OCI}).headers.get("Docker-Content-Digest")
                    for label in LABELS]
        assert digests(CACHE_REPO) == digests(other)
        assert all(digests(other))
        image = _manifest(http, IMAGE_REPO, by_client.digest)
        assert image is not None and image == _manifest(http, other, by_crane.digest)


def test_the_outcome_table_in_the_docs_is_what_these_cases_give() -> None:
    """docs/build.md's table has one row per case above, its case, path and outcome as this
    run's (run last; UPDATE_DOCS=1 writes this run's rows, numbers included)."""
    expected = 24  # the 12 cases above against both registries, one row each
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


@pytest.mark.parametrize("matcher", ["grep -E (the job's bash wrapper)", "re (writer/crane.py)"])
@pytest.mark.parametrize(("line", "retried"), _ANSWERS)
def test_the_job_retries_exactly_the_answers_worth_sending_again(line: str, retried: bool,
                                                                 matcher: str) -> None:
    """The one pattern, through the real `grep -E` the job's bash wrapper runs and the `re`
    the composition's crane calls use: a registry's transient code is retried wherever crane
    puts it; a final *_UNKNOWN, a 404 or a denial never is."""
    if matcher.startswith("grep"):
        done = subprocess.run(["grep", "-qE", RETRIED_ANSWERS], input=line, text=True,
                              check=False)
        assert (done.returncode == 0) is retried, line
    else:
        assert (re.search(RETRIED_ANSWERS, crane_answer(line)) is not None) is retried, line


def test_crane_says_its_answer_and_retry_after_without_the_credentials() -> None:
    """crane -v's stderr (request and response dumps, then its error): the answer is its
    Error: line with the upload state and any credential redacted; Retry-After is the last
    response's, in either form."""
    token = base64.b64encode(f"{USER}:{CANARY}".encode()).decode()
    said = (f"2026/12/03 GET /v2/x/manifests/t HTTP/1.1\r\nAuthorization: Basic {token}\r\n"
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n\r\n"
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: Wed, 02 Dec 2026 06:17:02 GMT\r\n"
            "Error: PUT https://r/v2/x/blobs/uploads/1?_state=s3cr3t&digest=sha256:1: "
            f"UNKNOWN: Bearer {CANARY}\n")
    answer = crane_answer(said)
    assert answer == ("Error: PUT https://r/v2/x/blobs/uploads/1?_state=REDACTED&digest=sha256:1"
                      ": UNKNOWN: Bearer <redacted>")
    assert retry_after_of(said) == "Wed, 02 Dec 2026 06:17:02 GMT"
    assert retry_after_of("Retry-After: 7\r\n") == "7"
    assert retry_after_of("Error: x") is None


# --- the job's compose-env, whole: real uv, real crane, the tool the job runs ------------------

@dataclasses.dataclass(frozen=True)
class JobRig:
    """A context, work directory, venv and the job's zipapp, logged in to the registry."""

    context: Path
    work: Path
    venv: Path
    run: Callable[..., subprocess.CompletedProcess[str]]  # compose-env with extra words


def _job_rig(local: Local, crane: Path, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> JobRig:
    assert local.server is not None
    context, work = tmp_path / "context", tmp_path / "work"
    (context / "slices").mkdir(parents=True)
    work.mkdir()
    shutil.copy(crane, work / "crane")
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    _login(local.server.host)
    host = local.server.host
    env_base = f"{host}/{CACHE_REPO}@sha256:" + hashlib.sha256(
        canonical_json(local.base.manifest)).hexdigest()
    app = tmp_path / "job.pyz"
    app.write_bytes(job_app().data)

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-B", str(app), "compose-env",
             "--cache-repo", f"{host}/{CACHE_REPO}", "--env-base", env_base,
             "--work", str(work), "--context", str(context),
             "--slice-index", str(context / "slices.index"), "--venv", str(venv),
             "--level", "1", "--retries", "2", "--retry-max-wait", "1", *extra],
            capture_output=True, text=True, timeout=120, check=False)

    return JobRig(context=context, work=work, venv=venv, run=run)


def _write_index(rig: JobRig, tmp_path: Path, slices: Sequence[tuple[str, str]]) -> None:
    """The slice index of one pure wheel per (name, build column) slice."""
    index = []
    for n, (name, build) in enumerate(slices):
        slice_file = rig.context / "slices" / f"{n + 1:02d}-{name}.txt"
        slice_file.write_text(f"{pure_wheel(tmp_path, name)}\n")
        index.append(IndexLine(name=f"{n + 1:02d}-{name}", label=name,
                               file=f"slices/{slice_file.name}",
                               created_by=written_history(f"/tmp/gpurl-layers/{slice_file.name}",
                                                          str(rig.venv), hashed=False),
                               build=build).to_line() + "\n")
    (rig.context / "slices.index").write_text("".join(index))


def test_the_jobs_compose_env_stages_with_uv_and_says_each_step(
        local: Local, ca: LocalCA, crane: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer tool the job runs (the job's zipapp `compose-env`, as compose-env.sh
    calls it): real uv installs each slice (a wheel made here; the second staged on the
    first, as the lock's build settings ask) into a scratch tree, the writer writes it, real
    crane records it and pushes the composed image; the log is the job's, one line per step,
    without the token; a second run finds every slice cached and composes the same image.
    Real uv and crane and a registry are the parts under test (about 3 s)."""
    assert local.server is not None
    rig = _job_rig(local, crane, tmp_path, monkeypatch)
    work = rig.work
    _write_index(rig, tmp_path, (("alpha", ""), ("beta", "lower")))
    first = rig.run()
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    written = sorted(line for line in lines if line.startswith("    "))
    assert [line.split(": written ")[0] for line in written] == ["    01-alpha", "    02-beta"]
    blobs = [json.loads(line.split(": written ")[1]) for line in written]
    assert all(set(b) == {"digest", "diff_id", "size"} for b in blobs)
    reference = (work / "env-image").read_text().strip()
    assert reference.startswith(f"{local.server.host}/{CACHE_REPO}@sha256:")
    assert lines[-1] == (f"==> environment {reference} (2 slice(s) written, 0 of them as their "
                         "record's blob was gone; 0 cached)")
    assert (work / "env-args").read_text() == f"ENV_SOURCE={reference}\n"  # no compiled layer
    second = rig.run()
    assert second.returncode == 0, second.stderr
    cached = second.stdout.splitlines()
    assert [re.sub(r"slice-(alpha|beta)-[0-9a-f]{32}", r"slice-\1-KEY", line)
            for line in cached] == [
        "    01-alpha: cached (slice-alpha-KEY)", "    02-beta: cached (slice-beta-KEY)",
        f"==> environment {reference} (0 slice(s) written, 0 of them as their record's blob "
        "was gone; 2 cached)"]
    token = base64.b64encode(f"{USER}:{CANARY}".encode()).decode()
    assert not any(s in first.stdout + first.stderr + second.stdout + second.stderr
                   for s in (CANARY, token))
    with _http(local.server, ca) as http:
        image = _manifest(http, CACHE_REPO, reference.rpartition("@")[2])
    assert image is not None and [d["digest"] for d in image["layers"]][1:] == \
        [b["digest"] for b in blobs]
    assert not (work / "slices").exists()


def _layer_files(http: httpx.Client, digest: str) -> dict[str, bytes | None]:
    """A cache-repository layer's entries: a file's bytes, None for anything else."""
    answer = http.get(f"/v2/{CACHE_REPO}/blobs/{digest}", follow_redirects=True)
    assert answer.status_code == 200, answer.status_code
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
                for m in tar.getmembers()}


def test_compose_env_writes_the_prebuilt_compiled_wheels_as_a_layer_a_bump_leaves_as_it_was(
        local: Local, ca: LocalCA, crane: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's compose-env with the prebuilt wheels `start admit` fetched: real uv installs
    them into the venv's place, the layer holds the installed files and the MANIFEST where the
    image keeps it (never a wheel file, never uv's lock), its history entry names its record
    and no slice, and the final build is told to build rl FROM env. A lock bump (a slice file
    changed) writes that slice and takes the compiled layer from its record, the same blob;
    a rebuilt wheel (another MANIFEST) writes the layer again. Real uv, crane and registry."""
    assert local.server is not None
    rig = _job_rig(local, crane, tmp_path, monkeypatch)
    _write_index(rig, tmp_path, (("alpha", ""),))
    wheelhouse = rig.context / "wheelhouse"
    wheelhouse.mkdir()
    wheel = pure_wheel(wheelhouse, "kernels")

    def manifest(abi: str) -> bytes:
        text = (f"# gpurl-abi {abi}\n"
                f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}  {wheel.name}\n")
        (wheelhouse / "MANIFEST").write_text(text)
        return text.encode()

    def compose() -> tuple[list[str], dict[str, Any], str]:
        done = rig.run("--prebuilt-wheelhouse", str(wheelhouse), "--compiled-wheel", wheel.name)
        assert done.returncode == 0, done.stderr
        reference = (rig.work / "env-image").read_text().strip()
        with _http(local.server, ca) as http:  # type: ignore[arg-type]
            image = _manifest(http, CACHE_REPO, reference.rpartition("@")[2])
        assert image is not None
        return done.stdout.splitlines(), image, reference

    recorded = manifest("cuda=cu128")
    lines, image, reference = compose()
    assert (rig.work / "env-args").read_text() == \
        f"ENV_SOURCE={reference}\nCOMPILED_SOURCE=env\n"
    assert lines[-1].endswith("0 cached; the compiled wheels' layer written)"), lines
    compiled = image["layers"][-1]["digest"]
    with _http(local.server, ca) as http:
        files = _layer_files(http, compiled)
        config = http.get(f"/v2/{CACHE_REPO}/blobs/{image['config']['digest']}").json()
    venv = str(rig.venv).lstrip("/")
    site = [n for n in files if n.endswith("/site-packages/kernels/__init__.py")]
    assert len(site) == 1 and site[0].startswith(f"{venv}/lib/"), sorted(files)
    assert files["etc/gpurl/provenance/wheels.MANIFEST"] == recorded
    assert not [n for n in files if n.endswith((".whl", "/.lock"))], sorted(files)
    entry = config["history"][-1]["created_by"]
    assert slice_of(entry) is None and (record_of(entry) or "").startswith(
        "slice-compiled-wheels-"), entry

    (tmp_path / "bumped").mkdir()
    (rig.context / "slices" / "01-alpha.txt").write_text(
        f"{pure_wheel(tmp_path / 'bumped', 'alpha_two')}\n")  # another package
    lines, bumped, _ = compose()
    assert any(line.startswith("    01-alpha: written ") for line in lines), lines
    assert lines[-1].endswith("0 cached; the compiled wheels' layer cached)"), lines
    assert bumped["layers"][-1]["digest"] == compiled
    assert bumped["layers"][-2]["digest"] != image["layers"][-2]["digest"]

    manifest("cuda=cu129")
    lines, rebuilt, _ = compose()
    assert lines[-1].endswith("1 cached; the compiled wheels' layer written)"), lines
    assert rebuilt["layers"][-1]["digest"] != compiled
    assert rebuilt["layers"][-2]["digest"] == bumped["layers"][-2]["digest"]
