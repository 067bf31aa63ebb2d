"""The per-entry Lambda settings of a WDS function entry (``memory_mb``,
``timeout_s``, ``max_attempts``, ``layers``): parsed onto every replica,
and every bad value an issue naming its JSON path and a fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

import wds
from wds import Issue, LambdaSettings

LAYER = "arn:aws:lambda:eu-west-1:123456789012:layer:funcsion-deps:3"


def workflow(**settings: Any) -> dict[str, Any]:
    return {"app": "t", "workflow_id": 1, "category": "test", "params": {"n": 2}, "spec": {
        "s1": {"stage_id": 1, "functions": [
            {"start": True, "name": "split", "input": ["raw"], "output": ["a_{0..n}"], "next": ["p_{0..n}"]}]},
        "s2": {"stage_id": 2, "functions": [
            {"start": False, "name": "p_{i}", "replicas": "n", "input": ["a_{i}"], "output": ["r_{i}"], "next": [],
             **settings}]}}}


def issues(**settings: Any) -> list[Issue]:
    wf, found = wds.validate(json.dumps(workflow(**settings)), source="wf.json")
    assert (wf is None) == bool(found)
    return found


def test_settings_reach_every_replica_and_default_to_none() -> None:
    wf = wds.loads(json.dumps(workflow(memory_mb=2048, timeout_s=60, max_attempts=1, layers=[LAYER])))
    want = LambdaSettings(memory_mb=2048, timeout_s=60, max_attempts=1, layers=(LAYER,))
    assert wf.functions["p_0"].lambda_settings == wf.functions["p_1"].lambda_settings == want
    assert wf.functions["split"].lambda_settings == LambdaSettings()
    assert wds.layer_arn_region(LAYER) == "eu-west-1"


@pytest.mark.parametrize("key, value, message, fix", [
    ("memory_mb", 64, "'memory_mb' is 64; it must be between 128 and 10240", "write a value in [128, 10240]"),
    ("memory_mb", 10241, "'memory_mb' is 10241; it must be between 128 and 10240", "write a value in [128, 10240]"),
    ("memory_mb", "1GB", "'memory_mb' must be a whole number of megabytes of memory, as Lambda allows, not string",
     'write e.g. "memory_mb": 1024'),
    ("memory_mb", 512.5, "'memory_mb' must be a whole number", 'write e.g. "memory_mb": 1024'),
    ("timeout_s", 0, "'timeout_s' is 0; it must be between 1 and 900", "write a value in [1, 900]"),
    ("timeout_s", 901, "'timeout_s' is 901; it must be between 1 and 900", "write a value in [1, 900]"),
    ("timeout_s", True, "'timeout_s' must be a whole number of seconds", 'write e.g. "timeout_s": 300'),
    ("max_attempts", 0, "'max_attempts' is 0; it must be between 1 and 10", "write a value in [1, 10]"),
    ("max_attempts", 11, "'max_attempts' is 11; it must be between 1 and 10", "write a value in [1, 10]"),
    ("layers", LAYER, "'layers' must be an array of Lambda layer version ARNs, not string", 'write e.g. "layers": ['),
    ("layers", ["arn:aws:lambda:us-east-1:123456789012:layer:deps"], "is not a Lambda layer version ARN",
     "arn:aws:lambda:<region>:<account>:layer:<name>:<version>"),
    ("layers", ["arn:aws:lambda:us-east-1:123:layer:deps:1"], "is not a Lambda layer version ARN", "<account>"),
    ("layers", ["arn:aws:s3:::bucket/layer.zip"], "is not a Lambda layer version ARN", "<version>"),
    ("layers", [7], "number 7 is not a Lambda layer version ARN", "<version>"),
    ("layers", [LAYER, LAYER], "is listed twice", "list each layer once"),
    ("layers", [f"{LAYER[:-1]}{k}" for k in range(6)], "lists 6 layers; Lambda allows 5 per function", "merge layers"),
])
def test_a_bad_setting_is_one_issue_naming_path_and_fix(key: str, value: Any, message: str, fix: str) -> None:
    found = issues(**{key: value})
    assert len(found) == 1, found
    issue = found[0]
    assert message in issue.message and fix in issue.fix, issue
    assert issue.path.startswith(f"$.spec.s2.functions[0].{key}")
    assert str(issue).startswith("wf.json: $.spec.s2.functions[0]")


def test_every_bad_setting_is_reported_together_and_a_typo_gets_a_suggestion() -> None:
    found = issues(memory_mb=1, timeout_s=1000, max_attempts=-1, layers=["x"], memory_mbs=3)
    assert [i.path.rsplit(".", 1)[-1] for i in found] == ["memory_mbs", "memory_mb", "timeout_s", "max_attempts",
                                                          "layers[0]"]
    assert found[0].fix == "did you mean 'memory_mb'?"


def test_the_limits_are_accepted() -> None:
    for lo_hi in ((128, 1, 1), (10240, 900, 10)):
        memory, timeout, attempts = lo_hi
        assert issues(memory_mb=memory, timeout_s=timeout, max_attempts=attempts,
                      layers=[f"{LAYER[:-1]}{k}" for k in range(5)]) == []
