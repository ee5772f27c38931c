"""The GPU check's real-GPU proof (issue 52), run on the device machine by run.sh: the fatbin
reader on torch's real libraries, timed and compared with cuobjdump; the tiny kernels built
for one arch each, read and really launched. Prints what it finds; run.sh keeps the log."""

from __future__ import annotations

import ctypes
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.gpu import fatbin

SMS = ((8, 0), (9, 0), (10, 0), (12, 0))


def _cuobjdump(path: Path) -> tuple[set[str], set[str], float]:
    """The SASS and PTX archs cuobjdump lists (its own names: NAME.N.sm_90.cubin)."""
    start, found = time.perf_counter(), {}
    for flag in ("--list-elf", "--list-ptx"):
        out = subprocess.run(["cuobjdump", flag, str(path)], capture_output=True, text=True,
                             timeout=90, check=False).stdout
        found[flag] = {m for m in re.findall(r"\.(sm_\d+[af]?)\.(?:cubin|ptx)", out)}
    ptx = {"compute_" + a.removeprefix("sm_") for a in found["--list-ptx"]}
    return found["--list-elf"], ptx, time.perf_counter() - start


def survey(paths: list[Path], compare: set[str]) -> None:
    for path in paths:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        try:
            holds = fatbin.read(path)
        except GpurlError as exc:
            print(f"UNREADABLE {path}: {exc}")
            for at in re.findall(r"offset (\d+)", exc.message)[:2]:
                with path.open("rb") as f:
                    f.seek(int(at) - 32)
                    print(f"  bytes at {int(at) - 32}: {f.read(96).hex()}")
            continue
        cold = time.perf_counter() - start
        if holds is None:
            continue
        start = time.perf_counter()
        fatbin.read(path)
        warm = time.perf_counter() - start
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        sections = {n: (len(c), sum(len(x) for x in c)) for n, c in holds.sections.items()}
        print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB; containers, entries "
              f"{sections}; read in {cold:.3f} s, again in {warm:.3f} s; max RSS grew "
              f"{grown / 1024:.1f} MiB")
        print(f"  {holds.describe()}")
        print("  runs on " + ", ".join(f"{a}.{b}: {fatbin.runnable(holds, (a, b)).by}"
                                       for a, b in SMS))
        compressed = sum(e.compressed for e in holds.runtime_entries)
        print(f"  compressed entries {compressed} of {len(holds.runtime_entries)}")
        if path.name in compare:
            try:
                sass, ptx, took = _cuobjdump(path)
            except (OSError, subprocess.TimeoutExpired) as exc:
                print(f"  cuobjdump: {exc}")
                continue
            agree = sass == set(holds.sass) and ptx == set(holds.ptx)
            print(f"  cuobjdump ({took:.1f} s): SASS {sorted(sass)} PTX {sorted(ptx)}: "
                  f"{'AGREES' if agree else 'DIFFERS'}")


def inspect(paths: list[Path]) -> None:
    """What a file's fatbin sections hold, entry kind by kind, and how many container magics
    the whole file has (a library may carry fatbins outside .nv_fatbin, loaded at run time)."""
    import collections
    import mmap
    for path in paths:
        holds = fatbin.read(path)
        if holds is None:
            print(f"{path.name}: no fatbin section")
            continue
        for name, containers in holds.sections.items():
            kinds = collections.Counter(e.name for c in containers for e in c)
            print(f"{path.name} {name}: {len(containers)} containers: {dict(sorted(kinds.items()))}")
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            magic, at, count = fatbin.FATBIN_MAGIC.to_bytes(4, "little"), 0, 0
            while (at := m.find(magic, at)) >= 0:
                count, at = count + 1, at + 4
        in_sections = sum(len(c) for c in holds.sections.values())
        print(f"  container magics in the whole file: {count}; in its fatbin sections: {in_sections}")
        sections = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                                  check=False).stdout
        print("  " + " ".join(line.split("]")[1].split()[0] for line in sections.splitlines()
                              if "]" in line and line.split("]")[1].split()))


def launch(cudart: str, objects: list[Path]) -> None:
    """Each object's kernel launched for real on GPU 0 through the CUDA runtime."""
    rt = ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
    rt.cudaGetErrorString.restype = ctypes.c_char_p
    for path in objects:
        lib = ctypes.CDLL(str(path))
        ptr = ctypes.c_void_p()
        assert rt.cudaMalloc(ctypes.byref(ptr), 4096) == 0
        rt.cudaMemset(ptr, 0, 4096)
        launched = lib.gpurl_launch(ptr, 1024)
        synced = rt.cudaDeviceSynchronize()
        host = (ctypes.c_float * 1024)()
        rt.cudaMemcpy(host, ptr, 4096, 2)
        rt.cudaFree(ptr)
        holds = fatbin.read(path)
        verdict = fatbin.runnable(holds, (9, 0)) if holds else None
        print(f"{path.name}: reader: {holds.describe() if holds else '-'}; on 9.0: {verdict}")
        print(f"  launch -> {launched} {rt.cudaGetErrorString(launched).decode()!r}; "
              f"sync -> {synced} {rt.cudaGetErrorString(synced).decode()!r}; x[5] = {host[5]}")


if __name__ == "__main__":
    if sys.argv[1] == "inspect":
        inspect([Path(p) for p in sys.argv[2:]])
    elif sys.argv[1] == "all":
        from gpurl_tasks.gpu import check
        found = check.scan([Path(p) for p in sys.argv[2:]])
        survey([p for p, _ in found.holds], {p.name for p, _ in found.holds})
    elif sys.argv[1] == "survey":
        survey([Path(p) for p in sys.argv[3:]], set(sys.argv[2].split(",")))
    else:
        launch(sys.argv[2], [Path(p) for p in sys.argv[3:]])
