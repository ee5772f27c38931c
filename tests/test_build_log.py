"""Reading BuildKit's plain progress output (the format Debian's 20.10 client prints)."""

from __future__ import annotations

from gpurl_tasks.local.build_log import parse_plain_progress, stages_run

LOG = """\
#4 [base 1/2] FROM docker.io/gpurl/bookworm-python:3.11
#4 CACHED
#1 [internal] load build definition from Dockerfile.demo
#1 DONE 0.0s
#17 [rl  9/13] COPY examples/demo/ /app/
#17 CACHED
#13 [rl  6/13] RUN uv sync --frozen --no-cache --no-dev --no-install-project
#13 0.512 Resolved 12 packages
#13 DONE 1.2s
#18 [rl 10/13] RUN uv sync --frozen --no-cache --no-dev --inexact
#18 CACHED
#21 [wheel-builder 2/4] RUN python -m pip wheel ./ext
#21 ERROR: process "/bin/sh -c python -m pip wheel ./ext" did not complete successfully
"""


def test_padded_step_numbers_are_parsed() -> None:
    steps = {s.vertex: s for s in parse_plain_progress(LOG)}
    assert set(steps) == {4, 17, 13, 18, 21}  # [internal] vertices are not instructions
    assert (steps[17].stage, steps[17].index, steps[17].total) == ("rl", 9, 13)
    assert [steps[v].status for v in (4, 17, 13, 18, 21)] == ["cached", "cached", "done",
                                                              "cached", "error"]
    assert steps[4].is_from and not steps[13].is_from


def test_stages_run_counts_only_executed_instructions() -> None:
    assert stages_run(parse_plain_progress(LOG)) == {"rl"}
