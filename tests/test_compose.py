"""The composed environment's tag (pure): a hash of what makes the image, in order."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.oci.compose import composed_tag

_DIGESTS = st.lists(st.binary(max_size=8).map(lambda b: "sha256:" + hashlib.sha256(b).hexdigest()),
                    min_size=1, max_size=4, unique=True)


@given(_DIGESTS, _DIGESTS)
def test_composed_tag_names_its_digests_in_order(first: list[str], second: list[str]) -> None:
    tag = composed_tag(first)
    assert tag.startswith("env-") and len(tag) <= 128 and tag == composed_tag(list(first))
    assert (composed_tag(second) == tag) == (second == first)
    if len(first) > 1:
        assert composed_tag(first[::-1]) != tag
