"""release/reuse.py where no registry answers: the build goes on, said in one line."""

from __future__ import annotations

import time

from gpurl_tasks.config import load_config
from gpurl_tasks.rebuild.inputs import BuildInputs
from tests.conftest import REPO_ROOT


def test_a_registry_that_does_not_answer_is_said_in_one_line_and_the_build_goes_on() -> None:
    """Nothing listens on 127.0.0.1:1: the lookup answers None at once (one try, no retry
    waits) and says why; a dry run asks nothing and names the tag it would look up."""
    from gpurl_tasks.release.reuse import reuse_pushed

    config = load_config(REPO_ROOT, profile="demo", env={"GPURL_REGISTRY_HOST": "127.0.0.1:1"})
    inputs = BuildInputs(key="ab" * 32, base="gpurl/bookworm-python:3.11")
    said: list[str] = []
    start = time.monotonic()
    found = reuse_pushed(config, inputs, reference=config.registry.immutable_reference("0123abc"),
                         floating=None, dry_run=False, say=said.append, env={})
    assert found is None and time.monotonic() - start < 5
    assert len(said) == 1 and said[0].startswith("note: building: the inputs tag could not be "
                                                 "looked up (") and "127.0.0.1:1" in said[0]
    said.clear()
    assert reuse_pushed(config, inputs, reference="x", floating=None, dry_run=True,
                        say=said.append, env={}) is None
    assert said == [f"note: first looks up {config.registry.image}:inputs-{'ab' * 32}: an image "
                    "found there (and checked) is tagged x instead of built"]
