"""``@sdk.offload`` end to end: the examples/offload state machines under moto's Step
Functions interpreter, their Lambda invokes carried out by the real handlers on the local
Lambda platform (``LambdaBridge``), each execution a funcsion run whose read counts come
from the plan; then the faults (a forged reference, another execution's, a freed one, an
aborted execution) driven through the decorator in this process against the same stack."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sdk
from sdk._offload_plan import execution_input, start_run
from sdk._offload_refs import REF_KEY
from sdk.deploy.offload_local import OffloadRun, run_local
from sdk.exceptions import FatalTaskError
from sdk.local._stack import Stack
from tests._waiting import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "offload"


def _run(stack: Stack, name: str, doc: dict[str, Any]) -> OffloadRun:
    return run_local(EXAMPLES / f"{name}.asl.json", stack, code_dir=EXAMPLES, execution_input_doc=doc)


def _output(out: OffloadRun) -> Any:
    ended = [e for e in out.events if e["type"] == "ExecutionSucceeded"]
    return json.loads(ended[0]["executionSucceededEventDetails"]["output"]) if ended else None


def _nothing_left(stack: Stack, out: OffloadRun) -> None:
    with stack.client() as c:
        summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == out.run_id)
    assert summary["state"] == "ended" and summary["outcome"] == out.status.lower()
    assert summary["live_bytes"] == 0 and summary["allocated_bytes"] == 0 and summary["cos_bytes"] == 0
    assert summary["kept"] == []
    assert out.cleanup["ended"] is True


def test_a_5_mb_result_is_freed_at_its_readers_commit(stack: Stack) -> None:
    out = _run(stack, "large_result", {"size_mb": 5})
    assert out.status == "SUCCEEDED", [e for e in out.events if "Failed" in e["type"]]
    assert _output(out) == {"summary": {"size": 5_000_000, "intact": True}}
    # the state held a reference, not 5 MB: Consume's input was small
    consume = next(p for n, p in out.calls if n == "offload-consume")
    ref = consume["data"]["blob"]
    assert list(ref) == [REF_KEY] and ref[REF_KEY]["run"] == out.run_id and ref[REF_KEY]["bytes"] == 5_000_000
    assert len(json.dumps(consume)) < 64 * 1024
    row = out.report["objects"]["Produce"]
    assert row["bytes"] > 5_000_000 and row["reads"] == ["Consume"] and row["freed_by"] == "Consume"
    assert row["freed_at"] is not None and not row["kept_until_end"]
    assert out.report["offload"]["freed_by_readers"] == ["Produce"]
    # the execution's intermediate-data cost, measured: its Lambdas' bills, storage functions, COS
    lines = out.report["cost"]["lines"]
    assert lines["tasks"]["invocations"] >= 3 and lines["storage_io"]["invocations"] >= 1
    assert out.report["cost"]["total_usd"] > 0
    _nothing_left(stack, out)
    assert out.saved_to and json.loads(Path(out.saved_to).read_text())["run_id"] == out.run_id


def test_a_parallel_of_three_readers_frees_the_2_mb_result_after_the_third(stack: Stack) -> None:
    out = _run(stack, "parallel_fanout", {})
    assert out.status == "SUCCEEDED", [e for e in out.events if "Failed" in e["type"]]
    assert _output(out)["intact"] is True
    produce = out.report["objects"]["Produce"]
    assert sorted(produce["reads"]) == ["Checksum", "Compress", "Index"] and produce["declared_reads"] == 3
    assert produce["freed_by"] == produce["reads"][-1] and not produce["kept_until_end"]
    # Compress's 2 MB result went on to Merge and was freed at Merge's commit
    assert out.report["objects"]["Compress"]["freed_by"] == "Merge"
    _nothing_left(stack, out)


def test_the_catch_path_succeeds_or_fails_and_either_way_leaves_nothing(stack: Stack) -> None:
    ok = _run(stack, "catch_path", {"url": "https://example.org/ok"})
    assert ok.status == "SUCCEEDED", [e for e in ok.events if "Failed" in e["type"]]
    assert ok.report["objects"]["Fetch"]["freed_by"] == "Transform"
    _nothing_left(stack, ok)
    failed = _run(stack, "catch_path", {"url": "https://example.org/fail"})
    assert failed.status == "FAILED"
    assert {"Transform", "Recover"} <= {n for n, t in failed.report["tasks"].items() if t["attempts"]}
    # Transform raised (no commit), Recover is no declared reader: Fetch's value waited for the cleanup
    fetch = failed.report["objects"]["Fetch"]
    assert fetch["kept_until_end"] and fetch["reads"] == [] and "did not all commit" in fetch["why"]
    _nothing_left(stack, failed)


# -- faults, through the decorator in this process --------------------------------------------
def _handlers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("offload_example_handlers", EXAMPLES / "handlers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _event(run: Any, state: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What a Task's ``Payload`` with ``"funcsion.$": "$$"`` gives its handler."""
    return {**payload, "funcsion": {"Execution": {"Name": run.run_id, "Input": execution_input(run)},
                                    "State": {"Name": state, "RetryCount": 0}}}


def test_forged_foreign_and_freed_references_are_refused_by_name(stack: Stack) -> None:
    h = _handlers()
    asl = (EXAMPLES / "catch_path.asl.json").read_text()
    with stack.client() as c:
        run, other = start_run(c, asl, app="faults"), start_run(c, asl, app="faults")
        try:
            fetched = h.fetch(_event(run, "Fetch", {"url": "https://a"}), None)
            ref = fetched["blob"]
            assert fetched["url"] == "https://a" and ref[REF_KEY]["key"] == "Fetch"
            forged = {**fetched, "blob": {REF_KEY: {**ref[REF_KEY], "token": "f" * 32}}}
            with pytest.raises(FatalTaskError, match="^state Transform of run r-[0-9]+ failed: ReferenceRefused: .*forged"):
                h.transform(_event(run, "Transform", {"data": forged}), None)
            with pytest.raises(FatalTaskError, match=f"ReferenceRefused: .*belongs to run '{run.run_id}'"):
                h.transform(_event(other, "Transform", {"data": fetched}), None)
            # the refused attempts committed nothing: Transform still reads it, and its commit frees it
            assert h.transform(_event(run, "Transform", {"data": fetched}), None)["sha256"] == fetched["sha256"]
            assert run.lookup("Fetch").state == "freed"
            # a state the plan does not count (Recover, on the Catch route) reads it after the free
            with pytest.raises(FatalTaskError, match="ReferenceFreed: .*Fetch's result.*last reader was state "
                                                     "Transform"):
                h.recover(_event(run, "Recover", {"data": fetched, "error": {"Error": "x"}}), None)
        finally:
            run.close()
            other.close()


def test_an_aborted_execution_is_ended_by_its_status_change_event(stack: Stack) -> None:
    h = _handlers()
    asl = (EXAMPLES / "large_result.asl.json").read_text()
    with stack.client() as c:
        run = start_run(c, asl, app="aborted")
        try:
            h.produce(_event(run, "Produce", {"size_mb": 1}), None)
            assert run.lookup("Produce").state == "readable"
            event = {"detail-type": "Step Functions Execution Status Change", "source": "aws.states",
                     "detail": {"name": run.run_id, "status": "ABORTED",
                                "input": json.dumps(execution_input(run))}}
            running = sdk.offload_cleanup({**event, "detail": {**event["detail"], "status": "RUNNING"}}, None)
            assert running["ended"] is False
            assert sdk.offload_cleanup(event, None)["ended"] is True
            assert sdk.offload_cleanup(event, None) == {"run_id": run.run_id, "status": "ABORTED", "ended": False,
                                                        "why": "the run had already ended"}
            summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run.run_id)
            assert summary["outcome"] == "aborted" and summary["live_bytes"] == 0
            assert summary["allocated_bytes"] == 0 and summary["kept"] == []
        finally:
            run.close()


def test_a_retried_reader_counts_once_and_a_raising_one_not_at_all(stack: Stack) -> None:
    from aws_lambda_powertools import Logger

    logger = Logger(service="offload-test")
    attempts: list[int] = []

    @logger.inject_lambda_context      # stacks with Powertools' decorators, as @sdk.task does
    @sdk.offload(threshold_bytes=1024)
    def flaky_consume(event: dict[str, Any], context: Any) -> dict[str, Any]:
        attempts.append(len(event["data"]["blob"]))
        if len(attempts) == 1:
            raise RuntimeError("the first attempt fails after reading")
        return {"n": len(event["data"]["blob"])}

    class Ctx:   # what Lambda passes as the context (Powertools' inject_lambda_context reads it)
        function_name, memory_limit_in_mb, invoked_function_arn, aws_request_id = "consume", 128, "arn:x", "req-1"

    h = _handlers()
    asl = (EXAMPLES / "large_result.asl.json").read_text()
    with stack.client() as c:
        run = start_run(c, asl, app="retries")
        try:
            produced = h.produce(_event(run, "Produce", {"size_mb": 0.2}), None)
            with pytest.raises(RuntimeError, match="first attempt"):
                flaky_consume(_event(run, "Consume", {"data": produced}), Ctx())
            assert run.lookup("Produce").state == "readable"      # a raising attempt commits nothing
            assert flaky_consume(_event(run, "Consume", {"data": produced}), Ctx()) == {"n": 200_000}
            st = run.lookup("Produce")
            assert st.state == "freed" and list(st.committed_by) == ["Consume"]   # the retry counted once
            # an attempt after the state committed (it returned; Lambda retried anyway) is refused by name
            with pytest.raises(FatalTaskError, match="state Consume of run .* committed in an earlier attempt"):
                flaky_consume(_event(run, "Consume", {"data": produced}), Ctx())
        finally:
            run.close()


def test_lazy_reads_and_pass_through(stack: Stack) -> None:
    @sdk.offload(stream=True)
    def count_stream(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with event["data"]["blob"] as s:      # a ValueStream: one stripe in memory at a time
            n = sum(len(chunk) for chunk in iter(lambda: s.read(1 << 16), b""))
        return {"n": n}

    @sdk.offload(resolve=False)
    def pass_on(event: dict[str, Any], context: Any) -> dict[str, Any]:
        ref = event["data"]["blob"]
        assert list(ref) == [REF_KEY]
        return {"ref": ref, "digest": sdk.offload_get({REF_KEY: dict(ref[REF_KEY])})[:4].hex()}

    @sdk.offload(resolve=False)
    def pass_along(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"ref": event["data"]["blob"], "own": b"o" * 100_000}

    h = _handlers()
    asl = (EXAMPLES / "large_result.asl.json").read_text()
    with stack.client() as c:
        run = start_run(c, asl, app="lazy")
        try:
            produced = h.produce(_event(run, "Produce", {"size_mb": 3}), None)
            assert count_stream(_event(run, "Consume", {"data": produced}), None) == {"n": 3_000_000}
            assert run.lookup("Produce").state == "freed"
            other = start_run(c, asl, app="lazy")
            try:
                produced = h.produce(_event(other, "Produce", {"size_mb": 1}), None)
                out = pass_on(_event(other, "Consume", {"data": produced}), None)
                assert out["ref"] == produced["blob"] and len(out["digest"]) == 8
                # a result that passes a reference on and offloads a value of its own keeps both
                third = start_run(c, asl, app="lazy")
                try:
                    produced = h.produce(_event(third, "Produce", {"size_mb": 0.1}), None)
                    both = pass_along(_event(third, "Consume", {"data": produced}), None)
                    assert both["ref"] == produced["blob"] and list(both["own"]) == [REF_KEY]
                finally:
                    third.close()
            finally:
                other.close()
        finally:
            run.close()


def test_a_run_whose_execution_never_reports_is_ended_by_the_ttl(stack: Stack) -> None:

    h = _handlers()
    asl = (EXAMPLES / "large_result.asl.json").read_text()
    with stack.client() as c:
        run = start_run(c, asl, app="abandoned", ttl_s=0.2)
        try:
            produced = h.produce(_event(run, "Produce", {"size_mb": 0.5}), None)

            def ended() -> dict[str, Any] | None:   # the server's tick, not an event of ours, ends it
                summary = next(r for r in c.metadata.stats()["runs"] if r["run_id"] == run.run_id)
                return summary if summary["state"] != "running" else None

            summary = wait_for(ended, 10.0, "the TTL to end the abandoned run", 0.1)
            assert summary["state"] == "expired" and summary["live_bytes"] == 0 and summary["allocated_bytes"] == 0
            with pytest.raises(FatalTaskError, match="ReferenceFreed: .*Produce's result.*no longer stored"):
                h.consume(_event(run, "Consume", {"data": produced}), None)
        finally:
            run.close()


# -- large Map inputs (issue 34 item 4) -------------------------------------------------------------
@pytest.mark.slow   # ~30 s on a loaded 2-core machine: 25 Map iterations, each a Lambda on the local platform
def test_an_inline_map_over_50000_items_reads_each_chunk_once_and_frees_it(stack: Stack) -> None:
    h = _handlers()
    n = 50_000
    out = _run(stack, "map_items", {"count": n})
    assert out.status == "SUCCEEDED", [e for e in out.events if "Failed" in e["type"]]
    # the Map iterated over chunk references: the state never held the list
    refs = [p["item"] for name, p in out.calls if name == "offload-process"]
    assert refs and all(list(r) == [REF_KEY] and r[REF_KEY]["state"] == "List" for r in refs)
    assert len({r[REF_KEY]["key"] for r in refs}) == len(refs)      # each chunk read by one iteration, once
    listed = [e for e in out.events if e["type"] == "TaskStateExited" and e["stateExitedEventDetails"]["name"] == "List"]
    assert len(listed) == 1 and len(listed[0]["stateExitedEventDetails"]["output"]) < 64 * 1024   # the Map's input
    spans = sorted(tuple(r[REF_KEY]["items"]) for r in refs)
    assert spans[0][0] == 0 and all(a + k == b for (a, k), (b, _) in zip(spans, spans[1:]))
    assert spans[-1][0] + spans[-1][1] == n and 1 < len(spans) <= 160
    assert max(len(json.dumps(p)) for name, p in out.calls if name == "offload-process") < 4096
    # every iteration got its items right: the checksums of the chunks it read match the list's
    expected = [h.item(i) for i in range(n)]
    digest = "".join(h.chunk_digest(expected[a:a + k]) for a, k in spans)
    assert _output(out) == {"chunks": len(spans), "items": n, "sum": n * (n - 1) // 2,
                            "sha256": hashlib.sha256(digest.encode()).hexdigest()}
    # each chunk was freed by its iteration, before the execution ended (not by the cleanup)
    chunks = {k: r for k, r in out.report["objects"].items() if ".items0." in k}
    assert len(chunks) == len(spans)
    assert all(not r["kept_until_end"] and r["freed_at"] is not None and r["freed_at"] >= r["written_at"]
               for r in chunks.values()), chunks
    assert all(r["state"] == "List" and "freed when that iteration returns" in r["why"] for r in chunks.values())
    _nothing_left(stack, out)


def test_a_map_chunk_is_freed_only_after_its_iteration_returns(stack: Stack) -> None:
    h = _handlers()
    asl = (EXAMPLES / "map_items.asl.json").read_text()
    calls: list[int] = []

    @sdk.offload
    def flaky_process(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append(len(event["item"]))
        if len(calls) == 1:
            raise RuntimeError("the first attempt fails after reading its chunk")
        return {"n": len(event["item"])}

    with stack.client() as c:
        run = start_run(c, asl, app="map-retry")
        try:
            inp = execution_input(run, {}, asl)
            assert inp["funcsion"]["map_items"] == {"List": "Process"}

            def event(state: str, payload: dict[str, Any]) -> dict[str, Any]:
                return {**payload, "funcsion": {"Execution": {"Name": run.run_id, "Input": inp},
                                                "State": {"Name": state, "RetryCount": 0}}}

            refs = h.list_items(event("List", {"count": 20_000}), None)
            key = refs[0][REF_KEY]["key"]
            with pytest.raises(RuntimeError, match="first attempt"):
                flaky_process(event("Process", {"item": refs[0]}), None)
            assert run.lookup(key).state == "readable"        # a raising iteration frees nothing
            flaky_process(event("Process", {"item": refs[0]}), None)
            assert run.lookup(key).state == "freed"           # its retry returned: freed
            assert all(run.lookup(r[REF_KEY]["key"]).state == "readable" for r in refs[1:])
            with pytest.raises(FatalTaskError, match="ReferenceFreed: .*List's result"):
                flaky_process(event("Process", {"item": refs[0]}), None)
        finally:
            run.close()


def test_map_items_whose_references_would_not_fit_are_refused_naming_the_limit(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    @sdk.offload
    def per_item(event: dict[str, Any], context: Any) -> Any:
        return sdk.offload_items(({"i": i} for i in range(50_000)), chunk_items=1)

    @sdk.offload
    def whole(event: dict[str, Any], context: Any) -> Any:
        return [{"i": i} for i in range(50_000)]

    asl = (EXAMPLES / "map_items.asl.json").read_text()
    with stack.client() as c:
        run = start_run(c, asl, app="map-limit")
        try:
            with pytest.raises(FatalTaskError, match=r"state List of run .* failed: MapItemsTooLarge: the 50,000 Map "
                                                     r"items .* 50,000 references .* more than the 64 KiB .*256 KiB.*"
                                                     r"pass chunk_items=\d+ or more"):
                per_item(_event(run, "List", {}), None)
            assert [o for o in run.list() if o.state == "readable"] == []    # nothing stored
            # a plain list too large for the state goes whole, and the state says what the Map will find
            inp = execution_input(run, {}, asl)
            plain = whole({**_event(run, "List", {}), "funcsion": {"Execution": {"Name": run.run_id, "Input": inp},
                                                                   "State": {"Name": "List", "RetryCount": 0}}}, None)
            assert list(plain) == [REF_KEY]
            assert "state List offloads the list at $ (50,000 items) whole" in capsys.readouterr().out
        finally:
            run.close()
