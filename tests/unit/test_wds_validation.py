"""Every validation error of the WDS parser: collected together, each naming
the file, the JSON path and a fix; never a traceback."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import wds
from wds import Issue, WDSValidationError


def fn(name: str, input: list[str], output: list[str], next: list[str], start: bool = False,
       **extra: Any) -> dict[str, Any]:
    return {"start": start, "name": name, "input": input, "output": output, "next": next, **extra}


def doc(*stages: tuple[str, int, list[dict[str, Any]]], **top: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"app": "t", "workflow_id": 1, "category": "test",
                         "spec": {name: {"stage_id": sid, "functions": fs} for name, sid, fs in stages}}
    d.update(top)
    return d


GOOD = doc(("s1", 1, [fn("split", ["raw"], ["a", "b"], ["p0", "p1"], start=True)]),
           ("s2", 2, [fn("p0", ["a"], ["r0"], []), fn("p1", ["b"], ["r1"], [])]))


def issues_of(d: dict[str, Any] | str, **kw: Any) -> list[Issue]:
    text = d if isinstance(d, str) else json.dumps(d)
    wf, issues = wds.validate(text, source="wf.json", **kw)
    assert (wf is None) == bool(issues)
    return issues


def one(d: dict[str, Any] | str, needle: str, **kw: Any) -> Issue:
    found = [i for i in issues_of(d, **kw) if needle in i.message]
    assert found, f"no issue mentions {needle!r}: {issues_of(d, **kw)}"
    return found[0]


def test_good_document_parses() -> None:
    wf = wds.loads(json.dumps(GOOD))
    assert [s.stage_id for s in wf.stages] == [1, 2]
    assert wf.inputs == ("raw",)
    assert wf.functions["split"].last_output == "b"


def test_fig2_of_the_paper_parses(fig9_path: Any) -> None:
    fig2 = {"app": "demo", "workflow_id": 1704038400, "category": "image-process", "spec": {
        "split_stage": {"stage_id": 1, "functions": [
            fn("split_function", ["raw_object"], ["intermediate_object_00", "intermediate_object_01"],
               ["process_function_00", "process_function_01"], start=True)]},
        "process_stage": {"stage_id": 2, "functions": [
            fn("process_function_00", ["intermediate_object_00"], ["result_object_00"], []),
            fn("process_function_01", ["intermediate_object_01"], ["result_object_01"], [])]}}}
    wf = wds.loads(json.dumps(fig2))
    assert wf.workflow_id == 1704038400 and len(wf.functions) == 3


def test_malformed_json_names_line_and_column() -> None:
    text = '{\n  "app": "x",\n  "spec": {,}\n}'
    (issue,) = issues_of(text)
    assert issue.line == 3 and issue.column is not None
    assert "malformed JSON" in issue.message
    assert str(issue).startswith("wf.json:3:")


def test_document_must_be_an_object() -> None:
    assert "must be a JSON object" in issues_of("[1, 2]")[0].message


@pytest.mark.parametrize("field", ["app", "workflow_id", "category", "spec"])
def test_missing_top_level_field(field: str) -> None:
    d = copy.deepcopy(GOOD)
    del d[field]
    issue = one(d, f"missing required field {field!r}")
    assert issue.path == f"$.{field}" and issue.fix


@pytest.mark.parametrize("field", ["name", "start", "input", "output", "next"])
def test_missing_function_field(field: str) -> None:
    d = copy.deepcopy(GOOD)
    del d["spec"]["s2"]["functions"][1][field]
    issue = one(d, f"missing required field {field!r}")
    assert issue.path == f"$.spec.s2.functions[1].{field}"


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("app",), 3, "'app' must be a string, not number"),
    (("spec",), [], "'spec' must be an object"),
    (("spec", "s1", "stage_id"), "one", "'stage_id' must be a whole number, not string"),
    (("spec", "s1", "stage_id"), True, "'stage_id' must be a whole number, not boolean"),
    (("spec", "s1", "functions"), {}, "'functions' must be an array"),
])
def test_wrong_types(path: tuple[str, ...], value: Any, needle: str) -> None:
    d = copy.deepcopy(GOOD)
    target = d
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    one(d, needle)


def test_wrong_types_inside_a_function() -> None:
    d = copy.deepcopy(GOOD)
    f = d["spec"]["s2"]["functions"][0]
    f["start"] = "no"
    f["input"] = "a"
    f["next"] = [3]
    msgs = [i.message for i in issues_of(d)]
    assert any("'start' must be true or false" in m for m in msgs)
    assert any("'input' must be an array of strings" in m for m in msgs)
    assert any("entries of 'next' must be non-empty strings" in m for m in msgs)


def test_unknown_key_suggests_the_right_one() -> None:
    d = copy.deepcopy(GOOD)
    f = d["spec"]["s2"]["functions"][0]
    f["ouput"] = f.pop("output")
    issue = one(d, "unknown key 'ouput'")
    assert "did you mean 'output'" in issue.fix


def test_every_error_is_collected_not_just_the_first() -> None:
    d = copy.deepcopy(GOOD)
    del d["app"]
    d["spec"]["s2"]["functions"][0]["next"] = ["nowhere"]
    d["spec"]["s2"]["functions"][1]["output"] = ["r0"]
    with pytest.raises(WDSValidationError) as err:
        wds.loads(json.dumps(d), source="wf.json")
    msgs = [i.message for i in err.value.issues]
    assert len(msgs) >= 3
    assert "3 errors" in str(err.value) or f"{len(msgs)} errors" in str(err.value)


def test_duplicate_function_names() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][1]["name"] = "p0"
    one(d, "function name 'p0' is used twice")


def test_duplicate_json_keys_are_reported() -> None:
    text = json.dumps(GOOD)[:-1] + ', "app": "again"}'
    one(text, "key 'app' appears twice")


def test_next_names_unknown_function_with_suggestion() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s1"]["functions"][0]["next"] = ["p0", "p2"]
    issue = one(d, "next names unknown function 'p2'")
    assert issue.path == "$.spec.s1.functions[0].next[1]"
    assert "did you mean" in issue.fix


def test_object_written_by_two_functions() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][1]["output"] = ["r0"]
    one(d, "object 'r0' is written by two functions: 'p0' and 'p1'")


def test_output_listed_twice_by_one_function() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][1]["output"] = ["r1", "r1"]
    one(d, "lists output 'r1' twice")


def test_object_read_but_never_written() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][0]["input"] = ["a", "ghost"]
    issue = one(d, "reads 'ghost', which no function writes")
    assert '"inputs"' in issue.fix


def test_declared_inputs_make_unwritten_objects_legal() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][0]["input"] = ["a", "model_weights"]
    d["inputs"] = ["model_weights"]
    wf = wds.loads(json.dumps(d))
    assert set(wf.inputs) == {"model_weights", "raw"}


def test_declared_input_that_a_function_writes() -> None:
    d = copy.deepcopy(GOOD)
    d["inputs"] = ["a"]
    one(d, "'a' is declared a workflow input, but function 'split' writes it")


def test_no_start_function() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s1"]["functions"][0]["start"] = False
    issue = one(d, "no function has \"start\": true")
    assert issue.path == "$.spec"


def test_cycle_is_reported_with_its_path() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], ["b"], start=True)]),
            ("s2", 2, [fn("b", ["x", "z"], ["y"], ["c"]), fn("c", ["y"], ["z"], ["b"])]))
    issue = one(d, "the workflow has a cycle")
    assert "b -> c -> b" in issue.message or "c -> b -> c" in issue.message


def test_function_reading_its_own_output() -> None:
    d = doc(("s1", 1, [fn("a", ["in", "x"], ["x"], [], start=True)]))
    msgs = [i.message for i in issues_of(d)]
    assert any("reads its own output 'x'" in m for m in msgs)


def test_reader_in_an_earlier_stage_than_its_writer() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], [], start=True), fn("late_reader", ["y"], ["z"], [])]),
            ("s2", 2, [fn("b", ["x"], ["y"], ["late_reader"])]))
    msgs = [i.message for i in issues_of(d)]
    assert any("'late_reader' (stage 1) reads 'y', written in a later stage by 'b' (stage 2)" in m for m in msgs)


def test_same_stage_reader_is_allowed(fig9_path: Any) -> None:
    wf = wds.load(fig9_path)  # F4 -> F5 inside one stage, as in FuncStore Fig. 9
    assert wf.functions["F4"].stage_id == wf.functions["F5"].stage_id


def test_next_edge_against_the_data_flow() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], ["b"], start=True)]),
            ("s2", 2, [fn("b", ["x"], ["y"], ["c"]), fn("c", ["y"], ["z"], ["b"])]))
    issue = one(d, "next edge 'c' -> 'b' contradicts the data flow")
    assert "remove 'b'" in issue.fix


def test_next_edge_to_an_earlier_stage() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], ["b"], start=True), fn("side", ["in"], ["w"], [], start=True)]),
            ("s2", 2, [fn("b", ["x"], ["y"], ["side2"])]),
            ("s0", 0, [fn("side2", ["w"], ["v"], [])]))
    msgs = [i.message for i in issues_of(d)]
    assert any("points to an earlier stage" in m for m in msgs)


def test_next_edge_into_a_start_function() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], ["b"], start=True), fn("b", ["in2"], ["y"], [], start=True)]))
    one(d, "leads into a start function")


def test_start_function_reading_another_functions_output() -> None:
    d = doc(("s1", 1, [fn("a", ["in"], ["x"], [], start=True), fn("b", ["x"], ["y"], [], start=True)]))
    one(d, "start function 'b' reads 'x', which 'a' writes")


def test_unreachable_function() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"].append(fn("orphan", [], ["o"], []))
    one(d, "function 'orphan' is not a start function and nothing leads to it")


def test_duplicate_stage_id_and_empty_stage() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["stage_id"] = 1
    d["spec"]["s3"] = {"stage_id": 3, "functions": []}
    msgs = [i.message for i in issues_of(d)]
    assert any("stage_id 1 is already used by stage 's1'" in m for m in msgs)
    assert any("stage 's3' has no functions" in m for m in msgs)


def test_missing_next_edge_is_a_warning_not_an_error() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s1"]["functions"][0]["next"] = ["p0"]
    wf = wds.loads(json.dumps(d))
    assert any("'p1' reads what 'split' writes" in w for w in wf.warnings)


def test_unreadable_file(tmp_path: Any) -> None:
    with pytest.raises(WDSValidationError) as err:
        wds.load(tmp_path / "missing.json")
    assert "cannot read the file" in str(err.value)


def test_handler_key_and_default_handler() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s2"]["functions"][0]["handler"] = "mycode.tasks:process"
    wf = wds.loads(json.dumps(d))
    assert wf.functions["p0"].handler_ref == "mycode.tasks:process"
    assert wf.functions["p1"].handler_ref == "handlers:p1"
    d["spec"]["s2"]["functions"][1]["handler"] = "not a ref"
    one(d, "is not of the form module:function")


def test_templated_functions_share_a_default_handler(example_paths: Any) -> None:
    wf = wds.load(example_paths["wordcount"])
    assert wf.functions["mapper_03"].handler_ref == "handlers:mapper"
    assert wf.functions["mapper_03"].entry == "mapper_{i:02d}"


def test_one_error_reads_as_a_sentence_then_the_fix() -> None:
    d = copy.deepcopy(GOOD)
    d["spec"]["s1"]["functions"][0]["next"] = ["p0", "p9"]
    with pytest.raises(WDSValidationError) as info:
        wds.loads(json.dumps(d), source="wf.json")
    assert str(info.value) == ("1 error in workflow description: wf.json: $.spec.s1.functions[0].next[1]: next names "
                               "unknown function 'p9'. Fix: did you mean 'p1'?")
    assert str(Issue("f", "$", "is it?", "yes")) == "f: $: is it? Fix: yes"  # a question keeps its mark


def test_a_workflow_without_functions_is_one_error() -> None:
    """No spurious 'no function has "start": true' when there is no function at all."""
    d = doc(("s1", 1, []))
    [issue] = issues_of(d)
    assert issue.message == "stage 's1' has no functions"
