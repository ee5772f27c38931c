"""Issue 42: the CLI contract holds at its edges, each row run as a user types it.

invoke's own parse errors, a closed pipe, SIGTERM, `watch`'s bad input and missing iris, the
nox sessions and `gpurl --version`: the real `invoke`, `gpurl` and `nox` commands in a
subprocess. The one stand-in is the iris program of `tests/test_watch.py` (recorded outputs:
no iris cluster runs here).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpurl_tasks.errors import ExitCode
from tests.support.tasks_runner import REPO_ROOT, run_task

BIN = Path(sys.executable).parent


def _one_error(done: subprocess.CompletedProcess[str], *needles: str, as_json: bool) -> dict:
    """Exit 2, one `error:` line and its hint on stderr, no traceback; under --json exactly
    one JSON object on stdout saying the same (else nothing on stdout)."""
    assert done.returncode == ExitCode.ERROR, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "No idea" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("  hint: "), done.stderr
    assert sum(line.startswith("error:") for line in lines) == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr
    if not as_json:
        assert done.stdout == ""
        return {}
    failure = json.loads(done.stdout)
    assert failure == {"error": lines[0].removeprefix("error: "),
                       "hint": lines[1].removeprefix("  hint: "), "exit_code": 2}
    return failure


PARSE_ERRORS = {
    "unknown flag": (["plan", "--bogus"], ["plan has no flag --bogus", "invoke plan --help"]),
    "close flag": (["plan", "--profil", "demo"], ["did you mean --profile?"]),
    "unknown task": (["plann"], ["no task 'plann'", "did you mean 'plan'?"]),
    "unknown core flag": (["--bogus"], ["invoke has no flag --bogus", "invoke --help lists"]),
    "missing value": (["plan", "--cap"], ["--cap needs a value", "e.g. 4GB"]),
    "missing positional": (["diff", "a"], ["diff needs SECOND", "invoke diff FIRST SECOND"]),
    "bad integer": (["watch", "/a/b", "--interval", "abc"],
                    ["--interval must be a whole number, not 'abc'", "e.g. --interval 60"]),
    "a duration is seconds": (["watch", "/a/b", "--max-duration", "1h"], ["--max-duration"]),
}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "human"])
@pytest.mark.parametrize("case", sorted(PARSE_ERRORS))
def test_invoke_parse_errors_follow_the_contract(case: str, as_json: bool) -> None:
    """The rows `plan --bogus --json`, `plann --json`, `plan --json --cap`, `diff a --json`,
    `watch /a/b --interval abc`, `--max-duration 1h`: exit 2, one line and a hint, one JSON
    object (--json first, as in `plan --json --cap`, or last)."""
    argv, needles = PARSE_ERRORS[case]
    args = [argv[0], "--json", *argv[1:]] if as_json else argv
    _one_error(run_task(*args), *needles, as_json=as_json)


def test_the_gpurl_command_is_the_same_program_with_gpurl_s_version() -> None:
    """`gpurl --version` prints gpurl's version (the installed distribution's), not invoke's;
    `gpurl TASK` runs the task and refuses bad input in the same words as `invoke TASK`."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}

    def gpurl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "gpurl"), *args], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    shown = gpurl("--version")
    assert shown.returncode == 0 and shown.stdout == f"gpurl {importlib.metadata.version('gpurl')}\n"
    assert "Invoke" not in shown.stdout
    assert gpurl("plan", "--help").returncode == 0
    failure = _one_error(gpurl("plann", "--json"), "gpurl --list", as_json=True)
    assert "did you mean 'plan'?" in failure["hint"]
    _one_error(gpurl("--bogus"), "no flag --bogus", as_json=False)
    planned = gpurl("plan", "--profile", "demo", "--json")
    assert planned.returncode == 0 and "variants" in json.loads(planned.stdout)


# --- a closed pipe -------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["plan | head -1", "plan --json | head -c 100",
                                      "plan --profile demo | true"])
def test_a_closed_pipe_ends_quietly(pipeline: str) -> None:
    """The reader closes stdout early: exit 0 or 141 (as `yes | head -1`), nothing on stderr
    but progress, never a BrokenPipeError traceback or an "internal error" (70)."""
    task, _, reader = pipeline.partition(" | ")
    done = subprocess.run(["bash", "-c", f"{BIN}/invoke {task} | {reader}; "
                           'echo "status=${PIPESTATUS[0]}" >&2'], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[-1] in ("status=0", "status=141"), done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert "internal error" not in done.stderr and "Exception ignored" not in done.stderr


def test_a_pipe_closed_before_the_first_write_is_141() -> None:
    """Nothing read at all: the first write fails, the task ends with PIPE_CLOSED."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([str(BIN / "invoke"), "plan", "--profile", "demo"], cwd=REPO_ROOT,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == ExitCode.PIPE_CLOSED, done.stderr
    assert done.stderr == ""


def test_invokes_own_output_into_a_closed_pipe_is_141() -> None:
    """`invoke --list | head`: invoke prints the list itself, through the same handler."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([str(BIN / "invoke"), "--list"], cwd=REPO_ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == ExitCode.PIPE_CLOSED, done.stderr
    assert done.stderr == ""


# --- watch: bad input, no iris, SIGTERM ----------------------------------------------------


@pytest.mark.parametrize(("flag", "value"), [("--interval", "0"), ("--max-duration", "-1")])
def test_watch_refuses_seconds_that_are_not_positive(flag: str, value: str) -> None:
    failure = _one_error(run_task("watch", "/a/b", flag, value, "--json"),
                         f"{flag} must be a positive number of seconds", as_json=True)
    assert failure["hint"]


def test_watch_without_iris_is_a_missing_tool(tmp_path: Path) -> None:
    """Exit 2, as `invoke kill` gives, not 3 (a watch that could not conclude)."""
    done = run_task("watch", "/alice/job", "--json",
                    env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    failure = _one_error(done, "couldn't find iris in PATH", as_json=True)
    assert "GPURL_IRIS" in failure["hint"]


@pytest.mark.integration
def test_sigterm_on_watch_prints_the_json_object_and_a_documented_code(tmp_path: Path) -> None:
    """SIGTERM while the job is running: one JSON object, exit TERMINATED (143, in the
    README's table), the job untouched (the stand-in is never asked to kill it)."""
    from tests.test_watch import DATA, JOB, STANDIN_IRIS

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "iris").write_text(STANDIN_IRIS)
    (bindir / "iris").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "IRIS_DATA": str(DATA),
           "IRIS_COUNTER": str(tmp_path / "n"), "IRIS_LOGS_ARGS": str(tmp_path / "logs"),
           "IRIS_STATES": " ".join(["summary-running.json"] * 100)}
    env = {k: v for k, v in env.items() if not k.startswith("GPURL_")}
    watcher = subprocess.Popen([str(BIN / "invoke"), "watch", JOB, "--interval", "1", "--json"],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "n").exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # until the first state poll: the watch is under way
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == ExitCode.TERMINATED == 143, err
    failure = json.loads(out)
    assert failure["exit_code"] == 143 and "terminated (SIGTERM)" in failure["error"]
    assert f"stopped watching {JOB}; the job was not touched" in failure["error"]
    assert "Traceback" not in err and not (tmp_path / "logs").exists()


def test_sigterm_while_the_command_still_imports_ends_as_a_task_would() -> None:
    """The handler is in place from gpurl's first import in a command, not from the task's
    start (a quarter second later): SIGTERM then is exit 143 and, under --json, the one
    object. The signal is sent at the import itself, so no timing decides the test."""
    code = ("import os, signal, sys, time; sys.argv = ['gpurl', 'plan', '--json']; "
            "import gpurl_tasks; os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == ExitCode.TERMINATED, done
    assert json.loads(done.stdout) == {"error": "terminated (SIGTERM)", "hint": None,
                                       "exit_code": 143}
    assert done.stderr == "terminated (SIGTERM)\n"


def test_serve_index_stopped_by_sigterm_exits_143(tmp_path: Path) -> None:
    """The README's table: a server stopped by SIGTERM is 143 (Ctrl-C: 130), never 0, so a
    supervisor tells a stop from a clean end. Real server on a free loopback port."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")}
    env["GPURL_BUILD_INDEX_URL"] = f"http://127.0.0.1:{port}/simple"
    server = subprocess.Popen([sys.executable, "-m", "gpurl_tasks", "serve-index",
                               "--directory", str(tmp_path)], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None and "serving" in server.stderr.readline()
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == ExitCode.TERMINATED, err
    assert err.startswith("index server stopped: ") and "Traceback" not in err


# --- the nox sessions ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("session", [["verify-layers", "--", "not a ref", "--json"],
                                     ["pin", "--", "--ref", "not a ref", "--json"]])
def test_the_nox_sessions_exit_with_the_task_s_code_and_one_object(session: list[str]) -> None:
    """`nox -s verify-layers -- 'not a ref' --json` and `nox -s pin`: the task's exit 2 (nox
    said 1) and exactly one JSON object on stdout (the `error:` line stays on stderr)."""
    done = subprocess.run([str(BIN / "nox"), "-s", *session], cwd=REPO_ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GPURL_")},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == ExitCode.ERROR, (done.stdout, done.stderr)
    failure = json.loads(done.stdout)
    assert failure["exit_code"] == 2 and "not a ref" in failure["error"]
    assert "error: " in done.stderr and "Traceback" not in done.stderr


# --- validation in one place ---------------------------------------------------------------


@pytest.mark.parametrize("argv", [["build", "--memory", ""], ["build", "--cluster", ""],
                                  ["plan", "--profile", ""], ["plan", "-p", " "],
                                  ["watch", ""], ["kill", "/a/b", "--cluster", ""]],
                         ids=lambda argv: " ".join(argv))
def test_an_empty_value_is_an_error_never_the_default(argv: list[str]) -> None:
    """`--memory ''`, `--cluster ''`, `plan --profile ''`: refused as `--variant ''` is."""
    shown = next((a for a in argv[1:] if a.startswith("-")), "JOB")
    failure = _one_error(run_task(*argv, "--dry-run" if argv[0] == "build" else "--json",
                                  *(["--json"] if argv[0] == "build" else [])),
                         f"{shown} is empty" if shown != "-p" else "--profile is empty",
                         as_json=True)
    assert failure["hint"]


@pytest.mark.parametrize(("flag", "variable"), [("--disk", "GPURL_CLUSTER_DISK"),
                                                ("--memory", "GPURL_CLUSTER_MEMORY")])
def test_a_flag_is_validated_like_its_variable(flag: str, variable: str) -> None:
    """`build --disk 4XB --dry-run` is refused as GPURL_CLUSTER_DISK=4XB is, before any
    command is printed (it once reached the iris argv)."""
    by_flag = run_task("build", flag, "4XB", "--dry-run", "--json")
    by_variable = run_task("build", "--dry-run", "--json", env={variable: "4XB"})
    for done in (by_flag, by_variable):
        failure = _one_error(done, "must be a size like 512GB", "'4XB'", as_json=True)
        assert "commands" not in failure
    assert json.loads(by_flag.stdout)["error"].split(" (in ")[0] == \
        json.loads(by_variable.stdout)["error"].split(" (in ")[0]


def test_an_unknown_gpurl_variable_is_a_warning_with_the_closest_one() -> None:
    done = run_task("plan", "--profile", "demo", "--json", env={"GPURL_LAYERS_CAPP": "2GB"})
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    warnings = [line for line in done.stderr.splitlines() if "GPURL_LAYERS_CAPP" in line]
    assert warnings == ["warning: GPURL_LAYERS_CAPP is not a gpurl variable (ignored); "
                        "did you mean GPURL_LAYERS_CAP?"]


def test_every_variable_gpurl_reads_draws_no_warning() -> None:
    """Each config key's variable and each machine variable is known (no false alarm)."""
    from gpurl_tasks import config

    read = {config.environment_variable(k): "x" for k in config._known_keys()}
    read |= dict.fromkeys(config.OTHER_VARIABLES, "x")
    assert config.unknown_variables(read) == []
    assert config.unknown_variables({**read, "GPURL_ZZZ": "1", "HOME": "/"}) == [("GPURL_ZZZ", None)]


def test_a_misspelled_top_level_key_is_named(tmp_path: Path) -> None:
    """`defualt-profile = ...` names the key, not "unknown profile 'default'"."""
    from gpurl_tasks.config import load_config
    from gpurl_tasks.errors import ConfigError

    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpurl]\ndefualt-profile = "demo"\n\n[tool.gpurl.profiles.demo]\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert "'defualt-profile'" in info.value.message
    assert info.value.hint == "did you mean 'default-profile'?"


@pytest.mark.parametrize("repository", ["UPPER/x", "a//b", "/lead", "trail/", "a b"])
def test_a_repository_name_is_checked_where_it_is_set(repository: str) -> None:
    """`GPURL_REGISTRY_REPOSITORY=UPPER/x build --profile demo --dry-run`: exit 2 before any
    `docker push 127.0.0.1:5005/UPPER/x:...` is printed (verify-layers refused it after)."""
    done = run_task("build", "--profile", "demo", "--dry-run", "--json",
                    env={"GPURL_REGISTRY_REPOSITORY": repository})
    failure = _one_error(done, "registry.repository must be a repository name", as_json=True)
    assert "$GPURL_REGISTRY_REPOSITORY" in failure["error"]


# --- dry runs: every printed command runs; a cluster dry run without cluster access --------

NO_ACCESS = {"KUBECONFIG": "", "GHCR_TOKEN": "", "HOME": "/nonexistent"}  # and no `gh` on PATH


def _without_access() -> dict[str, str]:
    return {**NO_ACCESS, "PATH": os.pathsep.join([str(BIN), "/usr/bin", "/bin"])}


def _gpurl_commands(found: object) -> list[list[str]]:
    """Every argv in a dry run's JSON that is a gpurl command (`invoke TASK ...`)."""
    if isinstance(found, dict):
        return [argv for value in found.values() for argv in _gpurl_commands(value)]
    if isinstance(found, list):
        if found and all(isinstance(a, str) for a in found):
            return [found] if found[0] in ("invoke", "gpurl") else []
        return [argv for value in found for argv in _gpurl_commands(value)]
    return []


def _parses(argv: list[str]) -> None:
    """`argv` parses against the tasks' own parser (the flags `invoke` would accept)."""
    from invoke.parser import Parser

    import tasks

    Parser(contexts=tasks.ns.to_contexts()).parse_argv(argv[1:])


def _dry_runs() -> list[list[str]]:
    from gpurl_tasks.config import load_config, load_profile_names

    runs = []
    for profile in load_profile_names(REPO_ROOT):
        runs.append(["build", "--profile", profile, "--dry-run", "--json"])
        if load_config(REPO_ROOT, profile=profile, env={}).backend == "local":
            runs.append(["demo", "--profile", profile, "--dry-run", "--json"])
    return runs


@pytest.mark.slow
def test_every_gpurl_command_a_dry_run_prints_parses() -> None:
    """Each `invoke ...` a dry run of every profile prints (`build --dry-run`, and `demo
    --dry-run` for the local profiles) has flags its task takes: `setup-local ... --variant
    standard` once failed "No idea what '--variant' is!"."""
    from invoke.exceptions import ParseError

    printed = []
    for run in _dry_runs():
        done = run_task(*run, env=_without_access(), timeout=300)
        assert done.returncode == 0, (run, done.stderr)
        printed += _gpurl_commands(json.loads(done.stdout))
    assert any(argv[1] == "setup-local" and "--variant" in argv for argv in printed), printed
    for argv in printed:
        _parses(argv)
    with pytest.raises(ParseError):  # the check would have caught the old line
        _parses(["invoke", "setup-local", "--profile", "demo", "--varient", "standard"])


@pytest.mark.parametrize("profile", ["gpu-rl", "skyrl"])
def test_a_cluster_dry_run_without_cluster_access_warns_and_the_build_refuses(
        profile: str) -> None:
    """No kubeconfig, no token: the dry run prints the iris command with each missing
    prerequisite as a warning line and in `warnings`, exit 0; the real build still refuses."""
    dry = run_task("build", "--profile", profile, "--dry-run", "--json", env=_without_access())
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert out["dry_run"] is True and out["commands"][0][0] == "iris"
    assert [w.split(":")[0] for w in out["warnings"]] == [
        "KUBECONFIG is not set", "no registry token for ghcr.io"]
    warned = [line for line in dry.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [f"warning: {w}" for w in out["warnings"]]
    real = run_task("build", "--profile", profile, "--json", env=_without_access())
    failure = _one_error(real, "KUBECONFIG is not set", as_json=True)
    assert "export KUBECONFIG" in failure["hint"]


# --- help ----------------------------------------------------------------------------------


def test_diff_ref_help_shows_the_help_and_runs_nothing() -> None:
    """`diff REF --help` once ran the diff with "--help" as the second image."""
    done = run_task("diff", "127.0.0.1:9/x:a", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: inv[oke] [--core-opts] diff [--options] FIRST SECOND")
    assert "Options:" in done.stdout and "error" not in done.stderr


@pytest.mark.parametrize(("task", "shown"), [
    ("watch", ["--interval=INT                seconds between state polls (default: 60)",
               "[--options] JOB "]),
    ("demo", ["(default: prebuilt-wheelhouse)"]),
    ("setup-kaniko", ["(default: upstream,fork)"]),
])
def test_help_shows_defaults_and_positional_arguments(task: str, shown: list[str]) -> None:
    """Each flag with a default says it; the usage line names the positional arguments."""
    import inspect

    import tasks

    done = run_task(task, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for needle in shown:
        assert " ".join(needle.split()) in text, done.stdout
    body = tasks.ns[task].body
    for name, param in inspect.signature(body).parameters.items():
        if param.default not in (None, False, "", inspect.Parameter.empty):
            assert f"(default: {param.default})" in text, (name, done.stdout)


# --- smaller messages ----------------------------------------------------------------------


def test_setup_local_dry_run_counts_pins_apart_from_build_requirements(tmp_path: Path) -> None:
    """An empty cache: "would download N of M pins and K of L build requirements", each part
    at most its whole (it said "would download 20 of 15 pins")."""
    import re

    done = run_task("setup-local", "--profile", "demo", "--dry-run", "--json",
                    env={"GPURL_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    step = next(s for s in json.loads(done.stdout)["steps"] if s["name"] == "package index")
    counts = re.fullmatch(r"would download (\d+) of (\d+) pins and (\d+) of (\d+) build "
                          r"requirements into .*", step["detail"])
    assert counts, step
    pins, of_pins, reqs, of_reqs = map(int, counts.groups())
    assert 0 < pins <= of_pins and 0 < reqs <= of_reqs


def test_setup_kaniko_refuses_a_missing_source_archive_before_installing_go(
        tmp_path: Path) -> None:
    """The archives are checked first: no Go toolchain is installed for a build that cannot
    start (it installed 254 MB of Go, then failed)."""
    cache = tmp_path / "cache"
    done = run_task("setup-kaniko", "--profile", "demo", "--json", timeout=300,
                    env={"GPURL_CLUSTER_SOURCE_ARCHIVES": str(tmp_path / "none"),
                         "GPURL_CACHE_DIR": str(cache)})
    failure = _one_error(done, "source archive", "is missing", as_json=True)
    assert "cluster.source-archives" in failure["hint"]
    installed = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert installed == [], installed[:5]
