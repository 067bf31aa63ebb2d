"""The offload reference and the run's workflow from the plan: pure parts, no stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hdag
import wds
from sdk import asl_plan
from sdk._offload_items import chunks, offload_items
from sdk._offload_plan import function_name, layout, map_items, map_states, workflow_doc
from sdk._offload_refs import REF_KEY, SEE, Reference, find, json_size, replace, sign, split
from sdk.exceptions import MapItemsTooLarge, ReferenceRefused

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "offload"


def test_split_cuts_the_finest_values_that_do_not_fit() -> None:
    big, small = "x" * 5000, "y" * 10
    shell, cut = split({"a": big, "b": small, "c": {"d": [small, big]}}, 1024)
    assert [p for p, _ in cut] == ["$.a", "$.c.d[1]"]
    assert shell == {"a": {REF_KEY: 0}, "b": small, "c": {"d": [small, {REF_KEY: 1}]}}
    # many small items that together do not fit: the list goes whole
    shell, cut = split({"items": ["z" * 100] * 50}, 1024)
    assert [p for p, _ in cut] == ["$.items"] and shell == {"items": {REF_KEY: 0}}
    # a value JSON cannot carry is cut whatever its size; a result that fits stays as it is
    shell, cut = split({"raw": b"abc", "n": 1}, 1024)
    assert cut == [("$.raw", b"abc")] and shell["n"] == 1
    assert split({"n": 1}, 1024) == ({"n": 1}, [])
    assert json_size(b"12345") == 5


def test_a_reference_is_self_describing_and_refused_when_forged_or_foreign() -> None:
    tok = "run-token-1"
    ref = Reference("r-1", "Produce", None, 5_000_000, "bytes", "Produce", sign(tok, "r-1", "Produce", None))
    doc = ref.to_json()
    assert list(doc) == [REF_KEY] and doc[REF_KEY]["see"] == SEE and "@sdk.offload" in SEE
    assert json.loads(json.dumps(doc)) == doc
    back = Reference.from_json(doc, "$.data")
    back.check("r-1", tok, "$.data")            # the run that made it accepts it
    forged = {REF_KEY: {**doc[REF_KEY], "token": "0" * 32}}
    with pytest.raises(ReferenceRefused, match=r"\$\.data .*forged"):
        Reference.from_json(forged, "$.data").check("r-1", tok, "$.data")
    other = {REF_KEY: {**doc[REF_KEY], "key": "Other"}}        # a token moved onto another key
    with pytest.raises(ReferenceRefused, match="forged or altered"):
        Reference.from_json(other, "$.x").check("r-1", tok, "$.x")
    with pytest.raises(ReferenceRefused, match="belongs to run 'r-1'"):
        back.check("r-2", "run-token-2", "$.data")
    with pytest.raises(ReferenceRefused, match="malformed"):
        Reference.from_json({REF_KEY: {"run": "r-1"}}, "$.y")
    with pytest.raises(ReferenceRefused, match="reserved key"):
        Reference.from_json({REF_KEY: 1, "other": 2}, "$.z")


def test_find_and_replace_walk_nested_values() -> None:
    ref = {REF_KEY: {"key": "k"}}
    value = {"a": [1, {"b": ref}], "c": ref}
    assert [p for p, _ in find(value)] == ["$.a[1].b", "$.c"]
    assert replace(value, lambda _m, p: p) == {"a": [1, {"b": "$.a[1].b"}], "c": "$.c"}


def test_function_names_are_wds_names_and_unique() -> None:
    assert function_name("Produce") == "Produce"
    a, b = function_name("Fetch page"), function_name("Fetch-page")
    assert a != b and a.startswith("Fetch_page_") and b.startswith("Fetch_page_")
    assert function_name("1st").startswith("s_1st_")


@pytest.mark.parametrize("name,declared", [
    ("large_result", {"Produce": ("Consume",)}),
    ("parallel_fanout", {"Produce": ("Checksum", "Compress", "Index"), "Checksum": ("Merge",),
                         "Compress": ("Merge",), "Index": ("Merge",)}),
    # Recover reads Fetch only on the Catch route (Transform failed, so it did not commit): not declared
    ("catch_path", {"Fetch": ("Transform",), "Transform": ("Store",)}),
    # Process runs once per Map item: its values, and List's (read in iterations), are not declared;
    # List's Map chunks are freed by the iteration that reads them (map_items)
    ("map_items", {}),
])
def test_the_runs_workflow_declares_the_plans_static_readers(name: str, declared: dict[str, tuple[str, ...]]) -> None:
    plan = asl_plan.load(EXAMPLES / f"{name}.asl.json")
    lay = layout(plan)
    assert {n: sl.declared_readers for n, sl in lay.items() if sl.declared_readers} == declared
    h = hdag.build(wds.loads(json.dumps(workflow_doc(plan, name))))
    assert {o: i.read_count for o, i in h.objects.items()} == {n: len(r) for n, r in declared.items()}
    assert set(h.functions) == {function_name(n) for n in plan.states}
    assert map_states(plan) == (["Process"] if name == "map_items" else [])


def test_routes_that_read_it_by_different_states_keep_it_until_the_end() -> None:
    task = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "OutputPath": "$.Payload",
            "Parameters": {"FunctionName": "f", "Payload.$": "$"}}
    asl = {"StartAt": "T", "States": {
        "T": {**task, "Next": "C"},
        "C": {"Type": "Choice", "Choices": [{"Variable": "$.x", "IsPresent": True, "Next": "A"}], "Default": "B"},
        "A": {**task, "End": True}, "B": {**task, "End": True}}}
    plan = asl_plan.plan(asl)
    assert plan.states["T"].read_count == 1
    sl = layout(plan)["T"]
    assert sl.declared_readers == () and "not by the same Task states" in sl.why


# -- Map items (issue 34 item 4) -------------------------------------------------------------------
def test_map_items_are_chunked_by_size_so_their_references_fit() -> None:
    # 50,000 small items (1.7 MB): chunks of about a threshold each, far fewer refs than fit
    ranges = chunks(50_000, 1_700_000, 450, 64 * 1024)
    assert len(ranges) == 26 and ranges[0] == (0, 1924) and ranges[-1][1] == 50_000
    assert all(a == b for (_, a), (b, _) in zip(ranges, ranges[1:]))
    # 10,000 large items (1 GB): as many chunks as references fit in 64 KiB, no more
    ranges = chunks(10_000, 1 << 30, 450, 64 * 1024)
    assert len(ranges) <= (64 * 1024) // 451 and len(ranges) * 451 <= 64 * 1024
    # few items of a threshold or more each: one item per reference
    assert chunks(5, 5 * 100_000, 450, 64 * 1024) == [(i, i + 1) for i in range(5)]
    assert chunks(0, 2, 450, 64 * 1024) == []
    assert chunks(10, 100, 450, 64 * 1024, chunk_items=4) == [(0, 4), (4, 8), (8, 10)]


def test_map_items_whose_references_would_not_fit_name_the_limit_and_the_fix() -> None:
    with pytest.raises(MapItemsTooLarge, match=r"^the 50,000 Map items of state List in chunks of 1 make 50,000 "
                                               r"references of ~450 bytes \(22,021 KiB\), more than the 64 KiB .*"
                                               r"limited to 256 KiB\); pass chunk_items=345 or more"):
        chunks(50_000, 1_700_000, 450, 64 * 1024, chunk_items=1, state="List")
    assert len(chunks(50_000, 1_700_000, 450, 64 * 1024, chunk_items=345)) == 145   # the fix it names fits
    with pytest.raises(ValueError, match="chunk_items must be a positive int"):
        offload_items([1], chunk_items=0)


def test_split_leaves_a_list_of_references_in_the_state() -> None:
    ref = Reference("r-1", "List.items0.000000", None, 70_000, "json", "List", "t" * 32, (0, 1000)).to_json()
    assert Reference.from_json(ref, "$").items == (0, 1000)
    refs = [ref] * 40                            # ~18 KiB: larger than the threshold, but a Map needs the list
    shell, cut = split({"items": refs, "blob": "x" * 5000, "n": 1}, 1024)
    assert cut == [("$.blob", "x" * 5000)] and shell["items"] == refs and shell["n"] == 1


def test_map_items_are_freed_by_their_iteration_only_when_the_plan_reads_them_once() -> None:
    plan = asl_plan.load(EXAMPLES / "map_items.asl.json")
    assert map_items(plan) == {"List": "Process"}
    assert "freed when that iteration returns" in layout(plan)["List"].why
    # a reader of the whole list after the Map reads every item once more: kept until the end
    doc = json.loads((EXAMPLES / "map_items.asl.json").read_text())
    doc["States"]["Each"]["ResultPath"] = "$.results"
    doc["States"]["Aggregate"]["Parameters"]["Payload"] = {"funcsion.$": "$$", "results.$": "$.results",
                                                           "items.$": "$.items"}
    again = asl_plan.plan(doc)
    assert again.states["List"].read_count == 2 and map_items(again) == {}
