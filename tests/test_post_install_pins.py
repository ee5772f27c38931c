"""build.post-install pinned: `lock-post-install` resolves the requirements once, against the
lock's set, into each variant's pins file, and the plan installs the pins as its last slice.

The integration test runs gpurl as a user installs it (the wheel in a fresh virtualenv, outside
this checkout) on a scratch project (examples/multiarch, two variants on two machines), with
real uv resolving against real wheels served on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.installed import install, scratch_project, user_env
from gpurl_tasks.errors import PlanError
from gpurl_tasks.plan.postinstall import (
    PostInstallInputs,
    parse_compiled,
    read_pins,
    render_pins,
    stale_reason,
)
from gpurl_tasks.plan.slices import SliceLine
from tests.support.pyindex import make_wheel, serve_index

H1, H2 = "a" * 64, "b" * 64


def _inputs(**changes: object) -> PostInstallInputs:
    fields: dict[str, object] = {
        "requirements": ("tool-x==1.0",), "constraints": ("pyyaml==6.0.2", "torch @ https://x/t.whl"),
        "python": "3.11", "platform": "x86_64-manylinux_2_36", "index_url": "http://i/simple"}
    return PostInstallInputs(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_compiled_set_keeps_what_the_lock_lacks_each_with_its_hashes() -> None:
    """uv's continuation lines joined; a locked package (by any spelling) left out; a registry
    pin names the index, a git source carries no hash and no index."""
    text = (f"helper==1.0 \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}\n"
            f"PyYAML==6.0.2 \\\n    --hash=sha256:{H1}\n"
            "gitpkg @ git+https://example.com/g.git@0123456789abcdef0123456789abcdef01234567\n")
    lines = parse_compiled(text, _inputs())
    assert lines == (
        SliceLine(requirement=f"helper==1.0 --hash=sha256:{H1} --hash=sha256:{H2}",
                  index="http://i/simple", hashed=True),
        SliceLine(requirement="gitpkg @ git+https://example.com/g.git@"
                              "0123456789abcdef0123456789abcdef01234567", index=None, hashed=False))


def test_a_damaged_pins_line_is_refused_naming_the_task(tmp_path: Path) -> None:
    pins = tmp_path / "post-install.pins"
    pins.write_text("# resolved from: sha256:00\nhelper==1.0 --index-url http://evil\n")
    with pytest.raises(PlanError) as caught:
        read_pins(pins, "http://i/simple")
    assert "is not a pinned requirement" in caught.value.message
    assert caught.value.hint is not None and "lock-post-install" in caught.value.hint


@pytest.mark.parametrize("line", ["rich==$(whoami)", "rich @ ../../etc/passwd", "-e ./x",
                                  "rich==1.0 --index-url http://evil", "rich[`id`]==1.0",
                                  f"rich==1.0 --hash=sha256:{H1} ; touch /x"])
def test_a_hostile_pins_line_is_refused_never_passed_on(tmp_path: Path, line: str) -> None:
    """A pins line is one pinned requirement and its hashes: a shell word, a path, an option
    or anything after the hashes is an error, never a line of the slice uv reads."""
    pins = tmp_path / "post-install.pins"
    pins.write_text(f"# resolved from: sha256:00\n{line}\n")
    with pytest.raises(PlanError, match="is not a pinned requirement"):
        read_pins(pins, "http://i/simple")


_NAMES = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@given(st.dictionaries(_NAMES, st.from_regex(r"[0-9]{1,2}\.[0-9]{1,2}", fullmatch=True),
                       max_size=6))
def test_pins_read_back_as_written_under_the_digest_of_their_inputs(pinned: dict[str, str]) -> None:
    """render -> read gives the same lines (sorted) and the inputs' digest; the digest moves
    with every input."""
    import tempfile

    inputs = _inputs()
    lines = [SliceLine(requirement=f"{n}=={v} --hash=sha256:{H1}", index="http://i/simple",
                       hashed=True) for n, v in pinned.items()]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch, "post-install.pins")
        path.write_text(render_pins(inputs, lines, profile="p", variant="v"))
        digest, read = read_pins(path, "http://i/simple") or ("", ())
    assert digest == inputs.digest
    assert read == tuple(sorted(lines, key=lambda line: line.requirement))
    moved = [_inputs(requirements=("tool-x==1.1",)), _inputs(python="3.12"),
             _inputs(platform="aarch64-manylinux_2_36"), _inputs(index_url="")]
    assert len({inputs.digest, *(m.digest for m in moved)}) == 1 + len(moved)
    assert _inputs(constraints=("pyyaml==6.0.3",)).digest == inputs.digest  # a lock bump


def test_pins_go_stale_when_their_inputs_move_or_the_lock_takes_a_pinned_package() -> None:
    """A lock bump alone keeps them; the lock coming to hold a pinned package (any spelling)
    does not, nor a moved requirement, nor no post-install at all."""
    pinned = tuple(SliceLine(requirement=f"{name}==1.0 --hash=sha256:{H1}", index=None,
                             hashed=True) for name in ("Helper_Lib", "tool-x"))
    found = (_inputs().digest, pinned)
    assert stale_reason(found, _inputs(constraints=("pyyaml==6.0.3",))) is None
    assert stale_reason(found, _inputs(constraints=("helper-lib==1.0",))) == \
        "the lock now holds helper-lib"
    assert "moved since" in (stale_reason(found, _inputs(requirements=("tool-x==2",))) or "")
    assert stale_reason(found, None) == "build.post-install is empty"


def test_pins_go_stale_when_the_lock_drops_a_post_install_they_left_to_it() -> None:
    """A post-install the lock held was left out of the pins; a bump that drops it from the
    lock leaves it nowhere, so the pins are stale (the image would lack it)."""
    requirements = ("tool-x==1.0", "Shared.Lib==2.0")
    found = (_inputs(requirements=requirements).digest,
             (SliceLine(requirement=f"tool-x==1.0 --hash=sha256:{H1}", index=None, hashed=True),))
    held = _inputs(requirements=requirements, constraints=("pyyaml==6.0.2", "shared-lib==2.0"))
    dropped = _inputs(requirements=requirements, constraints=("pyyaml==6.0.2",))
    assert stale_reason(found, held) is None
    assert stale_reason(found, dropped) == "the lock no longer holds shared-lib, and the pins do not"


def test_the_resolution_reads_the_config_alone_not_the_shell_s_uv_settings() -> None:
    """uv's settings that would steer it (another index, a constraint, a strategy) are left
    out of its environment, everything else kept; its flags name the index, PyPI when the
    config names none, and no uv.toml is read."""
    from gpurl_tasks.plan.postinstall import DEFAULT_INDEX, compile_command, compile_environment

    shell = {"UV_EXTRA_INDEX_URL": "http://decoy", "UV_INDEX_URL": "http://decoy",
             "UV_INDEX": "d=http://decoy", "UV_CONSTRAINT": "c.txt", "UV_FIND_LINKS": "w",
             "UV_CACHE_DIR": "/c", "UV_SYSTEM_CERTS": "1", "PATH": "/bin", "HOME": "/root"}
    assert compile_environment(shell) == {"UV_CACHE_DIR": "/c", "UV_SYSTEM_CERTS": "1",
                                          "PATH": "/bin", "HOME": "/root"}
    argv = compile_command(_inputs(index_url=""), Path("r.in"), Path("c.txt"))
    assert "--no-config" in argv and argv[argv.index("--index-url") + 1] == DEFAULT_INDEX


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _gpurl(venv: Path, project: Path, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gpurl", *args], cwd=project, env={**user_env(venv), **(env or {})},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_the_installed_gpurl_pins_post_installs_once_and_a_new_release_does_not_move_them(
        tmp_path_factory: pytest.TempPathFactory, gpurl_wheel: Path) -> None:
    """Missing pins fail --check; lock-post-install writes each variant's (its machine's),
    from the configured index alone (not one the shell's UV_EXTRA_INDEX_URL adds; the lock's
    packages left out is the unit test's above); generate installs them as the last slice, and a newer release
    of a dependency on the index changes nothing until the requirements move, which makes the
    pins stale: one `error:` line naming the task, no traceback, nothing written."""
    venv = install(gpurl_wheel, tmp_path_factory.mktemp("installed") / "venv")
    project = scratch_project(tmp_path_factory.mktemp("project") / "project")
    wheels, port = tmp_path_factory.mktemp("wheels"), _free_port()
    make_wheel(wheels, "tool-x", "1.0", requires=["helper>=1"])
    make_wheel(wheels, "tool-x", "1.1", requires=["helper>=1"])
    make_wheel(wheels, "helper", "1.0")
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace('index-url = "http://127.0.0.1:5008/simple"',
                                         f'index-url = "http://127.0.0.1:{port}/simple"')
    pyproject.write_text(text.replace('venv = "/opt/multiarch/envs/rl"',
                                      'venv = "/opt/multiarch/envs/rl"\n'
                                      'post-install = ["tool-x==1.0 | import tool_x"]', 1))
    pins = {v: project / "docker" / "layers" / "multiarch" / v / "post-install.pins"
            for v in ("h100", "gb200")}

    decoys = tmp_path_factory.mktemp("decoys")
    make_wheel(decoys, "helper", "9.9")  # on an index the user's shell names, not the config
    with serve_index(wheels, tmp_path_factory.mktemp("index"), port=port), \
            serve_index(decoys, tmp_path_factory.mktemp("decoy-index")) as decoy:
        missing = _gpurl(venv, project, "lock-post-install", "--check")
        assert missing.returncode == 1 and missing.stdout.count(": missing:") == 2, missing
        written = _gpurl(venv, project, "lock-post-install", env={"UV_EXTRA_INDEX_URL": decoy})
        assert written.returncode == 0, written.stderr
    for variant, path in pins.items():
        body = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
        assert [ln.split(" --hash=")[0] for ln in body] == ["helper==1.0", "tool-x==1.0"], variant
        assert all(" --hash=sha256:" in ln for ln in body)

    make_wheel(wheels, "helper", "1.1")  # a newer release: a build-time resolution would take it
    with serve_index(wheels, tmp_path_factory.mktemp("index"), port=port):
        generated = _gpurl(venv, project, "generate")
        assert generated.returncode == 0, generated.stderr
        assert _gpurl(venv, project, "lock-post-install", "--check").returncode == 0
        kept = {v: path.read_text() for v, path in pins.items()}
        upgrade = _gpurl(venv, project, "lock-post-install", "--upgrade", "--dry-run", "--json")
        assert upgrade.returncode == 0, upgrade.stderr
        assert [v["state"] for v in json.loads(upgrade.stdout)["variants"]] == \
            ["would be written"] * 2  # an upgrade would take helper 1.1; nothing written
        assert {v: path.read_text() for v, path in pins.items()} == kept
    dockerfile = (project / "docker" / "Dockerfile.multiarch").read_text()
    assert "RUN uv pip install --no-deps --require-hashes -r /tmp/gpurl-layers/post-install.txt" \
        in dockerfile and "RUN uv pip install tool-x" not in dockerfile  # the slice, not a RUN
    (slice_file,) = (project / "docker" / "layers" / "multiarch" / "h100").glob("*-post-install.txt")
    assert "helper==1.0 --hash=sha256:" in slice_file.read_text()
    assert "helper==1.1" not in slice_file.read_text()

    pyproject.write_text(pyproject.read_text().replace("tool-x==1.0 |", "tool-x==1.1 |"))
    before = dockerfile
    stale = _gpurl(venv, project, "generate")
    assert stale.returncode != 0 and "Traceback" not in stale.stderr
    assert stale.stderr.startswith("error: ") and "post-install.pins is stale" in stale.stderr
    assert "hint: run `gpurl lock-post-install`" in stale.stderr  # as the installed tool says it
    assert (project / "docker" / "Dockerfile.multiarch").read_text() == before
    with serve_index(wheels, tmp_path_factory.mktemp("index"), port=port):
        again = _gpurl(venv, project, "lock-post-install", "--variant", "h100", "--json")
    assert again.returncode == 0, again.stderr
    assert "helper==1.1 --hash=" in pins["h100"].read_text()  # resolved anew: the newer one
