"""The GPU check, run inside the image on the GPU node it is to be pinned for (stdlib only at
import: the job has no gpurl installed; torch is imported when the image has it).

    python3 -m gpurl_tasks.gpu.check --out RESULT.json [--image-digest sha256:...]
        [--root DIR]... [--arch-list "8.0;9.0;10.0"] [--assert CODE]... [--gpus N]
        [--nccl-mib N] [--lock-proof]

It checks what a CPU build cannot see (issue 52): the driver covers the image's CUDA and torch
sees every GPU given (`driver`); every shared object with device code can run on every GPU of
the node, and holds the configured arch list (`kernels`); a kernel and the configured asserts
launch (`launches`); NCCL's all-reduce uses InfiniBand where the node has it (`network`).
Each check is a small function of the facts gathered (tests feed it fakes: no torch, no GPU,
no IB); a check that could not run is "not-run" with its reason. It writes the result
(gpurl_tasks/gpu/result.py) to --out atomically and prints it as one `GPURL-GPU-RESULT`
line. Exit 0 when the result passed, 1 when it did not, 2 on bad arguments or a result
that cannot be written (one `error:` line).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import importlib
import os
import re
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.gpu import fatbin
from gpurl_tasks.gpu import result as gr

__all__ = ["Allreduce", "Facts", "Scan", "check_driver", "check_kernels", "check_launches",
           "check_network", "ib_devices", "main", "transport"]

LINE_PREFIX = "GPURL-GPU-RESULT "
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TRANSPORT = re.compile(r"NET/(\w+)|Using network (\w+)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Facts:
    """What the node and the image say about themselves, gathered once."""

    torch_error: str = ""  # why torch did not import ("" when it did)
    gpus: tuple[gr.Gpu, ...] = ()
    driver: str = ""
    driver_cuda: str = ""  # "" when libcuda.so.1 did not load
    driver_error: str = ""
    image_cuda: str = ""
    expected_gpus: int | None = None  # what the job was given (--gpus, else the visible list)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scan:
    """The shared objects looked at: each with device code and what it holds, or why it
    could not be read."""

    scanned: int
    holds: tuple[tuple[Path, fatbin.Holds], ...]
    unreadable: tuple[tuple[Path, str], ...] = ()
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Allreduce:
    ranks: int
    bytes: int = 0
    seconds: float = 0.0
    transport: str = ""  # "IB", "Socket", or "" when NCCL named none (one rank needs no net)
    error: str = ""
    log_lines: tuple[str, ...] = ()  # NCCL's NET lines, for the figures


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def check_driver(facts: Facts) -> gr.Check:
    """The driver's CUDA covers the image's, and torch sees every GPU the job was given."""
    figures: dict[str, gr.Figure] = {"gpus": len(facts.gpus), "driver_cuda": facts.driver_cuda,
                                     "image_cuda": facts.image_cuda}
    if not facts.driver_cuda:
        return gr.Check(name="driver", status="failed", figures=figures,
                        reason=f"the CUDA driver did not load: {facts.driver_error or 'unknown'}")
    if facts.torch_error:
        return gr.Check(name="driver", status="not-run", figures=figures,
                        reason=f"torch does not import ({facts.torch_error}): the image's CUDA "
                               "and the GPUs it sees are unknown")
    if _version(facts.driver_cuda) < _version(facts.image_cuda):
        return gr.Check(name="driver", status="failed", figures=figures,
                        reason=f"the driver runs CUDA {facts.driver_cuda}, older than the "
                               f"image's CUDA {facts.image_cuda}")
    if not facts.gpus:
        return gr.Check(name="driver", status="failed", figures=figures, reason="torch sees no GPU")
    if facts.expected_gpus is not None and len(facts.gpus) != facts.expected_gpus:
        return gr.Check(name="driver", status="failed", figures=figures,
                        reason=f"torch sees {len(facts.gpus)} GPUs, the job was given "
                               f"{facts.expected_gpus}")
    names = sorted({f"{g.name} ({g.capability})" for g in facts.gpus})
    return gr.Check(name="driver", status="passed", figures=figures,
                    reason=f"driver CUDA {facts.driver_cuda} >= image CUDA {facts.image_cuda}; "
                           f"{len(facts.gpus)} GPU(s): {', '.join(names)}")


def check_kernels(scan: Scan, gpus: Sequence[gr.Gpu], arch_list: Sequence[str] = ()
                  ) -> gr.Check:
    """Every file with device code runs on every SM of the node (SASS for it, or PTX at or
    below it), and holds every arch of the configured list."""
    sass = sorted({a for _, h in scan.holds for a in h.sass}, key=_arch_order)
    ptx = sorted({a for _, h in scan.holds for a in h.ptx}, key=_arch_order)
    figures: dict[str, gr.Figure] = {
        "files": len(scan.holds), "scanned": scan.scanned, "seconds": round(scan.seconds, 3),
        "sass": " ".join(sass), "ptx": " ".join(ptx)}
    findings = [f"{path}: the fatbin cannot be read: {why}" for path, why in scan.unreadable]
    sms = sorted({fatbin.parse_sm(g.capability) for g in gpus})
    if not sms:
        return gr.Check(name="kernels", status="not-run", figures=figures,
                        findings=tuple(findings),
                        reason="no GPU seen, so no SM to check the device code against")
    for path, holds in scan.holds:
        for sm in sms:
            verdict = fatbin.runnable(holds, sm)
            if not verdict.runs:
                findings.append(f"{path}: {verdict.by}")
    missing: dict[str, int] = {}
    for arch in arch_list:
        sm = fatbin.parse_sm(arch)
        for path, holds in scan.holds:
            if holds.runtime_entries and not fatbin.runnable(holds, sm).runs:
                missing[arch] = missing.get(arch, 0) + 1
                if sm not in sms:  # the node's own SM has its finding above
                    findings.append(f"{path}: configured arch {arch}, but it holds "
                                    f"{holds.describe()}")
    if arch_list:
        figures["arch_list"] = ";".join(arch_list)
        figures["arch_list_missing"] = " ".join(f"{a}:{n}" for a, n in sorted(missing.items()))
    on = ", ".join(f"{a}.{b}" for a, b in sms)
    if findings:
        return gr.Check(name="kernels", status="failed", figures=figures,
                        findings=tuple(findings),
                        reason=f"{len(findings)} finding(s) in {len(scan.holds)} files with "
                               f"device code, for sm {on}")
    return gr.Check(name="kernels", status="passed", figures=figures,
                    reason=f"{len(scan.holds)} files with device code run on sm {on}")


def _arch_order(name: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else 0, name)


Assert = tuple[str, str]  # (label, the outcome: "" when it held, else the error)


def check_launches(builtin: Assert | None, asserts: Sequence[Assert],
                   why_not: str = "torch does not import") -> gr.Check:
    """The built-in kernel launch (None: it could not run, `why_not`) and each configured
    assert held."""
    ran = ([builtin] if builtin else []) + list(asserts)
    figures: dict[str, gr.Figure] = {"asserts": len(asserts), "ran": len(ran)}
    failed = [f"{label}: {error}" for label, error in ran if error]
    if failed:
        return gr.Check(name="launches", status="failed", figures=figures, findings=tuple(failed),
                        reason=f"{len(failed)} of {len(ran)} launch(es) failed: {failed[0][:200]}")
    if builtin is None:
        return gr.Check(name="launches", status="not-run", figures=figures,
                        reason=f"{why_not}: no kernel could be launched"
                        + (f" ({len(asserts)} assert(s) held)" if asserts else ""))
    return gr.Check(name="launches", status="passed", figures=figures,
                    reason=f"the built-in kernel and {len(asserts)} assert(s) ran")


def check_network(ib_devices: Sequence[str], verbs_error: str, allreduce: Allreduce | None,
                  why_not: str = "torch does not import") -> gr.Check:
    """libibverbs loads; with /dev/infiniband, NCCL's all-reduce says NET/IB, never Socket."""
    figures: dict[str, gr.Figure] = {"ib_devices": len(ib_devices),
                                     "libibverbs": "loads" if not verbs_error else "missing"}
    if allreduce is not None:
        algbw = allreduce.bytes / allreduce.seconds / 1e9 if allreduce.seconds else 0.0
        figures.update({"ranks": allreduce.ranks, "bytes": allreduce.bytes,
                        "seconds": round(allreduce.seconds, 6), "algbw_gbps": round(algbw, 3),
                        "busbw_gbps": round(algbw * 2 * (allreduce.ranks - 1)
                                            / allreduce.ranks, 3),
                        "transport": allreduce.transport or "none"})
        if allreduce.log_lines:
            figures["nccl_net"] = " | ".join(allreduce.log_lines)[:500]
    if allreduce is not None and allreduce.error:
        return gr.Check(name="network", status="failed", figures=figures,
                        reason=f"the NCCL all-reduce failed: {allreduce.error}")
    if not ib_devices:
        return gr.Check(name="network", status="not-run", figures=figures,
                        reason="no IB device on this node (no /dev/infiniband/uverbs*): NCCL's "
                               "IB path cannot be checked"
                        + ("" if allreduce else f"; {why_not}, no all-reduce ran"))
    if verbs_error:
        return gr.Check(name="network", status="failed", figures=figures,
                        reason=f"the node has InfiniBand but libibverbs does not load "
                               f"({verbs_error}): NCCL falls back to NET/Socket")
    if allreduce is None:
        return gr.Check(name="network", status="not-run", figures=figures,
                        reason=f"{why_not}: no NCCL all-reduce ran")
    if not allreduce.transport.startswith("IB"):  # IB, or IBext from the SHARP plugin
        return gr.Check(name="network", status="failed", figures=figures,
                        reason=f"NCCL used {allreduce.transport or 'no'} network, not NET/IB, "
                               "although /dev/infiniband exists")
    return gr.Check(name="network", status="passed", figures=figures,
                    reason=f"NCCL all-reduce over {allreduce.ranks} GPU(s) used NET/IB")


def transport(lines: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """The network NCCL chose, from its NCCL_DEBUG=INFO lines ("Using network Socket"; else the
    last `NET/<name> : Using` line), and its NET lines, for the figures."""
    chosen, fallback, kept = "", "", []
    for line in lines:
        match = _TRANSPORT.search(line)
        if not match:
            continue
        kept.append(line.strip()[-200:])
        if match.group(2):
            chosen = match.group(2)
        elif " : Using [" in line and "[RO]" not in line:
            fallback = match.group(1)
    return chosen or fallback, tuple(kept)


# The edges: what gathers the facts from the node, the image and torch.

def _torch() -> tuple[Any, str]:
    try:
        torch = importlib.import_module("torch")  # the image's own; gpurl does not need it
    except Exception as exc:  # any import failure means the same here
        return None, f"{type(exc).__name__}: {exc}"
    return torch, ""


def _driver_cuda() -> tuple[str, str]:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return "", "cuDriverGetVersion failed"
    except OSError as exc:
        return "", str(exc)
    return f"{version.value // 1000}.{version.value % 1000 // 10}", ""


def _driver_version() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d[\d.]+)", text)
    return match.group(1) if match else ""


def _expected_gpus(given: int | None) -> int | None:
    if given is not None:
        return given
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("NVIDIA_VISIBLE_DEVICES", ""))
    if not visible or visible in ("all", "void", "none"):
        return None
    return len([v for v in visible.split(",") if v.strip()])


def gather(torch: Any, torch_error: str, expected: int | None) -> Facts:
    driver_cuda, driver_error = _driver_cuda()
    gpus: tuple[gr.Gpu, ...] = ()
    if torch is not None and torch.cuda.is_available():
        gpus = tuple(gr.Gpu(index=i, name=torch.cuda.get_device_name(i),
                            capability="{}.{}".format(*torch.cuda.get_device_capability(i)))
                     for i in range(torch.cuda.device_count()))
    return Facts(torch_error=torch_error, gpus=gpus, driver=_driver_version(),
                 driver_cuda=driver_cuda, driver_error=driver_error,
                 image_cuda=str(getattr(getattr(torch, "version", None), "cuda", "") or ""),
                 expected_gpus=_expected_gpus(expected))


def _shared_objects(roots: Sequence[Path]) -> Iterable[Path]:
    """Every `*.so` / `*.so.N` file under the roots (site-packages by default), once."""
    seen = set()
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                if name.endswith(".so") or ".so." in name:
                    path = Path(directory, name)
                    if path.is_file() and not path.is_symlink() and path.resolve() not in seen:
                        seen.add(path.resolve())
                        yield path


def scan(roots: Sequence[Path], sms: Iterable[tuple[int, int]] = ()) -> Scan:
    """Every shared object under `roots` with device code, and what it holds. A file whose
    .nv_fatbin runs on none of `sms` is read again with the fatbins it keeps among its data
    (cuFFT loads its own: one container in .nv_fatbin, 23983 in .data)."""
    start, holds, unreadable, count, sms = time.monotonic(), [], [], 0, tuple(sms)
    for path in _shared_objects(roots):
        count += 1
        try:
            found = fatbin.read(path)
            if found is not None and not all(fatbin.runnable(found, sm).runs for sm in sms):
                found = fatbin.read(path, embedded=True)
        except GpurlError as exc:
            unreadable.append((path, exc.message))
            continue
        if found is not None:
            holds.append((path, found))
    return Scan(scanned=count, holds=tuple(holds), unreadable=tuple(unreadable),
                seconds=time.monotonic() - start)


def _builtin_launch(torch: Any) -> Assert:
    """A kernel of torch's own, launched and read back: its answer is known."""
    label = "built-in: torch.arange(1<<20).sum() on cuda:0"
    try:
        got = int(torch.arange(1 << 20, device="cuda:0", dtype=torch.int64).sum().item())
        torch.cuda.synchronize()
    except Exception as exc:  # the launch's own error is the finding
        return label, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    want = (1 << 20) * ((1 << 20) - 1) // 2
    return label, "" if got == want else f"sum is {got}, not {want}"


def run_asserts(codes: Sequence[str], torch: Any) -> list[Assert]:
    """Each configured assert run in this process, in a namespace of its own."""
    out = []
    for number, code in enumerate(codes, 1):
        label = f"assert {number} ({code.strip().splitlines()[0][:80] if code.strip() else ''})"
        try:
            exec(compile(code, f"<assert {number}>", "exec"), {"torch": torch})  # config
            if torch is not None and torch.cuda.is_available():
                torch.cuda.synchronize()
        except Exception as exc:  # the assert's own error is the finding
            text = str(exc).strip().splitlines()
            out.append((label, f"{type(exc).__name__}: {text[0][:300] if text else ''}"))
            continue
        out.append((label, ""))
    return out


def _verbs() -> str:
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError as exc:
        return str(exc)
    return ""


def ib_devices(root: Path = Path("/dev/infiniband")) -> list[str]:
    """The node's IB verbs devices (`uverbs0`...): a /dev/infiniband holding only `rdma_cm`,
    as a VM without an HCA shows it, has none, and NCCL then says "NET/IB : No device found"."""
    try:
        return sorted(p.name for p in root.iterdir() if p.name.startswith("uverbs"))
    except OSError:
        return []


def _allreduce_rank(rank: int, world: int, store: str, nbytes: int, out: str) -> None:
    torch = importlib.import_module("torch")
    dist = importlib.import_module("torch.distributed")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        data = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        dist.all_reduce(data)  # warm-up: connections are set up on the first call
        torch.cuda.synchronize()
        dist.barrier(device_ids=[rank])
        start = time.perf_counter()
        dist.all_reduce(data)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if rank == 0:
            ok = bool((data == float(world ** 2)).all())  # ones, summed twice over the ranks
            Path(out).write_text(f"{seconds} {int(ok)}")
    finally:
        dist.destroy_process_group()


def allreduce(torch: Any, ranks: int, nbytes: int) -> Allreduce:
    """An NCCL all-reduce over `ranks` GPUs (one process each; in this process for one) with
    NCCL_DEBUG=INFO into files, whose NET lines say the transport."""
    with tempfile.TemporaryDirectory(prefix="gpurl-nccl-") as work:
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET",
                          NCCL_DEBUG_FILE=f"{work}/nccl.%h.%p.log")
        store, out = f"{work}/store", f"{work}/out"
        try:
            if ranks == 1:
                _allreduce_rank(0, 1, store, nbytes, out)
            else:
                spawn = importlib.import_module("torch.multiprocessing").spawn
                spawn(_allreduce_rank, args=(ranks, store, nbytes, out), nprocs=ranks)
            seconds_text, ok = Path(out).read_text().split()
        except Exception as exc:  # NCCL's own error is the finding
            seconds_text, ok, error = "0", "1", f"{type(exc).__name__}: {str(exc)[:300]}"
        else:
            error = "" if ok == "1" else "the all-reduce's sum is wrong"
        lines = [line for log in sorted(Path(work).glob("nccl.*.log"))
                 for line in log.read_text(errors="replace").splitlines()]
    found, kept = transport(lines)
    return Allreduce(ranks=ranks, bytes=nbytes, seconds=float(seconds_text), transport=found,
                     error=error, log_lines=kept)


def _site_packages() -> list[Path]:
    import site
    import sysconfig
    found = {Path(p) for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                               sysconfig.get_paths()["platlib"]) if Path(p).is_dir()}
    return sorted(found)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"gpurl-gpu-check: error: {message} (hint: --help)", file=sys.stderr)
        raise SystemExit(2)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="gpurl-gpu-check", description="check this image on this GPU node")
    parser.add_argument("--out", type=Path, required=True, help="where the result JSON goes")
    parser.add_argument("--image-digest", default=os.environ.get("GPURL_IMAGE_DIGEST", ""),
                        help="the digest this job runs (default: $GPURL_IMAGE_DIGEST)")
    parser.add_argument("--root", type=Path, action="append", default=[],
                        help="where to look for device code (default: site-packages)")
    parser.add_argument("--arch-list", default="", help='the configured archs, "8.0;9.0;10.0"')
    parser.add_argument("--assert", dest="asserts", action="append", default=[],
                        metavar="CODE", help="python run in this process on the GPU (repeat)")
    parser.add_argument("--gpus", type=int, help="GPUs the job was given (default: visible)")
    parser.add_argument("--nccl-mib", type=int, default=256, help="all-reduce size (MiB)")
    parser.add_argument("--lock-proof", action="store_true",
                        help="also the build's own proof (not yet in this check)")
    args = parser.parse_args(argv)
    if not _DIGEST.fullmatch(args.image_digest):
        parser.error(f"--image-digest (or GPURL_IMAGE_DIGEST) must be sha256:<64 hex>, "
                     f"not {args.image_digest!r}")
    if not args.out.parent.is_dir():
        parser.error(f"--out's folder {args.out.parent} does not exist")
    for root in args.root:
        if not root.is_dir():
            parser.error(f"--root {root} is not a folder")
    args.arch_list = [a for a in args.arch_list.replace(",", ";").split(";") if a.strip()]
    for arch in args.arch_list:
        try:
            fatbin.parse_sm(arch)
        except GpurlError as exc:
            parser.error(f"--arch-list: {exc.message}")
    if (args.gpus is not None and args.gpus < 1) or args.nccl_mib < 1:
        parser.error("--gpus and --nccl-mib must be at least 1")
    return args


def _guarded(name: str, run: Callable[[], gr.Check]) -> gr.Check:
    """A check's own bug becomes its failure, named, instead of a lost result."""
    try:
        return run()
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return gr.Check(name=name, status="failed",
                        reason=f"the check broke: {type(exc).__name__}: {exc} "
                               f"({Path(where.filename).name}:{where.lineno})".replace("\n", " "))


def main(argv: Sequence[str] | None = None, *, torch_loader: Callable[[], tuple[Any, str]] = _torch,
         ib_root: Path = Path("/dev/infiniband")) -> int:
    args = _arguments(argv)
    torch, torch_error = torch_loader()
    facts = gather(torch, torch_error, args.gpus)
    sms = {fatbin.parse_sm(g.capability) for g in facts.gpus} | set(map(fatbin.parse_sm,
                                                                         args.arch_list))
    found = scan(args.root or _site_packages(), sorted(sms))
    why_not = "torch does not import" if torch is None else "torch sees no GPU"
    checks = [
        _guarded("driver", lambda: check_driver(facts)),
        _guarded("kernels", lambda: check_kernels(found, facts.gpus, args.arch_list)),
        _guarded("launches", lambda: check_launches(
            _builtin_launch(torch) if torch is not None and facts.gpus else None,
            run_asserts(args.asserts, torch), why_not)),
        _guarded("network", lambda: check_network(
            ib_devices(ib_root), _verbs(),
            allreduce(torch, len(facts.gpus), args.nccl_mib << 20)
            if torch is not None and facts.gpus else None, why_not)),
        gr.Check(name="build-proof", status="not-run",
                 reason="the build proves its package set (gpurl-envcheck); in-job proof is "
                        "not implemented yet" if args.lock_proof else "not asked (--lock-proof)"),
    ]
    outcome = gr.Result(image=args.image_digest, checks=tuple(checks), node=gr.Node(
        hostname=socket.gethostname(), gpus=facts.gpus, driver=facts.driver,
        driver_cuda=facts.driver_cuda, image_cuda=facts.image_cuda))
    print(LINE_PREFIX + gr.to_json(outcome), flush=True)  # the job's log has it, whatever follows
    try:
        write_atomic(args.out, gr.to_json(outcome, indent=2) + "\n")
    except OSError as exc:
        print(f"gpurl-gpu-check: error: cannot write the result to {args.out}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0 if outcome.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
