"""The job's attestation step's own rules (attest/tool.py), outside a registry: the commit its
provenance names, and bad input as one error line. Its registry half runs against real crane
and registries in tests/test_job_attest.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.attest.tool import main, provenance_commit
from gpurl_tasks.values import source_commit, source_id

hexes = st.text("0123456789abcdef", min_size=12, max_size=12)
commits = st.text("0123456789abcdef", min_size=40, max_size=40)


@given(commits, st.integers(7, 40), st.none() | hexes)
def test_the_provenance_names_the_full_commit_with_the_trees_edits(
        full: str, short: int, diff: str | None) -> None:
    """What `invoke build` passes (GIT_COMMIT, the tag's source id) gives the source id of the
    full commit: the project's one spelling (values.source_id), the edits' hash kept."""
    tag_id = source_id(full[:short], diff)
    assert provenance_commit(full, tag_id) == source_id(full, diff)
    if diff:  # the edits are the tag's, whatever GIT_COMMIT carried
        assert provenance_commit(source_id(full, "f" * 12), tag_id) == source_id(full, diff)
    # a job submitted without GIT_COMMIT names the tag's own source id
    assert provenance_commit("", tag_id) == tag_id
    assert source_commit(provenance_commit("", tag_id)) == full[:short]


def test_a_job_without_crane_stops_in_one_error_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["job", "--skeleton", str(tmp_path / "s.json"), "--crane", str(tmp_path / "crane"),
                 "--out", str(tmp_path / "out"), "--image", "127.0.0.1:1/x", "--tag", "t",
                 "--digest", "sha256:" + "0" * 64, "--dpkg-status", str(tmp_path / "status"),
                 "--base-image", "b", "--builder", "k", "--invocation", "iris:x", "--commit", "",
                 "--source-id", "0123abc", "--retries", "0", "--retry-max-wait", "1"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith("==> SBOM and provenance of 127.0.0.1:1/x:t@sha256:")
    assert err.count("\n") == 1 and err.startswith("gpurl-attest: error: ")
    assert str(tmp_path / "crane") in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written before the reads
