"""The ASL generated from an HDAG: levels, Parallel/Map shapes, retries, catch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hdag
import wds
from sdk.deploy import CHECK_TOKENS, CLEANUP, END_RUN, FAILED, TOKENS_REFUSED, build_asl, lambda_name, levels


def asl_for(path: Path, **params: int) -> tuple[hdag.HDAG, dict[str, Any]]:
    h = hdag.build(wds.load(path, params=params or None))
    return h, build_asl(h, lambda e: f"arn:aws:lambda:us-east-1:123456789012:function:{lambda_name('x', e)}",
                        "arn:cleanup")


def all_tasks(states: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in states.values():
        if s["Type"] == "Task":
            out.append(s)
        for b in s.get("Branches", []):
            out += all_tasks(b["States"])
        if "ItemProcessor" in s:
            out += all_tasks(s["ItemProcessor"]["States"])
    return out


def test_same_stage_dependencies_split_into_levels(fig9_path: Path) -> None:
    h = hdag.build(wds.load(fig9_path))
    lv = levels(h)
    assert [name for name, _ in lv] == ["stage_m", "stage_m1 (1 of 2)", "stage_m1 (2 of 2)", "stage_m2"]
    assert lv[1][1] == [["F3"], ["F4"]] and lv[2][1] == [["F5"]]


def test_fixed_stages_are_parallel_and_templates_are_inline_maps(example_paths: dict[str, Path]) -> None:
    h, asl = asl_for(example_paths["video"])
    states = asl["States"]
    assert states["split_stage"]["Type"] == "Parallel"
    encode = states["encode_stage"]
    assert encode["Type"] == "Parallel"
    kinds = sorted(next(iter(b["States"].values()))["Type"] for b in encode["Branches"])
    assert kinds == ["Pass", "Task"]
    h, asl = asl_for(example_paths["wordcount"], mappers=5)
    m = asl["States"]["map_stage"]
    assert m["Type"] == "Map" and m["ItemProcessor"]["ProcessorConfig"]["Mode"] == "INLINE"
    assert m["ItemSelector"]["function.$"] == "$$.Map.Item.Value"
    assert m["ItemSelector"]["run_id.$"] == "$$.Execution.Name"
    assert asl["States"]["map_stage: replicas"]["Result"]["items"] == [f"mapper_{k:02d}" for k in range(5)]
    assert "MaxConcurrency" in m and m["ResultPath"] is None


def test_every_task_has_retries_run_id_and_no_result(example_paths: dict[str, Path]) -> None:
    for path in example_paths.values():
        _, asl = asl_for(path)
        tasks = all_tasks(asl["States"])
        assert tasks
        for t in tasks:
            errors = [e for r in t["Retry"] for e in r["ErrorEquals"]]
            assert "Lambda.ServiceException" in errors and "Lambda.SdkClientException" in errors
            assert t["ResultPath"] is None
            assert "run_id.$" in t["Parameters"]["Payload"]
        assert any("States.TaskFailed" in r["ErrorEquals"] for t in tasks for r in t["Retry"])


def test_every_level_catches_into_cleanup(example_paths: dict[str, Path]) -> None:
    _, asl = asl_for(example_paths["gg_compile"])
    states = asl["States"]
    for name, s in states.items():
        if name in (END_RUN, CLEANUP, FAILED, CHECK_TOKENS, TOKENS_REFUSED) or s["Type"] == "Pass":
            continue
        assert s["Catch"][0]["Next"] == CLEANUP
    assert states[CLEANUP]["Next"] == FAILED and states[FAILED]["Type"] == "Fail"
    assert states[CLEANUP]["Parameters"]["Payload"]["status"] == "failed"
    assert states[END_RUN]["End"] is True
    # Every Next points at a state that exists; the chain reaches the end.
    for s in states.values():
        assert s.get("Next") is None or s["Next"] in states
    assert asl["StartAt"] == CHECK_TOKENS
    n, seen = states[CHECK_TOKENS]["Choices"][0]["Next"], []
    while n:
        seen.append(n)
        n = states[n].get("Next")
    assert seen[-1] == END_RUN


def test_tasks_start_only_with_run_scoped_tokens(example_paths: dict[str, Path]) -> None:
    _, asl = asl_for(example_paths["wordcount"])
    check = asl["States"][asl["StartAt"]]
    assert check["Type"] == "Choice" and check["Default"] == TOKENS_REFUSED
    rules = check["Choices"][0]["And"]
    assert {"Variable": "$.funcsion.store_token", "StringMatches": "run:*"} in rules
    assert {"Not": {"Variable": "$.funcsion.admin_token", "IsPresent": True}} in rules
    assert asl["States"][TOKENS_REFUSED]["Type"] == "Fail"


def test_state_stays_small_for_wide_fanout(example_paths: dict[str, Path]) -> None:
    _, asl = asl_for(example_paths["wordcount"], mappers=256)
    assert len(json.dumps(asl)) < 1024 * 1024  # the definition limit is 1 MB
    assert max(len(n) for n in asl["States"]) <= 80


def test_lambda_names_are_valid() -> None:
    assert lambda_name("word-count", "mapper_{i:02d}") == "word-count-mapper"
    assert len(lambda_name("a" * 100, "b")) == 64


def test_errors_no_retry_can_fix_are_not_retried(example_paths: dict[str, Path]) -> None:
    from sdk.exceptions import NON_RETRYABLE_ERRORS, FatalTaskError

    assert FatalTaskError.__name__ in NON_RETRYABLE_ERRORS and "Runtime.MarshalError" in NON_RETRYABLE_ERRORS
    _, asl = asl_for(example_paths["wordcount"])
    tasks = [t for t in all_tasks(asl["States"]) if "action" not in t["Parameters"]["Payload"]]  # not cleanup
    assert tasks
    for t in tasks:
        retry = t["Retry"]
        # Step Functions applies the first retrier whose ErrorEquals matches: the non-retryable
        # names must meet a MaxAttempts 0 retrier before States.TaskFailed catches everything
        first = {}
        for r in retry:
            for e in r["ErrorEquals"]:
                first.setdefault(e, r)
        for name in NON_RETRYABLE_ERRORS:
            assert first[name]["MaxAttempts"] == 0, name
        generic = next(k for k, r in enumerate(retry) if "States.TaskFailed" in r["ErrorEquals"])
        assert all(k < generic for k, r in enumerate(retry) if set(r["ErrorEquals"]) & set(NON_RETRYABLE_ERRORS))
        assert retry[generic]["MaxAttempts"] > 0


def test_an_entrys_max_attempts_sets_its_task_retrier(example_paths: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(example_paths["wordcount"].read_text())
    mapper = doc["spec"]["map_stage"]["functions"][0]
    mapper["max_attempts"] = 1  # one try: no retry on a task error
    doc["spec"]["reduce_stage"]["functions"][0]["max_attempts"] = 7
    path = tmp_path / "wc.wds.json"
    path.write_text(json.dumps(doc))
    h, asl = asl_for(path)
    states = asl["States"]

    def task_failed_attempts(task: dict[str, Any]) -> int:
        return int(next(r["MaxAttempts"] for r in task["Retry"] if r["ErrorEquals"] == ["States.TaskFailed"]))

    def item_task(stage: str) -> dict[str, Any]:
        processor = states[stage]["ItemProcessor"]
        return dict(processor["States"][processor["StartAt"]])

    assert task_failed_attempts(item_task("map_stage")) == 0
    assert task_failed_attempts(item_task("reduce_stage")) == 6
    assert task_failed_attempts(states["split_stage"]) == 2  # no setting: AslOptions' default


def test_state_names_are_unique_across_the_whole_state_machine(example_paths: dict[str, Path]) -> None:
    """The States Language wants every state name unique in the whole machine, nested Map item
    processors included (two stages' Maps each holding a state named "task" broke that)."""
    names: list[str] = []

    def walk(states: dict[str, Any]) -> None:
        for name, state in states.items():
            names.append(name)
            for nested in [state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])]:
                if nested:
                    walk(nested["States"])

    for path in example_paths.values():
        names.clear()
        walk(asl_for(path)[1]["States"])
        assert len(names) == len(set(names)), (path.name, sorted(n for n in names if names.count(n) > 1))
