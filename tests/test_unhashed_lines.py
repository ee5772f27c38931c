"""The slice line of a registry package as its index served it: hashed only when every
artifact is, one pinned requirement either way, and never refused for a missing hash.

The lock texts are written here, as uv writes them for an index that serves hashes for some
files and not others (a mix the loopback index of test_lock_truth.py does not produce:
uv records what each file entry of the index page says)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement

from gpurl_tasks.plan.lock import parse_lock
from gpurl_tasks.plan.slices import render_slice, slice_line

INDEX = "https://download-r2.pytorch.org/whl/cu132"
MACHINES = ("x86_64", "aarch64", "win_amd64")


def _lock(hashes: list[str | None], upload: bool) -> str:
    wheels = []
    for machine, digest in zip(MACHINES, hashes, strict=False):
        fields = [f'url = "{INDEX}/torch-2.13.0%2Bcu132-cp312-cp312-manylinux_2_28_{machine}.whl"']
        if digest is not None:
            fields.append(f'hash = "sha256:{digest}"')
        if upload:
            fields.append('upload-time = "2026-09-14T10:00:00Z"')
        wheels.append("{ " + ", ".join(fields) + " }")
    return f'''version = 1
revision = 3
requires-python = "==3.12.*"

[[package]]
name = "app"
version = "0.1.0"
source = {{ virtual = "." }}
dependencies = [{{ name = "torch" }}]

[[package]]
name = "torch"
version = "2.13.0+cu132"
source = {{ registry = "{INDEX}" }}
wheels = [
    {", ".join(wheels)},
]
'''


@given(hashes=st.lists(st.one_of(st.none(), st.sampled_from(["ab" * 32, "cd" * 32])),
                       min_size=1, max_size=len(MACHINES)),
       upload=st.booleans())
def test_a_registry_line_is_hashed_only_when_every_file_is(hashes: list[str | None],
                                                            upload: bool) -> None:
    (pkg,) = [p for p in parse_lock(_lock(hashes, upload)).packages if p.name == "torch"]
    line = slice_line(pkg)
    assert line.hashed is all(hashes) and line.index == INDEX
    parsed = Requirement(line.requirement.split(" --hash=", 1)[0])
    assert parsed.name == "torch" and str(parsed.specifier) == "==2.13.0+cu132" and not parsed.url
    listed = sorted({f"sha256:{h}" for h in hashes if h}) if all(hashes) else []
    assert line.requirement.split(" --hash=")[1:] == listed
    assert f"--index-url {INDEX}\n" in render_slice([line])
