"""A deterministic synthetic uv.lock: thousands of packages, a few dozen heavy CUDA-like wheels.

The real locks have ~400 packages; the synthetic one shows how the planner scales. Seeded
`random.Random` only, so the same arguments give the same text byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import random

__all__ = ["SYNTH_EXTRA", "synthetic_lock_text"]

SYNTH_EXTRA = "gpu"  # the root extra that pulls in the heavy packages
_MARKERS = (None, None, None, "sys_platform == 'linux'", "sys_platform == 'darwin'",
            "python_full_version >= '3.12'", "platform_machine == 'aarch64'")


def _hash(*parts: object) -> str:
    return "sha256:" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _dep(name: str, marker: str | None) -> str:
    return "{ " + f"name = {json.dumps(name)}" + (f", marker = {json.dumps(marker)}" if marker else "") + " }"


def synthetic_lock_text(*, packages: int = 5000, heavy: int = 50, seed: int = 0) -> str:
    """uv.lock text: `packages` registry packages (of which `heavy` are 100 MB-1.5 GB), a root.

    Light packages depend on a few later packages (a DAG, some edges behind markers that do
    not hold on linux/x86_64); the root depends on every third and, through the extra
    `gpu`, on every heavy package. Heavy wheels carry linux and macOS tags so wheel selection
    has real work to do.
    """
    if not 0 <= heavy <= packages:
        raise ValueError(f"heavy ({heavy}) must be between 0 and packages ({packages})")
    rng = random.Random(seed)
    names = [f"pkg-{i:05d}" for i in range(packages)]
    heavy_names = set(rng.sample(names, heavy))
    out = ["version = 1", "revision = 3", 'requires-python = ">=3.12"', ""]
    for i, name in enumerate(names):
        version = f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
        stem = name.replace("-", "_")
        out += ["[[package]]", f'name = "{name}"', f'version = "{version}"',
                'source = { registry = "https://pypi.org/simple" }']
        later = names[i + 1:i + 400]
        deps = sorted(set(rng.sample(later, min(len(later), rng.randint(0, 4)))))
        if deps:
            out.append("dependencies = [")
            out += [f"    {_dep(d, rng.choice(_MARKERS))}," for d in deps]
            out.append("]")
        if name in heavy_names:
            size = rng.randint(100 * 10**6, 1500 * 10**6)
            files = [(f"{stem}-{version}-cp312-cp312-manylinux_2_28_x86_64.whl", size),
                     (f"{stem}-{version}-cp312-cp312-manylinux_2_28_aarch64.whl", size - 1000),
                     (f"{stem}-{version}-cp312-cp312-macosx_11_0_arm64.whl", size // 3)]
        else:
            files = [(f"{stem}-{version}-py3-none-any.whl", rng.randint(10**4, 2 * 10**6))]
        out.append("wheels = [")
        out += [f'    {{ url = "https://files.example/{fn}", hash = "{_hash(fn)}", size = {sz} }},'
                for fn, sz in files]
        out += ["]", ""]
    out += ["[[package]]", 'name = "synth-root"', 'version = "0.1.0"', 'source = { editable = "." }',
            "dependencies = ["]
    out += [f"    {_dep(n, None)}," for n in names[::3] if n not in heavy_names]
    out += ["]", "", "[package.optional-dependencies]",
            f"{SYNTH_EXTRA} = [" + ", ".join(_dep(n, None) for n in sorted(heavy_names)) + "]", ""]
    return "\n".join(out)
