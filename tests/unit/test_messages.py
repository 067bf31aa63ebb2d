"""The messages a new user met (issue 16, "Misleading messages"), each fixed at its cause:
a misspelled output, a codec hint that suggested a codec that cannot encode the value either,
a task failure that named the task twice, WDS fields whose meaning was never said, and the
CLI's failure line."""

from __future__ import annotations

import pytest

import wds
from funcsion_rpc import errors as E
from sdk._client import Endpoints
from sdk._codecs import CodecError, encode
from sdk._task import RunContext, _fail
from sdk.cli._summary import failure_details, failure_line, format_report
from sdk.exceptions import FatalTaskError, MissingOutputs, StoreFailure


def test_a_misspelled_output_is_named_as_the_tasks_write_with_a_guess(d) -> None:  # type: ignore[no-untyped-def]
    r = d.start(d.key)
    d.put(r, "", "in1", 10)
    with pytest.raises(E.UndeclaredOutput) as info:
        d.put(r, "F1", "aa", 10)  # F1's output is 'a'
    msg = str(info.value)
    assert "task F1 of run r-1 wrote 'aa', which workflow fig9/9 does not declare (its outputs: a); " \
           "did you mean 'a'?" in msg
    assert "ad-hoc object" not in msg and "adhoc=True" in msg  # the ad-hoc way is offered, not presumed
    assert (info.value.run_id, info.value.function, info.value.object) == (r, "F1", "aa")


def test_an_unknown_name_read_by_the_client_still_says_unknown_object(d) -> None:  # type: ignore[no-untyped-def]
    r = d.start(d.key)
    with pytest.raises(E.UnknownObject, match="declares no object 'zz'"):
        d.put(r, "", "zz", 10)


@pytest.mark.parametrize(("value", "wanted", "unwanted"), [
    ({1, 2}, ["convert sets to lists first", "codec='pickle'"], ["codec='msgpack'"]),
    ({"k": [frozenset({1})]}, ["convert sets to lists first"], ["codec='msgpack'"]),
    ({"blob": b"\x00"}, ["use codec='msgpack'", "codec='pickle'"], ["sets"]),
    (object(), ["codec='pickle'"], ["codec='msgpack'", "sets"]),
])
def test_codec_hint_offers_only_what_encodes_the_value(value: object, wanted: list[str], unwanted: list[str]) -> None:
    with pytest.raises(CodecError) as info:
        encode(value, "json")
    msg = str(info.value)
    assert all(w in msg for w in wanted), msg
    assert not any(u in msg for u in unwanted), msg
    for hint in ("msgpack", "pickle"):  # what a hint offers does encode the value
        if f"codec='{hint}'" in msg:
            encode(value, hint)


def test_msgpack_failing_on_a_set_does_not_suggest_itself() -> None:
    with pytest.raises(CodecError) as info:
        encode({3}, "msgpack")
    assert "codec='msgpack'" not in str(info.value) and "sorted(s)" in str(info.value)


RC = RunContext(Endpoints("127.0.0.1:1", "127.0.0.1:2", "t"), "r-1", "tok", "square_0")


def test_a_task_failure_names_the_task_once() -> None:
    exc = _fail(RC, MissingOutputs("task square_0 of run r-1 returned without writing its declared output(s) "
                                   "'y_0'; call sdk.put for each before returning"))
    assert isinstance(exc, FatalTaskError)
    assert str(exc) == ("task square_0 of run r-1 failed: MissingOutputs: returned without writing its declared "
                        "output(s) 'y_0'; call sdk.put for each before returning")
    rpc = E.UndeclaredOutput("task square_0 of run r-1 wrote 'x', which ...")
    assert str(_fail(RC, rpc)) == "task square_0 of run r-1 failed: UndeclaredOutput: wrote 'x', which ..."
    other = _fail(RC, StoreFailure("get of 'x' in run r-1 failed in the store: gone"))
    assert str(other) == ("task square_0 of run r-1 failed: StoreFailure: get of 'x' in run r-1 failed in the "
                          "store: gone")
    assert other.retryable


def _doc(error: str, failed_task: str | None = "square_0") -> dict:  # type: ignore[type-arg]
    return {"status": "failed", "run_id": "r-1", "workflow": "squares/1", "wall_s": 1.0, "policy": "funcstore",
            "outputs": {}, "tasks": {"square_0": {"attempts": 1, "log": "/s/logs/squares-square.log",
                                                  "errors": [{"attempt": 1, "error": error, "request_id": "rq-1",
                                                              "traceback": "Traceback ...\nValueError: x\n"}]}},
            "objects": {}, "memory": {"peak_bytes": 0, "peak_live_bytes": 0, "mb_s": 0, "leaked_bytes": 0},
            "failed_task": failed_task, "error": error}


def test_the_cli_failure_line_says_failed_once() -> None:
    sdk_error = "task square_0 of run r-1 failed: MissingOutputs: returned without writing 'y_0'"
    assert failure_line(_doc(sdk_error)) == sdk_error
    assert failure_line(_doc("ValueError: x")) == "task square_0 of run r-1 failed: ValueError: x"
    assert failure_line(_doc("StoreFailure: COS down", failed_task=None)) == "run r-1 failed: StoreFailure: COS down"
    text = format_report(_doc(sdk_error))
    assert text.count("failed: MissingOutputs") == 1 and text.count("square_0") == 1


def test_failure_details_give_traceback_log_and_request_id() -> None:
    lines = failure_details(_doc("ValueError: x"))
    assert lines[0] == "  Traceback ..." and "  ValueError: x" in lines
    assert lines[-1] == "  log of square_0: /s/logs/squares-square.log (request id rq-1, attempt 1)"


@pytest.mark.parametrize(("field", "explained"), [
    ("workflow_id", "the workflow's version: runs, reports and the state machine name it <app>/<workflow_id>"),
    ("category", "a label for the kind of workflow: lifetime models are trained per category"),
])
def test_wds_says_what_workflow_id_and_category_are(field: str, explained: str) -> None:
    doc = {"app": "a", "workflow_id": 1, "category": "c", "spec": {"s": {"stage_id": 0, "functions": [
        {"start": True, "name": "f", "input": ["i"], "output": ["o"], "next": []}]}}}
    del doc[field]
    _, issues = wds.validate(__import__("json").dumps(doc))
    [issue] = issues
    assert f"missing required field {field!r}" in str(issue) and explained in str(issue)
    assert "1704038400" not in str(issue)
