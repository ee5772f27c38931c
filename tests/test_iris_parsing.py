"""Parsing every iris CLI variant's output, from recorded outputs (tests/data/iris/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.cluster.iris import (
    ABSENT,
    ClusterTarget,
    IrisOutputError,
    JobSpec,
    StateCommand,
    choose_state_commands,
    is_not_found,
    job_run_argv,
    parse_command_list,
    parse_job_id,
    parse_list_json,
    parse_query_csv,
    parse_summary_json,
    query_sql,
)
from gpurl_tasks.redact import Secret

DATA = Path(__file__).parent / "data" / "iris"
JOB = "/alice/gpurl-kaniko-0123abc"
# Jobs in the outputs recorded from a real controller (record_real.py.txt).
REAL_FAILED = "/root/rec-fail3"
REAL_KILLED = "/root/rec-hog"
REAL_SUBMITTED = "/root/gpurl-kaniko-0123abc"  # record_job_run.py.txt


def read(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(("name", "state", "exit_code"), [
    ("summary-pending.json", "pending", None),
    ("summary-running.json", "running", None),
    ("summary-succeeded.json", "succeeded", 0),
    ("summary-failed.json", "failed", 3),
    ("summary-killed.json", "killed", 0),
    ("summary-timeout.json", "failed", 0),
])
def test_summary_json(name: str, state: str, exit_code: int | None) -> None:
    obs = parse_summary_json(read(name))
    assert (obs.state, obs.exit_code) == (state, exit_code)


def test_summary_failed_carries_the_error() -> None:
    assert parse_summary_json(read("summary-failed.json")).error == "Exit code: 3. stderr: err-line"
    assert parse_summary_json(read("summary-timeout.json")).error == "Execution timeout exceeded"


def test_summary_exit_code_is_the_tasks_not_the_jobs() -> None:
    """A real controller reports the job-level exit_code as 0 for a failed job."""
    data = json.loads(read("summary-failed.json"))
    assert data["exit_code"] == 0 and data["tasks"][0]["exit_code"] == 3
    assert parse_summary_json(read("summary-failed.json")).exit_code == 3


@pytest.mark.parametrize(("name", "job", "state", "exit_code"), [
    ("list-running.json", JOB, "running", None),
    ("list-failed.json", REAL_FAILED, "failed", 3),
    ("list-killed.json", REAL_KILLED, "killed", 0),
    ("list-empty.json", JOB, ABSENT, None),
])
def test_list_json(name: str, job: str, state: str, exit_code: int | None) -> None:
    """A real `job list` says exit_code 0 for a failed job: the code is read from its error."""
    obs = parse_list_json(read(name), job)
    assert (obs.state, obs.exit_code) == (state, exit_code)
    if state == "failed":
        assert obs.submitted_ms and obs.submitted_ms > 1_700_000_000_000


def test_list_json_only_matches_the_exact_job() -> None:
    """`--prefix` also returns /alice/gpurl-kaniko-0123abc-old; only the exact id counts."""
    obs = parse_list_json(read("list-running.json"), JOB)
    assert obs.state == "running" and obs.submitted_ms == 1790000000000
    assert parse_list_json(read("list-running.json"), JOB + "-other").state == ABSENT


@pytest.mark.parametrize(("name", "state", "exit_code"), [
    ("query-running.csv", "running", None),
    ("query-succeeded.csv", "succeeded", 0),
    ("query-failed.csv", "failed", 3),
    ("query-unschedulable.csv", "unschedulable", None),
    ("query-empty.csv", ABSENT, None),
])
def test_query_csv(name: str, state: str, exit_code: int | None) -> None:
    obs = parse_query_csv(read(name))
    assert (obs.state, obs.exit_code) == (state, exit_code)


@pytest.mark.parametrize("parse", [parse_summary_json, lambda t: parse_list_json(t, JOB),
                                   parse_query_csv])
@pytest.mark.parametrize("name", ["garbage.html", "summary-truncated.json"])
def test_garbage_is_an_output_error(parse: object, name: str) -> None:
    with pytest.raises(IrisOutputError):
        parse(read(name))  # type: ignore[operator]


def test_unknown_state_is_an_output_error() -> None:
    with pytest.raises(IrisOutputError, match="unknown job state"):
        parse_summary_json('{"state": "exploded"}')


def test_not_found_detection() -> None:
    assert is_not_found(read("summary-not-found.stderr"))
    assert not is_not_found(read("transient-connection-refused.stderr"))


def test_detects_the_pinned_release_commands() -> None:
    chosen = choose_state_commands(parse_command_list(read("job-help-0.2.35.txt")),
                                   parse_command_list(read("help-0.2.35.txt")))
    assert chosen == (StateCommand.SUMMARY, StateCommand.LIST, StateCommand.QUERY)


def test_query_sql_quotes_the_job_id() -> None:
    assert query_sql("/a/b'c").endswith("WHERE job_id = '/a/b''c'")


def test_parse_job_id_reads_what_the_pinned_release_prints() -> None:
    """`job run --no-wait` of the pinned release, recorded (record_job_run.py.txt): the id
    alone on stdout, and a `Job submitted: ID` log line on stderr among lines that hold
    other slash-separated text (the controller URL)."""
    out, err = read("job-run-no-wait.stdout"), read("job-run-no-wait.stderr")
    assert "http://127.0.0.1:" in err
    for text in (out, err, out + "\n" + err):  # submit reads stdout + stderr
        assert parse_job_id(text, "gpurl-kaniko-0123abc") == REAL_SUBMITTED
    assert parse_job_id(out, "kaniko-0123abc") is None  # a name's tail is another job
    assert parse_job_id(out, "gpurl-kaniko-0123ab") is None
    assert parse_job_id("nothing here", "gpurl-kaniko-0123abc") is None


@given(st.text(min_size=8, max_size=40, alphabet=st.characters(min_codepoint=33,
                                                               max_codepoint=126)))
def test_redacted_argv_never_contains_the_token(suffix: str) -> None:
    token = "tok_" + suffix
    spec = JobSpec(cluster=ClusterTarget(name="c"), task_image="img", cpu=48, memory="512GB", disk="400GB",
                   job_name="j", max_retries=0, timeout=1, env=(("DOCKER_TOKEN", Secret(token)),),
                   command=("true",))
    shown = job_run_argv(spec, reveal=False)
    assert not any(token in arg for arg in shown)
    assert job_run_argv(spec, reveal=True)[shown.index("DOCKER_TOKEN") + 1] == token


def test_cluster_target_precedence() -> None:
    """A --cluster flag wins, then the configured controller URL, then the cluster name."""
    url = "http://127.0.0.1:18765"
    assert ClusterTarget.resolve(name="cw", controller_url=url, flag="other").args == (
        "--cluster=other",)
    assert ClusterTarget.resolve(name="cw", controller_url=url, flag=None).args == (
        f"--controller-url={url}",)
    assert ClusterTarget.resolve(name="cw", controller_url="", flag=None).args == ("--cluster=cw",)


def test_each_variant_runs_on_its_own_cluster() -> None:
    """cluster.name is the variant's: the multiarch profile's gb200 job goes to the GB200
    cluster, its h100 job to the profile's; a --cluster flag still wins for either. (The
    pinned iris has no platform or node-selector flag for `job run`: the cluster is the
    only placement there is, and the script checks the node's `uname -m` itself.)"""
    from gpurl_tasks.cluster.jobs import cluster_target
    from gpurl_tasks.config import load_config
    from tests.conftest import REPO_ROOT

    def target(variant: str, flag: str | None = None) -> tuple[str, ...]:
        config = load_config(REPO_ROOT, profile="multiarch", variant=variant, env={})
        return cluster_target(config, flag).args

    assert target("gb200") == ("--cluster=cw-us-east-08a",)
    assert target("h100") == ("--cluster=cw-us-east-02a",)
    assert target("gb200", "elsewhere") == ("--cluster=elsewhere",)
