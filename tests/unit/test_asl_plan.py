"""The state-machine planner (``sdk.asl_plan``) over small ASL definitions: each construct,
the rules of ``sdk.asl_plan._plan``'s docstring, and the one-line errors of bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sdk.asl_plan import AslError, Plan, StatePlan, plan

REPO = Path(__file__).resolve().parents[2]
ARN = "arn:aws:lambda:us-east-1:123456789012:function:f"


def task(nxt: str | None = None, **fields: Any) -> dict[str, Any]:
    """A Task state calling a Lambda function directly (its result is the handler's return)."""
    return {"Type": "Task", "Resource": ARN, **({"Next": nxt} if nxt else {"End": True}), **fields}


def machine(start: str, **states: dict[str, Any]) -> dict[str, Any]:
    return {"StartAt": start, "States": states}


def of(definition: dict[str, Any], state: str) -> StatePlan:
    return plan(definition).states[state]


def counts(p: Plan) -> dict[str, int | None]:
    return {n: s.read_count for n, s in p.states.items()}


# -- linear flow and the JSONPath fields ------------------------------------------------

def test_default_result_path_replaces_the_state_so_the_next_task_reads_it_once() -> None:
    p = plan(machine("A", A=task("B"), B=task("C"), C=task()))
    assert counts(p) == {"A": 1, "B": 1, "C": 0}
    assert p.states["A"].readers == ("B",) and not p.states["A"].kept_until_end
    # the last result is the execution's output: nobody reads it, kept until the end
    assert p.states["C"].kept_until_end and "execution's output" in p.states["C"].why


def test_result_path_that_keeps_the_input_passes_it_on_to_every_later_task() -> None:
    p = plan(machine("A", A=task("B", ResultPath="$.a"), B=task("C", ResultPath="$.b"), C=task()))
    assert counts(p) == {"A": 2, "B": 1, "C": 0}
    assert p.states["A"].readers == ("B", "C")


def test_result_path_null_on_a_reader_keeps_its_input_as_its_output() -> None:
    p = plan(machine("A", A=task("B"), B=task("C", ResultPath=None), C=task()))
    assert p.states["A"].readers == ("B", "C")
    assert p.states["B"].read_count == 0 and "discards" in p.states["B"].why  # B's own result is dropped


def test_output_path_and_input_path_decide_what_the_next_task_receives() -> None:
    d = machine("A", A=task("B", ResultPath="$.a"),
                B=task("C", InputPath="$.other", ResultPath="$.b"),  # B does not see $.a
                C=task("D", Parameters={"x.$": "$.a"}, ResultPath="$.c", OutputPath="$.c"),  # C reads it, then drops it
                D=task())
    p = plan(d)
    assert p.states["A"].readers == ("C",) and p.states["A"].read_count == 1
    assert p.states["B"].read_count == 0  # C's Parameters leave $.b out, and C's OutputPath drops it
    assert p.states["C"].readers == ("D",)


def test_a_task_that_receives_only_a_piece_of_the_result_is_not_static() -> None:
    s = of(machine("A", A=task("B", ResultPath="$.a"), B=task(Parameters={"items.$": "$.a.items"})), "A")
    assert s.read_count is None and s.kept_until_end
    assert "'B' receives part of it" in s.why and "$.a.items" in s.why


def test_a_result_the_machine_discards_is_read_by_nobody() -> None:
    s = of(machine("A", A=task("B", ResultPath=None), B=task()), "A")
    assert (s.read_count, s.readers, s.kept_until_end) == (0, (), True)
    assert "discards it" in s.why


def test_pass_and_wait_states_carry_the_result_on() -> None:
    d = machine("A", A=task("P", ResultPath="$.a"),
                P={"Type": "Pass", "Result": {"k": 1}, "ResultPath": "$.p", "Next": "W"},
                W={"Type": "Wait", "Seconds": 1, "Next": "Q"},
                Q={"Type": "Pass", "Parameters": {"moved.$": "$.a"}, "Next": "B"},  # Q's output is {"moved": a}
                B=task(InputPath="$.moved"))
    assert of(d, "A").readers == ("B",) and of(d, "A").read_count == 1


def test_pass_with_result_replaces_the_state() -> None:
    d = machine("A", A=task("P"), P={"Type": "Pass", "Result": {"k": 1}, "Next": "B"}, B=task())
    assert of(d, "A").read_count == 0


def test_lambda_invoke_puts_the_handler_return_under_payload() -> None:
    invoke = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
              "Parameters": {"FunctionName": "f", "Payload.$": "$"}}
    whole = machine("A", A={**invoke, "ResultSelector": {"r.$": "$.Payload"}, "Next": "B"}, B={**invoke, "End": True})
    assert of(whole, "A").read_count == 1
    via_output = machine("A", A={**invoke, "OutputPath": "$.Payload", "Next": "B"}, B={**invoke, "End": True})
    assert of(via_output, "A").read_count == 1
    inside = machine("A", A={**invoke, "ResultSelector": {"r.$": "$.Payload.rows"}, "Next": "B"},
                     B={**invoke, "End": True})
    s = of(inside, "A")
    assert s.read_count is None and "$.Payload.rows" in s.why


def test_a_later_result_written_into_it_leaves_the_rest_whole() -> None:
    # A's result is the whole state; B merges its own result into it at $.b; C still receives A's
    s = of(machine("A", A=task("B"), B=task("C", ResultPath="$.b"), C=task()), "A")
    assert s.readers == ("B", "C") and s.read_count == 2


# -- Choice ------------------------------------------------------------------------------

def _choice(a_reads: list[str], b_reads: list[str]) -> dict[str, Any]:
    states: dict[str, Any] = {"T": task("C", ResultPath="$.t"),
                              "C": {"Type": "Choice", "Choices": [{"Variable": "$.go", "BooleanEquals": True,
                                                                   "Next": a_reads[0]}], "Default": b_reads[0]}}
    for chain in (a_reads, b_reads):
        for i, name in enumerate(chain):
            states[name] = task(chain[i + 1] if i + 1 < len(chain) else None, ResultPath=f"$.{name}")
    return {"StartAt": "T", "States": states}


def test_choice_whose_routes_read_it_equally_often_is_static() -> None:
    s = of(_choice(["A1", "A2"], ["B1", "B2"]), "T")
    assert (s.read_count, s.readers, s.kept_until_end) == (2, ("A1", "A2", "B1", "B2"), True)  # reaches the output
    d = _choice(["A1"], ["B1"])
    for name in ("A1", "B1"):
        d["States"][name]["OutputPath"] = f"$.{name}"  # drop it before the output
    s = of(d, "T")
    assert (s.read_count, s.kept_until_end) == (1, False) and "every route" in s.why


def test_choice_whose_routes_read_it_a_different_number_of_times_is_not_static() -> None:
    s = of(_choice(["A1"], ["B1", "B2"]), "T")
    assert s.read_count is None and s.kept_until_end and s.readers == ("A1", "B1", "B2")
    assert "different number of times" in s.why
    assert "1 time via Choice 'C' rule 0 -> 'A1' (A1)" in s.why and "2 times via Choice 'C' Default -> 'B1'" in s.why


def test_a_route_into_a_fail_state_may_read_fewer_times_but_not_more() -> None:
    fewer = machine("T", T=task("C", ResultPath="$.t"),
                    C={"Type": "Choice", "Choices": [{"Variable": "$.ok", "BooleanEquals": False, "Next": "Bad"}],
                       "Default": "A"},
                    Bad={"Type": "Fail"}, A=task(OutputPath="$.x", ResultPath="$.x"))
    s = of(fewer, "T")
    assert (s.read_count, s.kept_until_end) == (1, False) and "kept until the execution ends" in s.why
    more = machine("T", T=task("C", ResultPath="$.t"),
                   C={"Type": "Choice", "Choices": [{"Variable": "$.ok", "BooleanEquals": False, "Next": "R1"}],
                      "Default": "A"},
                   R1=task("R2", ResultPath="$.r1"), R2=task("Bad", ResultPath="$.r2"), Bad={"Type": "Fail"},
                   A=task(OutputPath="$.x", ResultPath="$.x"))
    s = of(more, "T")
    assert s.read_count is None and "more than the 1 of the route that succeeds" in s.why


# -- Catch and Retry ---------------------------------------------------------------------

def test_catch_route_reads_through_the_catchers_result_path_and_the_failed_task_does_not_count() -> None:
    d = json.loads((REPO / "examples/offload/catch_path.asl.json").read_text())
    s = plan(d).states["Fetch"]
    assert (s.read_count, s.readers, s.kept_until_end) == (1, ("Transform", "Recover"), False)


def test_catcher_with_the_default_result_path_drops_it_so_that_route_reads_fewer() -> None:
    d = machine("T", T=task("U", ResultPath="$.t"),
                U=task("V", ResultPath="$.u", Catch=[{"ErrorEquals": ["States.ALL"], "Next": "H"}]),
                V=task(OutputPath="$.v", ResultPath="$.v"), H=task())
    s = of(d, "T")
    assert (s.read_count, s.readers) == (2, ("U", "V"))
    assert "Catch[0] of 'U' -> 'H' reads it 0 times" in s.why


def test_catch_route_that_reads_more_than_the_success_route_is_not_static() -> None:
    d = machine("T", T=task("U", ResultPath="$.t"),
                U=task(OutputPath="$.u", ResultPath="$.u",
                       Catch=[{"ErrorEquals": ["States.ALL"], "ResultPath": "$.err", "Next": "H1"}]),
                H1=task("H2", ResultPath="$.h1"), H2=task(OutputPath="$.h", ResultPath="$.h"))
    s = of(d, "T")
    assert s.read_count is None and "error route via Catch[0] of 'U'" in s.why


def test_retry_does_not_change_the_count() -> None:
    plain = machine("A", A=task("B", ResultPath="$.a"), B=task("C", ResultPath="$.b"), C=task(OutputPath="$.c",
                                                                                              ResultPath="$.c"))
    retried = json.loads(json.dumps(plain))
    for s in retried["States"].values():
        s["Retry"] = [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 5}]
    assert plan(plain).to_dict() == plan(retried).to_dict()
    assert counts(plan(retried))["A"] == 2


# -- Parallel and Map ----------------------------------------------------------------------

def test_parallel_branches_all_receive_its_input_and_its_output_is_the_list_of_branch_outputs() -> None:
    p = plan(json.loads((REPO / "examples/offload/parallel_fanout.asl.json").read_text()))
    assert p.states["Produce"].read_count == 3
    assert p.states["Produce"].readers == ("Checksum", "Compress", "Index")
    for branch in ("Checksum", "Compress", "Index"):
        assert p.states[branch].readers == ("Merge",) and p.states[branch].read_count == 1


def test_parallel_output_index_selects_one_branch() -> None:
    branches = [machine(f"B{i}", **{f"B{i}": task()}) for i in range(2)]
    d = machine("P", P={"Type": "Parallel", "Branches": branches, "Next": "Z"}, Z=task(InputPath="$[1]"))
    p = plan(d)
    assert p.states["B1"].readers == ("Z",) and p.states["B0"].read_count == 0


def test_map_over_a_result_reads_each_item_once_per_iteration() -> None:
    p = plan(json.loads((REPO / "examples/offload/map_items.asl.json").read_text()))
    assert (p.states["List"].read_count, p.states["List"].readers) == (1, ("Process",))
    assert (p.states["Process"].read_count, p.states["Process"].readers) == (1, ("Aggregate",))


def test_map_that_sends_it_to_every_iteration_is_not_static() -> None:
    d = machine("A", A=task("M", ResultPath="$.config"),
                M={"Type": "Map", "ItemsPath": "$.items", "Next": "Z",
                   "ItemSelector": {"config.$": "$.config", "item.$": "$$.Map.Item.Value"},
                   "ItemProcessor": machine("I", I=task())}, Z=task())
    s = of(d, "A")
    assert s.read_count is None and "every iteration of Map 'M'" in s.why


def test_legacy_iterator_and_parameters() -> None:
    d = machine("A", A=task("M", ResultPath="$.rows"),
                M={"Type": "Map", "ItemsPath": "$.rows", "Parameters": {"row.$": "$$.Map.Item.Value"},
                   "Iterator": machine("I", I=task("J", ResultPath="$.i"), J=task(OutputPath="$.j", ResultPath="$.j")),
                   "ResultPath": None, "End": True})
    p = plan(d)
    assert p.states["A"].readers == ("I", "J") and p.states["A"].read_count == 2
    assert p.states["I"].readers == ("J",)


def test_parallel_inside_a_map_iteration() -> None:
    inner = {"Type": "Parallel", "End": True, "Branches": [machine("X", X=task()), machine("Y", Y=task())]}
    d = machine("L", L=task("M"),
                M={"Type": "Map", "ItemProcessor": machine("P", P=inner), "Next": "Z"},
                Z=task(OutputPath="$.z", ResultPath="$.z"))
    p = plan(d)
    assert (p.states["L"].read_count, p.states["L"].readers) == (2, ("X", "Y"))  # each item: both branches
    assert (p.states["X"].read_count, p.states["X"].readers) == (1, ("Z",))  # via the Map's output list


def test_chained_maps_pass_each_iteration_result_to_one_iteration() -> None:
    d = machine("M1", M1={"Type": "Map", "ItemProcessor": machine("A", A=task()), "Next": "M2"},
                M2={"Type": "Map", "ItemProcessor": machine("B", B=task(OutputPath="$.b", ResultPath="$.b")),
                    "End": True})
    assert of(d, "A").readers == ("B",) and of(d, "A").read_count == 1


def test_parallel_catch_route_counts_every_inner_reader() -> None:
    branches = [machine("B0", B0=task()), machine("B1", B1=task())]
    d = machine("T", T=task("P", ResultPath="$.t"),
                P={"Type": "Parallel", "Branches": branches, "Next": "Z", "ResultPath": "$.p",
                   "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.err", "Next": "H"}]},
                Z=task(OutputPath="$.z", ResultPath="$.z"), H=task(OutputPath="$.h", ResultPath="$.h"))
    s = of(d, "T")
    # success: B0, B1, Z = 3; the catch route: at most B0, B1 and H = 3, not more
    assert (s.read_count, s.readers, s.kept_until_end) == (3, ("B0", "B1", "Z", "H"), False)


# -- what is not static ----------------------------------------------------------------------

def test_distributed_map() -> None:
    d = machine("A", A=task("M", ResultPath="$.a"),
                M={"Type": "Map", "ItemReader": {"Resource": "arn:aws:states:::s3:getObject"},
                   "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "EXPRESS"},
                                     **machine("I", I=task())}, "End": True})
    p = plan(d)
    assert p.states["A"].read_count is None and "Distributed Map 'M'" in p.states["A"].why
    assert p.states["I"].read_count is None and "child executions" in p.states["I"].why


def test_jsonata() -> None:
    d = {"QueryLanguage": "JSONata", **machine("A", A=task("B"), B=task())}
    s = of(d, "A")
    assert s.read_count is None and "JSONata" in s.why
    one_state = machine("A", A=task("B"), B={**task(), "QueryLanguage": "JSONata"})
    assert "'B' uses JSONata" in of(one_state, "A").why


def test_intrinsic_function_on_it_and_not_on_it() -> None:
    on = machine("A", A=task("B", ResultPath="$.a"), B=task(Parameters={"s.$": "States.JsonToString($.a)"}))
    s = of(on, "A")
    assert s.read_count is None and "intrinsic function States.JsonToString" in s.why
    off = machine("A", A=task("B", ResultPath="$.a"),
                  B=task(Parameters={"s.$": "States.Format('{}', $.name)", "a.$": "$.a"}))
    assert of(off, "A").read_count == 1


def test_dynamic_json_path() -> None:
    s = of(machine("A", A=task("B", ResultPath="$.a"), B=task(InputPath="$..a")), "A")
    assert s.read_count is None and "'$..a' of 'B' is not a static path" in s.why


def test_variables_that_hold_it() -> None:
    s = of(machine("A", A=task("B", Assign={"saved.$": "$"}), B=task()), "A")
    assert s.read_count is None and "variable" in s.why


def test_loop_that_can_read_it_again() -> None:
    d = machine("A", A=task("B", ResultPath="$.a"), B=task("C", ResultPath="$.b"),
                C={"Type": "Choice", "Choices": [{"Variable": "$.b.more", "BooleanEquals": True, "Next": "B"}],
                   "Default": "Done"},
                Done={"Type": "Succeed"})
    s = of(d, "A")
    assert s.read_count is None and "loop reaches 'B' again" in s.why


def _ladder(n: int, *, copy: bool) -> dict[str, Any]:
    """``n`` Choices in a row, each with two ways on that meet again; with ``copy`` the left
    way copies T's result to a key of its own, so no two routes end with the same JSON."""
    states: dict[str, Any] = {"T": task("C0", ResultPath="$.t")}
    for i in range(n):
        nxt = f"C{i + 1}" if i < n - 1 else "Z"
        states[f"C{i}"] = {"Type": "Choice", "Choices": [{"Variable": "$.x", "IsPresent": True, "Next": f"L{i}"}],
                           "Default": f"R{i}"}
        states[f"L{i}"] = task(nxt, ResultPath=f"$.l{i}")
        states[f"R{i}"] = ({"Type": "Pass", "InputPath": "$.t", "ResultPath": f"$.c{i}", "Next": nxt} if copy
                           else task(nxt, ResultPath=f"$.r{i}"))
    states["Z"] = task(OutputPath="$.z", ResultPath="$.z")
    return {"StartAt": "T", "States": states}


def test_a_ladder_of_choices_whose_routes_agree_is_planned_without_enumerating_them() -> None:
    s = plan(_ladder(30, copy=False), max_routes=1000).states["T"]  # 2**30 routes, all reading it 31 times
    assert (s.read_count, s.kept_until_end) == (31, False) and len(s.readers) == 61


def test_too_many_routes() -> None:
    s = plan(_ladder(16, copy=True), max_routes=200).states["T"]  # 2**16 routes that differ
    assert s.read_count is None and "more than 200 routes" in s.why


# -- bad input: one line, the JSON path and the fix ------------------------------------------

@pytest.mark.parametrize(("definition", "where", "fix"), [
    ('{"StartAt": "A", "States": {', "line 1 column 29", "fix the syntax"),
    ("[]", "$", 'write one object with "StartAt"'),
    ({"States": {"A": task()}}, "$.StartAt: missing", 'add "StartAt"'),
    ({"StartAt": "X", "States": {"A": task()}}, "$.StartAt: 'X' names no state", "name one of them"),
    (machine("A", A=task("Nope")), "$.States.A.Next: 'Nope' names no state", "add a state 'Nope'"),
    (machine("A", A={"Next": "B"}, B=task()), "$.States.A.Type: missing", 'add "Type": one of Task'),
    (machine("A", A={"Type": "Lambda", "End": True}), "$.States.A.Type: 'Lambda' is not a state type", "Task"),
    (machine("A", A={"Type": "Task", "Resource": ARN}), "$.States.A: has neither", '"End": true'),
    (machine("A", A=task(), B=task()), "$.States.B: unreachable", "point a transition at it"),
    (machine("A", **{"A": task("Fetch data"), "Fetch data": task(Catch=[{"ErrorEquals": ["States.ALL"],
                                                                         "Next": "Gone"}])}),
     "$.States['Fetch data'].Catch[0].Next: 'Gone' names no state", "name one of them"),
    (machine("P", P={"Type": "Parallel", "End": True, "Branches": [machine("A", A=task()), machine("A", A=task())]}),
     "$.States.P.Branches[1].States.A: a second state named 'A' (the first is $.States.P.Branches[0].States.A)",
     "rename one"),
    ('{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}, "A": {"Type": "Task"}}}',
     "$.States.A: the key 'A' is written twice", "unique name"),
    (machine("C", C={"Type": "Choice", "Choices": []}), "$.States.C.Choices: missing or empty", "add"),
    (machine("M", M={"Type": "Map", "End": True}), "$.States.M.ItemProcessor: missing", "add"),
])
def test_bad_definitions_name_the_json_path_and_the_fix(definition: Any, where: str, fix: str) -> None:
    with pytest.raises(AslError) as info:
        plan(definition)
    message = str(info.value)
    assert message.startswith(where) and fix in message and "\n" not in message


def test_examples_all_plan_and_every_result_has_a_static_count() -> None:
    for path in sorted((REPO / "examples/offload").glob("*.asl.json")):
        p = plan(path.read_text())
        assert p.states and all(s.read_count is not None for s in p.states.values()), path.name
        assert any(s.read_count and not s.kept_until_end for s in p.states.values()), path.name


def test_a_route_that_drops_it_and_then_fails_is_an_error_route() -> None:
    d = machine("T", T=task("C", ResultPath="$.t"),
                C={"Type": "Choice", "Choices": [{"Variable": "$.ok", "BooleanEquals": False, "Next": "Log"}],
                   "Default": "A"},
                Log=task("Bad", InputPath="$.request"),  # does not read it, and its result replaces the state
                Bad={"Type": "Fail"}, A=task(OutputPath="$.x", ResultPath="$.x"))
    s = of(d, "T")
    assert (s.read_count, s.readers, s.kept_until_end) == (1, ("A",), False)
    assert "Choice 'C' rule 0 -> 'Log' reads it 0 times" in s.why


def test_a_service_integration_that_receives_it_is_not_a_reader() -> None:
    d = machine("A", A=task("Save", ResultPath="$.a"),
                Save={"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
                      "Parameters": {"TableName": "t", "Item": {"data.$": "$.a"}}, "End": True})
    s = of(d, "A")
    assert s.read_count is None and "calls dynamodb:putItem, not a Lambda function" in s.why
    placeholder = machine("A", A=task("B", ResultPath="$.a"), B={"Type": "Task", "Resource": "${ConsumerArn}",
                                                                  "End": True})
    assert of(placeholder, "A").readers == ("B",)


def test_a_choice_that_tests_a_value_inside_it_gets_a_note() -> None:
    d = machine("T", T=task("C", ResultPath="$.t"),
                C={"Type": "Choice", "Choices": [{"And": [{"Variable": "$.t.status", "StringEquals": "ok"}],
                                                  "Next": "A"}], "Default": "B"},
                A=task(OutputPath="$.x", ResultPath="$.x"), B=task(OutputPath="$.x", ResultPath="$.x"))
    s = of(d, "T")
    assert s.read_count == 1 and "note: Choice 'C' tests $.t.status inside it" in s.why
    assert "note" not in of(machine("T", T=task("A"), A=task()), "T").why


def test_public_surface_and_no_heavy_imports() -> None:
    import subprocess
    import sys

    import sdk.asl_plan

    assert sorted(sdk.asl_plan.__all__) == sorted([
        "AslError", "Definition", "MAX_ROUTES", "Machine", "PICTURE_FORMATS", "Plan", "State", "StatePlan", "dumps",
        "load", "parse", "plan", "render", "to_dot"])
    code = ("import sys, sdk.asl_plan as p; p.plan({'StartAt': 'A', 'States': {'A': {'Type': 'Succeed'}}}); "
            "print(sorted(m for m in ('matplotlib', 'networkx', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"  # the planner is stdlib only: fit for a Lambda


def test_a_task_that_may_receive_it_is_listed_among_the_readers() -> None:
    s = of(machine("A", A=task("B", ResultPath="$.a"), B=task("C", ResultPath="$.b"),
                   C=task(Parameters={"s.$": "States.JsonToString($.a)"})), "A")
    assert s.read_count is None and s.readers == ("B", "C")
