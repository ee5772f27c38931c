"""The GPU check's result document (gpurl_tasks/gpu/result.py): what `to_json` writes `parse`
reads back as the same result, and every way a document can be off is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.gpu import result as gr

DIGEST = "sha256:" + "ab" * 32
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_line = _text.filter(lambda s: "\n" not in s and s.strip())
_figure = st.one_of(st.integers(-2**53, 2**53), st.floats(allow_nan=False, allow_infinity=False),
                    _text)


@st.composite
def _check(draw: Any, name: str) -> gr.Check:
    status = draw(st.sampled_from(gr.STATUSES))
    reason = draw(_line) if status != "passed" else draw(st.one_of(st.just(""), _line))
    return gr.Check(name=name, status=status, reason=reason,
                    figures=draw(st.dictionaries(_text, _figure, max_size=3)),
                    findings=tuple(draw(st.lists(_text, max_size=3))))


@st.composite
def results(draw: Any) -> gr.Result:
    names = draw(st.lists(st.sampled_from(gr.CHECKS), unique=True))
    gpus = tuple(gr.Gpu(index=i, name=draw(_text), capability=draw(st.sampled_from(
        ["8.0", "9.0", "10.0", "12.1"]))) for i in range(draw(st.integers(0, 3))))
    node = gr.Node(hostname=draw(_text), gpus=gpus, driver=draw(_text),
                   driver_cuda=draw(_text), image_cuda=draw(_text))
    digest = "sha256:" + draw(st.text("0123456789abcdef", min_size=64, max_size=64))
    return gr.Result(image=digest, node=node, checks=tuple(draw(_check(n)) for n in names))


@given(results(), st.sampled_from([None, 2]))
def test_what_to_json_writes_parse_reads_back_the_same(result: gr.Result, indent: int | None
                                                       ) -> None:
    text = gr.to_json(result, indent=indent)
    assert gr.parse(text) == result
    assert json.loads(text)["passed"] is result.passed


@given(results())
def test_passed_means_nothing_failed_and_driver_and_kernels_passed(result: gr.Result) -> None:
    status = {c.name: c.status for c in result.checks}
    expected = "failed" not in status.values() and status.get("driver") == "passed" \
        and status.get("kernels") == "passed"
    assert result.passed is expected


def _good() -> dict[str, Any]:
    return {"schema": gr.SCHEMA, "image": DIGEST,
            "node": {"hostname": "h", "gpus": [{"index": 0, "name": "NVIDIA H200",
                                                "capability": "9.0"}],
                     "driver": "570.1", "driver_cuda": "12.8", "image_cuda": "12.8"},
            "checks": [{"name": "driver", "status": "passed", "figures": {}, "findings": []},
                       {"name": "kernels", "status": "passed", "figures": {"files": 3},
                        "findings": []},
                       {"name": "network", "status": "not-run", "reason": "no /dev/infiniband",
                        "figures": {}, "findings": []}],
            "passed": True}


def test_the_good_example_parses() -> None:
    parsed = gr.parse(json.dumps(_good()))
    network = parsed.check("network")
    assert parsed.passed and network is not None and network.reason == "no /dev/infiniband"


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *head, last = path.split(".")
    target: Any = doc
    for part in head:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(("path", "value", "says"), [
    ("schema", "gpurl.gpu-check/v2", "schema"),
    ("image", "sha256:abc", "not a sha256 digest"),
    ("image", _DELETE, "lacks image"),
    ("passed", False, "says passed=False"),
    ("passed", "yes", "not a bool"),
    ("checks.1.status", "ok", "unknown status"),
    ("checks.1.name", "speed", "unknown check"),
    ("checks.1.name", "driver", "names a check twice"),
    ("checks.2.reason", _DELETE, "without a reason"),
    ("checks.2.reason", "two\nlines", "not one line"),
    ("checks.1.figures", {"busbw": float("inf")}, "not a number JSON allows"),
    ("checks.1.figures", {"ok": True}, "not a finite number or a string"),
    ("checks.1.findings", [3], "not all strings"),
    ("checks.1.extra", 1, "unknown keys extra"),
    ("node.gpus.0.capability", "sm_90", "not like 9.0"),
    ("node.gpus.0.index", -1, "negative"),
    ("node.gpus.0.index", True, "not a int"),
    ("node.driver", 570, "not a str"),
    ("node", [], "not an object"),
])
def test_a_document_off_in_any_way_is_refused(path: str, value: Any, says: str) -> None:
    text = json.dumps(_set(_good(), path, value))
    with pytest.raises(GpurlError, match=says.replace("(", r"\(")):
        gr.parse(text)


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(GpurlError, match="not JSON"):
        gr.parse("GPURL-GPU-RESULT {")


def test_a_failed_kernels_check_fails_the_result_even_with_the_rest_passing() -> None:
    doc = _set(_good(), "checks.1.status", "failed")
    doc["checks"][1]["reason"] = "1 file lacks sm_90"
    assert gr.parse(json.dumps(_set(doc, "passed", False))).passed is False
    doc = _set(_good(), "checks.1.status", "not-run")
    doc["checks"][1]["reason"] = "no torch"
    assert gr.parse(json.dumps(_set(doc, "passed", False))).passed is False
