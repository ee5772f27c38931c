"""zstd against gzip for a composed environment's layers on a cold pull (`nox -s
bench-compression`, never in CI).

A composed environment image from the loopback registry (`--image`, by default its largest
`env-*` tag) is taken apart layer by layer: each blob is fetched, decompressed to the layer's
tar (checked against the config's diff_id) and compressed again from that same tar in each
format: gzip by gpurl's own writer (writer/blob.py's zlib stream at `layers.slice-gzip-level`,
so the slices gpurl wrote come out byte for byte), zstd by the zstd CLI at each `--levels`.
Each format becomes one image with OCI media types (Docker's schema2 has no zstd layer type)
and the source's config (the same tars, so the same diff_ids in every format), pushed to a
repository of its own on the same registry.

Measured per format: total bytes; compress and decompress CPU seconds on one thread (user +
system; decompression is what a node spends); the cold pull on containerd (the cluster's
runtime) of a fresh, empty engine (tests/support/pull_engine.py) with `ctr images pull`, fetch
and unpack timed apart, with the CPU seconds the node spent on it (ctr's and containerd's, which
the disk and the other work on the machine disturb less than wall time), median of `--repeat`,
each on a new content store. Ratios are against
gzip in the same run. Before the pulls, probes on two small layers record what takes zstd at
all: the registry, containerd, Docker's `docker pull` and its BuildKit `FROM` (gpurl's local
final build), each under an OCI and a Docker schema2 manifest.

The zstd frames keep their content checksum (the CLI's default, `--no-check` off): gzip's
CRC-32 is always there, the other writers (BuildKit, containerd, go-containerregistry) keep
it, and so the decompress figure is the one a node really pays.

Results: printed, and benchmarks/out/compression.json (per layer, per pull). The pushed
repositories are `<image's host>/gpurl/bench-compression/<run>-<format>`, kept.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

from gpurl_tasks.config import LayerSettings
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import sha256_of, write_atomic
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.image import Descriptor, PulledImage, parse_diff_ids
from gpurl_tasks.values import format_bytes
from gpurl_tasks.writer.blob import GzipSink
from gpurl_tasks.writer.composition import Composition, image_of
from gpurl_tasks.writer.ocispec import DOCKER_MANIFEST, OCI_MANIFEST
from gpurl_tasks.writer.records import MEDIA_TYPES, platform_of, slice_of

__all__ = ["OUT", "ZSTD_LAYER", "BenchError", "Format", "chain_id", "formats", "image_documents",
           "main", "measure", "probe_layers", "render", "summarize", "written_layers"]

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "benchmarks" / "out" / "compression.json"
HOST = "127.0.0.1:5005"
BENCH_REPO = "gpurl/bench-compression"
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
# No spec defines a Docker zstd layer type; the probe shows what a tool makes of this one.
UNDEFINED_DOCKER_ZSTD = "application/vnd.docker.image.rootfs.diff.tar.zstd"
GZIP_LAYERS = (MEDIA_TYPES[DOCKER_MANIFEST][1], MEDIA_TYPES[OCI_MANIFEST][1])
# What a probe asks, in the order it asks (a JSON file sorts them)
_STEPS = ("registry:", "containerd pull+unpack:", "Docker BuildKit FROM:", "docker pull:")
_REGISTRY, _CONTAINERD, _BUILDKIT, _DOCKER_PULL = _STEPS
_CHUNK = 1 << 20
_BIG = 256 * 2**20  # a layer whose tar is larger gets a progress line per format


class BenchError(Exception):
    """The benchmark cannot run as asked (one line, for the user)."""


@dataclasses.dataclass(frozen=True)
class Format:
    """One way of compressing every layer: gzip (gpurl's writer) or zstd (the CLI)."""

    kind: Literal["gzip", "zstd"]
    level: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.level}"

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[OCI_MANIFEST][1] if self.kind == "gzip" else ZSTD_LAYER


def formats(zstd_levels: Sequence[int], gzip_level: int) -> tuple[Format, ...]:
    """gzip at `gzip_level` (the baseline, first), then zstd at each level, in order."""
    if not 1 <= gzip_level <= 9:
        raise BenchError(f"gzip level {gzip_level} is not 1 to 9")
    bad = [n for n in zstd_levels if not 1 <= n <= 22]
    if bad or not zstd_levels:
        raise BenchError(f"zstd levels must be 1 to 22, at least one (got {list(zstd_levels)})")
    return (Format("gzip", gzip_level), *(Format("zstd", n) for n in dict.fromkeys(zstd_levels)))


# --- the images (pure) -----------------------------------------------------------------------


def image_documents(config: Mapping[str, Any], layers: Sequence[Descriptor], *,
                    manifest_type: str = OCI_MANIFEST) -> Composition:
    """The image of `layers` (one per diff_id of `config`, in order) under `manifest_type`,
    with `config` as it is, typed as that manifest's config: a layer's diff_id names its tar,
    so every compression of the same tars shares one config."""
    if manifest_type not in MEDIA_TYPES:
        raise BenchError(f"{manifest_type} is not a Docker or OCI image manifest")
    diff_ids = parse_diff_ids(config, "image config")
    if len(diff_ids) != len(layers):
        raise BenchError(f"the config names {len(diff_ids)} layers, the image has {len(layers)}")
    return image_of([d.to_json() for d in layers], config, media_type=manifest_type,
                    config_type=MEDIA_TYPES[manifest_type][0])


def chain_id(diff_ids: Sequence[str]) -> str:
    """The snapshot a runtime unpacks the top layer into: the OCI image spec's ChainID."""
    if not diff_ids:
        raise BenchError("an image without layers has no chain id")
    chain = diff_ids[0]
    for diff_id in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {diff_id}".encode()).hexdigest()
    return chain


def probe_layers(tar_sizes: Sequence[int], floor: int = 64 * 1024) -> tuple[int, int]:
    """Two small layers for the support probes (their indexes): the smallest tars of at least
    `floor` bytes (files to unpack, cheap to pull), the smaller first; one layer serves twice."""
    order = sorted(range(len(tar_sizes)), key=lambda i: (tar_sizes[i] < floor, tar_sizes[i], i))
    if not order:
        raise BenchError("the image has no layers")
    return order[0], order[1] if len(order) > 1 else order[0]


def written_layers(created_by: Sequence[str], layers: int) -> list[bool]:
    """Per layer: whether gpurl's writer (this version) wrote it, from the history entries
    that made a layer (`created_by`, in order); all False when they do not line up."""
    if len(created_by) != layers:
        return [False] * layers
    return [bool((entry := slice_of(text)) and entry.written) for text in created_by]


def summarize(layers: Sequence[Mapping[str, Any]], pulls: Sequence[Mapping[str, Any]],
              names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per format (`names[0]` is the baseline): totals over the layers, medians over
    its pulls, and every figure's ratio to the baseline's."""
    rows = []
    for name in names:
        row: dict[str, Any] = {
            "format": name,
            "bytes": sum(layer["formats"][name]["bytes"] for layer in layers),
            "compress_s": sum(layer["formats"][name]["compress_s"] for layer in layers),
            "decompress_s": sum(layer["formats"][name]["decompress_s"] for layer in layers),
        }
        mine = [p for p in pulls if p["format"] == name and p.get("error") is None]
        for key in ("fetch_s", "unpack_s", "total_s", "cpu_s", "cpu_user_s"):
            row[f"pull_{key}"] = statistics.median(p[key] for p in mine) if mine else None
        row["pulls"] = len(mine)
        rows.append(row)
    base = rows[0]
    for row in rows:
        for key in ("bytes", "compress_s", "decompress_s", "pull_fetch_s", "pull_unpack_s",
                    "pull_total_s", "pull_cpu_s", "pull_cpu_user_s"):
            ours, theirs = row[key], base[key]
            row[f"{key}_ratio"] = (ours / theirs) if ours is not None and theirs else None
    return rows


def _cell(value: float | None, ratio: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + (f" ({ratio:.2f})" if ratio is not None else "")


def _load_range(phase: str, rows: Sequence[Mapping[str, Any]]) -> str:
    loads = [r["load"] for r in rows if "load" in r]
    return f"; {phase} {min(loads):.1f} to {max(loads):.1f}" if loads else ""


def render(result: Mapping[str, Any]) -> str:
    """The run as text: the image, the tools, the probes, then one row per format."""
    image = result["image"]
    lines = [f"image: {image['reference']} ({image['layers']} layers, "
             f"{format_bytes(image['bytes'])} as pushed, {format_bytes(image['tar_bytes'])} of tar)",
             "tools: " + "; ".join(f"{k} {v}" for k, v in sorted(result["tools"].items())),
             f"machine: {result['machine']['cpus']} CPUs; load average "
             + ", ".join(f"{s['phase']} {s['load']:.2f}" for s in result["machine"]["load"])
             + _load_range("compressing", result["layers"]) + _load_range("pulling", result["pulls"]),
             "", "support (probes on two small layers, each on a fresh engine):"]
    for probe in result["probes"]:
        steps = sorted(probe["outcome"].items(), key=lambda item: _STEPS.index(item[0]))
        lines.append(f"- {probe['case']}: " + "; ".join(f"{what} {said}" for what, said in steps))
    lines += ["", f"{result['rows'][0]['format']} reproduces {result['gzip_reproduced']} of the "
              f"{image['written']} layers gpurl wrote byte for byte (the other "
              f"{image['layers'] - image['written']} are another writer's gzip)", "",
              "ratios against " + result["rows"][0]["format"] + " in brackets; compress and "
              "decompress: CPU seconds on one thread; pulls: containerd `ctr images pull`, "
              f"median of {result['repeat']}, wall seconds and the node's CPU seconds (ctr + "
              "containerd; user: without the kernel's share)", ""]
    header = ("format", "bytes", "compress s", "decompress s", "pull fetch s", "pull unpack s",
              "pull total s", "pull CPU s", "of it user s")
    table = [header]
    for row in result["rows"]:
        table.append((row["format"],
                      f"{format_bytes(row['bytes'])} ({row['bytes_ratio']:.3f})",
                      _cell(row["compress_s"], row["compress_s_ratio"]),
                      _cell(row["decompress_s"], row["decompress_s_ratio"]),
                      _cell(row["pull_fetch_s"], row["pull_fetch_s_ratio"]),
                      _cell(row["pull_unpack_s"], row["pull_unpack_s_ratio"]),
                      _cell(row["pull_total_s"], row["pull_total_s_ratio"]),
                      _cell(row["pull_cpu_s"], row["pull_cpu_s_ratio"]),
                      _cell(row["pull_cpu_user_s"], row["pull_cpu_user_s_ratio"])))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                        enumerate(zip(r, widths, strict=True))) for r in table]
    failed = [p for p in result["pulls"] if p.get("error")]
    lines += [f"pull of {p['format']} failed: {p['error']}" for p in failed]
    if result.get("note"):  # the run's conditions, recorded with its figures
        lines += ["", str(result["note"])]
    return "\n".join(lines)


# --- compressing and timing (the zstd CLI, zlib in this process) ------------------------------


def _cpu_of(argv: Sequence[str], stdout: IO[bytes] | int) -> float:
    """Run `argv` to its end; its CPU seconds (user + system, from the kernel's rusage)."""
    with subprocess.Popen(list(argv), stdout=stdout, stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        errors = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if process.returncode != 0:
        raise BenchError(f"{' '.join(argv)} failed: {errors.decode(errors='replace').strip()}")
    return usage.ru_utime + usage.ru_stime


def _inflate(blob: Path, out: IO[bytes] | None = None) -> str | None:
    """Decompress a gzip blob (zlib, one thread); with `out`, write the tar there and return
    its sha256 (not when timing)."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    digest = hashlib.sha256() if out is not None else None
    with blob.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            data = inflate.decompress(chunk)
            if out is not None and digest is not None:
                digest.update(data)
                out.write(data)
    if not inflate.eof:
        raise BenchError(f"{blob.name} is a truncated gzip stream")
    return "sha256:" + digest.hexdigest() if digest is not None else None


def _compress(tar: Path, out: Path, fmt: Format) -> tuple[str, float]:
    """(digest, CPU seconds) of `tar` compressed into `out` in `fmt`, on one thread."""
    with out.open("wb") as handle:
        if fmt.kind == "gzip":
            start = time.thread_time()
            sink = GzipSink(handle, fmt.level)  # gpurl's writer: the same bytes it writes
            with tar.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    sink.write(chunk)
            blob = sink.finish()
            return blob.digest, time.thread_time() - start
        ultra = ["--ultra"] if fmt.level > 19 else []
        seconds = _cpu_of(["zstd", f"-{fmt.level}", *ultra, "--single-thread", "-q", "-c",
                           str(tar)], handle)
    return "sha256:" + sha256_of(out), seconds


def _decompress_seconds(blob: Path, fmt: Format) -> float:
    """CPU seconds to decompress `blob` on one thread, the output thrown away."""
    if fmt.kind == "gzip":
        start = time.thread_time()
        _inflate(blob)
        return time.thread_time() - start
    return _cpu_of(["zstd", "-d", "-q", "-c", str(blob)], subprocess.DEVNULL)


# --- the registry -------------------------------------------------------------------------------


def _fetch(http: Any, base_url: str, ref: ImageRef, layer: Descriptor, dest: Path) -> None:
    """Stream one blob to `dest`, checked against its digest."""
    digest = hashlib.sha256()
    with http.stream("GET", f"{base_url}/v2/{ref.repository}/blobs/{layer.digest}") as response:
        if response.status_code != 200:
            raise BenchError(f"{ref}: blob {layer.digest[:19]} answered {response.status_code}")
        with dest.open("wb") as out:
            for chunk in response.iter_bytes(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    if "sha256:" + digest.hexdigest() != layer.digest:
        raise BenchError(f"{ref}: blob {layer.digest[:19]} arrived with another digest")


def _push_image(client: Any, ref: ImageRef, composed: Composition) -> str | None:
    """Push the config and manifest (the layers are there); None, or the registry's refusal."""
    try:
        client.push_blob(ref, composed.config)
        client.put_manifest(ref, ref.reference, composed.manifest, composed.media_type)
    except GpurlError as exc:
        return exc.message
    return None


def _written(image: PulledImage) -> list[bool]:
    """Per layer of `image`: whether gpurl's writer (this version) wrote it."""
    return written_layers([h.created_by for h in image.history if not h.empty_layer],
                          len(image.layers))


def largest_environment(client: Any, host: str) -> str:
    """The composed environment (an `env-*` tag holding layers gpurl wrote) with the most
    bytes in `host`'s registry."""
    import httpx

    # one request through the client settles the scheme (HTTPS or plain) its base_url says
    client.has_manifest(parse_reference(f"{host}/{BENCH_REPO}:none", default_host=host))
    base = f"{client.base_url}/v2"
    repositories: list[str] = []
    page: str | None = f"{base}/_catalog?n=1000"  # distribution's largest page
    try:
        while page:
            response = httpx.get(page, timeout=30)
            repositories += response.json()["repositories"]
            page = response.links.get("next", {}).get("url")
            page = str(httpx.URL(base).join(page)) if page else None
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise BenchError(f"cannot list the repositories of {host}: {exc}") from None
    best: tuple[int, str] | None = None
    for repository in repositories:
        tags = httpx.get(f"{base}/{repository}/tags/list", timeout=30).json().get("tags") or []
        for tag in tags:
            if tag.startswith("env-") and not tag.startswith("env-base"):
                ref = f"{host}/{repository}:{tag}"
                image = client.pull(parse_reference(ref, default_host=host))
                if any(_written(image)):
                    best = max(best or (0, ref), (sum(d.size for d in image.layers), ref))
    if best is None:
        raise BenchError(f"{host} holds no composed environment (an env-* tag with layers "
                         "gpurl wrote); build one (invoke build) or pass --image")
    return best[1]


# --- the node: containerd and Docker of a fresh engine -------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Node:
    """A fresh pull engine: `ctr` for its containerd, that containerd's pid, its docker -H."""

    ctr: list[str]
    containerd: int
    host: str


def _containerd_of(root: Path) -> int:
    """The pid of the containerd the pull engine under `root` started."""
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if Path(os.fsdecode(argv[0])).name == "containerd" and \
                    any(os.fsencode(root) in arg for arg in argv[1:]):
                return int(proc.name)
    raise BenchError(f"the pull engine under {root} runs no containerd of its own")


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds process `pid` (all its threads) has spent so far."""
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


@contextlib.contextmanager
def _engine(client: str) -> Iterator[_Node]:
    """A fresh, empty pull engine (a dockerd and its containerd of their own)."""
    from tests.support.pull_engine import pull_engine

    root = Path(tempfile.mkdtemp(prefix="gpurl-bz-", dir="/tmp"))  # short: a socket path
    try:
        with pull_engine(root, client) as host:
            yield _Node(ctr=["ctr", "-a", str(root / "exec" / "containerd" / "containerd.sock"),
                             "-n", "node"], containerd=_containerd_of(root), host=host)
    except RuntimeError as exc:  # the engine did not start
        raise BenchError(str(exc).splitlines()[0]) from None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _ctr_pull(node: _Node, reference: str, expected_chain: str) -> dict[str, Any]:
    """`ctr images pull` (fetch, then unpack: containerd 1.6 does them in turn and says
    "unpacking" in between): its wall seconds apart, and the CPU seconds the node spent (ctr,
    which fetches, and containerd, which stores and unpacks); or its error."""
    start, before = time.monotonic(), _cpu_seconds(node.containerd)
    fetched, chain, tail = None, "", ""
    with subprocess.Popen([*node.ctr, "images", "pull", "--plain-http", "--print-chainid",
                           reference], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as process:
        assert process.stdout is not None
        for line in process.stdout:
            if fetched is None and line.startswith("unpacking "):
                fetched = time.monotonic() - start
            if line.startswith("image chain ID: "):
                chain = line.split(": ", 1)[1].strip()
            if line.strip():
                tail = line
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    total = time.monotonic() - start
    after = _cpu_seconds(node.containerd)
    user = usage.ru_utime + after[0] - before[0]
    system = usage.ru_stime + after[1] - before[1]
    if process.returncode != 0:
        return {"error": _last_line(tail)}
    if chain != expected_chain:
        return {"error": f"unpacked into {chain or 'no snapshot'}, not {expected_chain}"}
    fetch = fetched if fetched is not None else total
    return {"fetch_s": round(fetch, 2), "unpack_s": round(total - fetch, 2),
            "total_s": round(total, 2), "cpu_s": round(user + system, 2),
            "cpu_user_s": round(user, 2)}


def _docker(argv: Sequence[str], **kwargs: Any) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                          check=False, timeout=3600, **kwargs)
    return "ok" if done.returncode == 0 else "fails: " + _last_line(done.stderr or done.stdout)


def _probe_outcome(client: str, reference: str, chain: str) -> dict[str, str]:
    """What the node makes of `reference` (pushed): containerd pull and unpack, BuildKit
    FROM it, docker pull, each on one fresh engine (BuildKit first: it pulls for itself)."""
    with _engine(client) as node, tempfile.TemporaryDirectory() as context:
        host = node.host
        pulled = _ctr_pull(node, reference, chain)
        said = {_CONTAINERD: "ok" if "error" not in pulled
                else "fails: " + pulled["error"]}
        Path(context, "probe").write_text("probe\n")
        Path(context, "Dockerfile").write_text(f"FROM {reference}\nCOPY probe /probe\n")
        said[_BUILDKIT] = _docker(
            [client, "-H", host, "build", "--progress", "plain", "-q", context],
            env={**os.environ, "DOCKER_BUILDKIT": "1"})
        said[_DOCKER_PULL] = _docker([client, "-H", host, "pull", "-q", reference])
    return said


# --- the run -----------------------------------------------------------------------------------


def _tool_versions() -> dict[str, str]:
    def first_line(*argv: str) -> str:
        if shutil.which(argv[0]) is None and not Path("/usr/sbin", argv[0]).exists():
            return "?"
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[0] if done.returncode == 0 and lines else "?"

    return {"zstd": first_line("zstd", "--version"), "zlib": zlib.ZLIB_RUNTIME_VERSION,
            "containerd": first_line("ctr", "--version"),
            "docker": first_line("dockerd", "--version"),
            "registry": first_line("docker-registry", "--version")}


def _require_tools() -> str:
    """The docker client to use; a BenchError naming the first missing part."""
    if os.geteuid() != 0:
        raise BenchError("the pull engine is a second dockerd: run as root")
    for tool, package in (("zstd", "zstd"), ("ctr", "containerd"), ("dockerd", "docker.io"),
                          ("ip", "iproute2")):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            raise BenchError(f"{tool} is not installed (apt-get install {package})")
    from gpurl_tasks.local.engine import find_buildkit_client

    return find_buildkit_client()[0]


def _require_room(path: str, need: int, what: str) -> None:
    """A BenchError when the disk holding `path` has less than `need` bytes free."""
    free = shutil.disk_usage(path).free
    if free < need:
        raise BenchError(f"{what} needs about {format_bytes(need)} free on the disk of {path}, "
                         f"which has {format_bytes(free)}")


def _busiest() -> list[str]:
    """The five busiest processes but this one's (what else ran: CPU share, command)."""
    done = subprocess.run(["ps", "-eo", "pid=,pcpu=,comm=", "--sort=-pcpu"],
                          capture_output=True, text=True, check=False)
    rows = [line.split(None, 2) for line in done.stdout.splitlines()]
    return [f"{r[1]}% {r[2]}" for r in rows if len(r) == 3 and r[2] != "ps"
            and int(r[0]) != os.getpid()][:5]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Source:
    """The image taken apart: where it is, its layers, config and diff_ids."""

    reference: str
    ref: ImageRef
    image: PulledImage
    config: dict[str, Any]
    diff_ids: tuple[str, ...]


def _source(client: Any, reference: str, host: str) -> _Source:
    """The image at `reference`, checked: one diff_id per layer, every layer gzip."""
    ref = parse_reference(reference, default_host=host)
    image = client.pull(ref)
    config = client.blob_json(ref, image.config_digest)
    diff_ids = parse_diff_ids(config, f"config of {reference}")
    if len(diff_ids) != len(image.layers):
        raise BenchError(f"{reference}: {len(image.layers)} layers, {len(diff_ids)} diff_ids")
    for i, layer in enumerate(image.layers):
        if layer.media_type not in GZIP_LAYERS:
            raise BenchError(f"{reference}: layer {i} is {layer.media_type}, not gzip")
    return _Source(reference=reference, ref=ref, image=image, config=config, diff_ids=diff_ids)


def _recompress(client: Any, http: Any, source: _Source, fmts: Sequence[Format],
                refs: Mapping[str, ImageRef], work: Path, say: Callable[[str], None],
                ) -> tuple[list[dict[str, Any]], dict[str, list[Descriptor]]]:
    """Each layer fetched, decompressed to its tar and compressed in every format, timed,
    and pushed to that format's repository (at most one tar and one blob on disk at a time):
    (a row per layer, the layer descriptors per format)."""
    layers: list[dict[str, Any]] = []
    descriptors: dict[str, list[Descriptor]] = {f.name: [] for f in fmts}
    written = _written(source.image)
    count = len(source.image.layers)
    for i, layer in enumerate(source.image.layers):
        blob, tar = work / "source", work / "layer.tar"
        _fetch(http, client.base_url, source.ref, layer, blob)
        with tar.open("wb") as out:
            got = _inflate(blob, out)
        blob.unlink()
        if got != source.diff_ids[i]:
            raise BenchError(f"{source.reference}: layer {i} decompresses to {got}, its "
                             f"config says {source.diff_ids[i]}")
        size = tar.stat().st_size
        row: dict[str, Any] = {"index": i, "source_digest": layer.digest, "written": written[i],
                               "source_bytes": layer.size, "tar_bytes": size, "formats": {}}
        for fmt in fmts:
            if size > _BIG:
                say(f"  layer {i + 1}: {fmt.name} of {format_bytes(size)} ...")
            out_path = work / fmt.name
            digest, compress_s = _compress(tar, out_path, fmt)
            decompress_s = _decompress_seconds(out_path, fmt)
            if digest == layer.digest:  # gpurl's own bytes: already in the registry
                client.mount_blob(refs[fmt.name], digest, source.ref.repository)
            else:
                client.push_blob(refs[fmt.name], out_path, digest)
            descriptors[fmt.name].append(Descriptor(media_type=fmt.media_type, digest=digest,
                                                    size=out_path.stat().st_size))
            row["formats"][fmt.name] = {"digest": digest, "bytes": out_path.stat().st_size,
                                        "compress_s": round(compress_s, 3),
                                        "decompress_s": round(decompress_s, 3)}
            out_path.unlink()
        tar.unlink()
        row["load"] = os.getloadavg()[0]  # the machine's, while this layer was compressed
        layers.append(row)
        say(f"[{i + 1}/{count}] {format_bytes(layer.size)} -> tar {format_bytes(size)}: "
            + ", ".join(f"{n} {format_bytes(f['bytes'])} {f['compress_s']:.1f}s/"
                        f"{f['decompress_s']:.1f}s" for n, f in row["formats"].items()))
    return layers, descriptors


def _cold_pulls(client_bin: str, refs: Mapping[str, ImageRef], names: Sequence[str],
                chain: str, repeat: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """`repeat` rounds of one cold containerd pull per format (interleaved, so a change in
    the machine's load falls on every format alike), each on a fresh engine."""
    pulls = []
    for n in range(repeat):
        for name in names:
            say(f"cold pull {n + 1}/{repeat} of {name} (containerd, fresh engine) ...")
            with _engine(client_bin) as node:
                pulled = _ctr_pull(node, str(refs[name]), chain)
            pulls.append({"format": name, "repeat": n, **pulled, "load": os.getloadavg()[0]})
            say("  " + (pulled.get("error") or f"fetch {pulled['fetch_s']}s + unpack "
                        f"{pulled['unpack_s']}s = {pulled['total_s']}s, node CPU "
                        f"{pulled['cpu_s']}s (user {pulled['cpu_user_s']}s)"))
    return pulls


def measure(image: str | None, fmts: Sequence[Format], repeat: int,
            say: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole run (see the module's docstring): its results as one JSON-able dict."""
    import httpx

    from gpurl_tasks.oci.registry import RegistryClient

    client_bin = _require_tools()
    load = [{"phase": "start", "load": os.getloadavg()[0]}]
    busiest = {"start": _busiest()}
    host = parse_reference(image, default_host=HOST).host if image else HOST
    names = [f.name for f in fmts]
    with RegistryClient(host) as client, httpx.Client(timeout=httpx.Timeout(60.0)) as http, \
            tempfile.TemporaryDirectory(prefix="gpurl-bench-zstd-") as scratch:
        if image is None:
            say(f"finding the largest composed environment in {host} ...")
        source = _source(client, image or largest_environment(client, host), host)
        run = uuid.uuid4().hex[:6]
        refs = {name: parse_reference(f"{host}/{BENCH_REPO}/{run}-{name}:image",
                                      default_host=host) for name in names}
        say(f"{source.reference}: {len(source.image.layers)} layers, "
            f"{format_bytes(sum(d.size for d in source.image.layers))}; formats "
            f"{', '.join(names)}; run {run}")
        pushed = sum(d.size for d in source.image.layers)
        _require_room(scratch, len(fmts) * pushed, "compressing every layer in every format "
                      "(the registry keeps the blobs; a tar at a time here)")
        layers, descriptors = _recompress(client, http, source, fmts, refs, Path(scratch), say)
        load.append({"phase": "after compressing", "load": os.getloadavg()[0]})
        refused = {name: said for name in names if (said := _push_image(
            client, refs[name], image_documents(source.config, descriptors[name])))}
        probes = _probes(client, client_bin, source, layers, descriptors, fmts, run, say)
        load.append({"phase": "after probes", "load": os.getloadavg()[0]})
        _require_room("/tmp", max(r["bytes"] for r in summarize(layers, [], names))
                      + sum(r["tar_bytes"] for r in layers) + 2**30,
                      "a cold pull (the blobs and the unpacked layers, on a fresh engine)")
        pulls = _cold_pulls(client_bin, refs, [n for n in names if n not in refused],
                            chain_id(source.diff_ids), repeat, say)
        load.append({"phase": "end", "load": os.getloadavg()[0]})
        busiest["end"] = _busiest()
    written = [r for r in layers if r["written"]]
    return {
        "image": {"reference": source.reference, "layers": len(layers),
                  "bytes": sum(r["source_bytes"] for r in layers),
                  "tar_bytes": sum(r["tar_bytes"] for r in layers), "written": len(written)},
        "formats": [{"name": f.name, "media_type": f.media_type, "reference": str(refs[f.name]),
                     "registry": refused.get(f.name, "accepted")} for f in fmts],
        "gzip_reproduced": sum(r["formats"][names[0]]["digest"] == r["source_digest"]
                               for r in written),
        "rows": summarize(layers, pulls, names), "repeat": repeat, "probes": probes,
        "pulls": pulls, "layers": layers, "tools": _tool_versions(),
        "machine": {"cpus": os.cpu_count(), "load": load, "busiest": busiest},
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _probes(client: Any, client_bin: str, source: _Source,
            layers: Sequence[Mapping[str, Any]], descriptors: Mapping[str, Sequence[Descriptor]],
            fmts: Sequence[Format], run: str, say: Callable[[str], None],
            ) -> list[dict[str, Any]]:
    """Which manifests and layer types the registry, containerd and Docker take, on two
    small layers: zstd under OCI and Docker manifests, under no defined type, gzip under
    OCI's type, and gzip and zstd mixed in one OCI image."""
    gzip, zstd = fmts[0].name, fmts[1].name
    first, second = probe_layers([r["tar_bytes"] for r in layers])
    config, diff_ids, host = source.config, source.diff_ids, source.ref.host
    as_undefined = dataclasses.replace(descriptors[zstd][first], media_type=UNDEFINED_DOCKER_ZSTD)
    cases = (
        ("OCI manifest, zstd layer", OCI_MANIFEST, [(first, descriptors[zstd][first])]),
        ("Docker schema2 manifest, zstd layer typed as OCI's", DOCKER_MANIFEST,
         [(first, descriptors[zstd][first])]),
        (f"Docker schema2 manifest, zstd layer typed {UNDEFINED_DOCKER_ZSTD} (defined nowhere)",
         DOCKER_MANIFEST, [(first, as_undefined)]),
        ("OCI manifest, gzip layer (gpurl's bytes, OCI's gzip type)", OCI_MANIFEST,
         [(first, descriptors[gzip][first])]),
        ("OCI manifest, a gzip layer then a zstd layer", OCI_MANIFEST,
         [(first, descriptors[gzip][first]), (second, descriptors[zstd][second])]),
    )
    found = []
    for n, (case, manifest_type, picked) in enumerate(cases):
        say(f"probe: {case} ...")
        ids = [diff_ids[i] for i, _ in picked]
        probe_config = {**platform_of(dict(config)), "config": {},
                        "rootfs": {"type": "layers", "diff_ids": ids},
                        "history": [{"created_by": f"layer {i} of the source"} for i, _ in picked]}
        ref = parse_reference(f"{host}/{BENCH_REPO}/{run}-probe-{n}:probe", default_host=host)
        source_of = {gzip: f"{BENCH_REPO}/{run}-{gzip}", zstd: f"{BENCH_REPO}/{run}-{zstd}"}
        for _, descriptor in picked:
            kind = gzip if descriptor.media_type == fmts[0].media_type else zstd
            client.mount_blob(ref, descriptor.digest, source_of[kind])
        refused = _push_image(client, ref, image_documents(
            probe_config, [d for _, d in picked], manifest_type=manifest_type))
        outcome = {_REGISTRY: "accepted" if refused is None else f"refuses: {refused}"}
        if refused is None:
            outcome.update(_probe_outcome(client_bin, str(ref), chain_id(ids)))
        found.append({"case": case, "reference": str(ref), "outcome": outcome})
        say("  " + "; ".join(f"{k} {v}" for k, v in outcome.items()))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compression",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", help="a composed environment image in a loopback registry "
                        f"(default: the largest env-* tag in {HOST})")
    parser.add_argument("--levels", type=int, nargs="+", default=[3, 19], metavar="N",
                        help="zstd levels to compare with gzip (default: 3 19)")
    parser.add_argument("--gzip-level", type=int, default=LayerSettings().slice_gzip_level,
                        help="the gzip level (default: layers.slice-gzip-level's default)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="cold pulls per format, each on a fresh engine (default: 3)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the JSON results (default: {OUT})")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="print the figures of a run's JSON again, measure nothing")
    args = parser.parse_args(argv)
    if args.render:
        try:
            print(render(json.loads(args.render.read_text())))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: {args.render} is not a run's results: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        if args.repeat < 1:
            raise BenchError("--repeat must be at least 1")
        result = measure(args.image, formats(args.levels, args.gzip_level), args.repeat,
                         say=lambda line: print(line, flush=True))
    except GpurlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (BenchError, OSError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted (nothing written)", file=sys.stderr)
        return 130
    write_atomic(args.out, json.dumps(result, indent=1, sort_keys=True) + "\n")
    print()
    print(render(result))
    print(f"\n(written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
