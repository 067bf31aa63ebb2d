"""Fan-out templates: replicas, {i}, {A..B} ranges, parameters and their errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import wds
from wds._templates import TemplateError, expand

from .test_wds_validation import doc, fn, issues_of


def test_expand_index_and_format() -> None:
    assert expand("m_{i}", {}, 3) == ["m_3"]
    assert expand("m_{i:03d}", {}, 3) == ["m_003"]


def test_expand_range_with_param_and_product() -> None:
    assert expand("c_{0..n:02d}", {"n": 3}, None) == ["c_00", "c_01", "c_02"]
    assert expand("p_{0..2}_{1..3}", {}, None) == ["p_0_1", "p_0_2", "p_1_1", "p_1_2"]


@pytest.mark.parametrize(("text", "index", "needle"), [
    ("x_{i}", None, "outside a replicated function"),
    ("x_{0..missing}", None, "names parameter 'missing'"),
    ("x_{3..1}", None, "is empty"),
    ("x_{i:zz}", 1, "format spec"),
    ("x_{oops", None, "brace that is not a template"),
])
def test_expand_errors(text: str, index: int | None, needle: str) -> None:
    with pytest.raises(TemplateError) as err:
        expand(text, {}, index)
    assert needle in err.value.message and err.value.fix


def mapreduce(**params: Any) -> dict[str, Any]:
    return doc(("split", 0, [fn("splitter", ["text"], ["chunk_{0..mappers}"], ["map_{0..mappers}"], start=True)]),
               ("map", 1, [fn("map_{i}", ["chunk_{i}"], ["part_{i}"], ["reduce"], replicas="mappers")]),
               ("reduce", 2, [fn("reduce", ["part_{0..mappers}"], ["total"], [])]),
               params={"mappers": 3, **params})


def test_replicas_from_param_default_and_override() -> None:
    wf = wds.loads(json.dumps(mapreduce()))
    assert [f for f in wf.functions if f.startswith("map_")] == ["map_0", "map_1", "map_2"]
    wf8 = wds.loads(json.dumps(mapreduce()), params={"mappers": 8})
    assert len([f for f in wf8.functions if f.startswith("map_")]) == 8
    assert wf8.functions["reduce"].input == tuple(f"part_{k}" for k in range(8))
    assert wf8.functions["map_5"].template == "map_{i}" and wf8.functions["map_5"].replica == 5


def test_fixed_replica_count() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["replicas"] = 2
    d["spec"]["split"]["functions"][0]["output"] = ["chunk_{0..2}"]
    d["spec"]["split"]["functions"][0]["next"] = ["map_{0..2}"]
    d["spec"]["reduce"]["functions"][0]["input"] = ["part_{0..2}"]
    assert len(wds.loads(json.dumps(d)).functions) == 4


def test_shared_input_in_a_replicated_function_is_broadcast() -> None:
    d = mapreduce()
    d["spec"]["split"]["functions"][0]["output"].append("dictionary")
    d["spec"]["map"]["functions"][0]["input"].append("dictionary")
    wf = wds.loads(json.dumps(d))
    assert all("dictionary" in wf.functions[f"map_{k}"].input for k in range(3))


def test_template_errors_point_at_the_entry() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["replicas"] = "workers"
    (issue,) = [i for i in issues_of(d) if "names parameter 'workers'" in i.message]
    assert issue.path == "$.spec.map.functions[0].replicas"
    assert "--param workers=N" in issue.fix


def test_replicated_name_without_index() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["name"] = "map"
    (issue,) = [i for i in issues_of(d) if "has no {i} in its name" in i.message]
    assert "map_{i:02d}" in issue.fix


def test_zero_replicas_and_bad_params() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["replicas"] = 0
    msgs = [i.message for i in issues_of(d)]
    assert any("'replicas' is 0" in m for m in msgs)
    msgs = [i.message for i in issues_of(mapreduce(), params={"nope": 2})]
    assert any("'nope' was given at run time but the file does not declare it" in m for m in msgs)
    d = mapreduce()
    d["params"]["mappers"] = -1
    assert any("must be a whole number >= 0" in i.message for i in issues_of(d))


def test_errors_in_expanded_functions_name_the_replica() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["output"] = ["part_{i}", "chunk_1"]
    msgs = [str(i) for i in issues_of(d)]
    assert any("replica 0: map_0" in m and "written by two functions" in m for m in msgs)


def test_examples_expand(example_paths: dict[str, Path]) -> None:
    counts = {name: len(wds.load(p).functions) for name, p in example_paths.items()}
    assert counts == {"wordcount": 8, "gg_compile": 27, "video": 22}
    assert len(wds.load(example_paths["wordcount"], params={"mappers": 64}).functions) == 68


def test_a_parameter_that_empties_its_uses_is_one_error(example_paths: dict[str, Path]) -> None:
    """``--param mappers=0`` empties four ranges and a replica count: one sentence names the
    parameter and its value once, instead of an error per string it empties."""
    text = example_paths["wordcount"].read_text()
    [issue] = wds.validate(text, source="wc.json", params={"mappers": 0})[1]
    assert issue.path == "$.params.mappers"
    assert issue.message.startswith("parameter 'mappers' is 0, which leaves nothing where the workflow uses it (")
    assert "'replicas' of 'mapper_{i:02d}'" in issue.message and "and 1 more" in issue.message
    assert issue.fix == 'give it a value of at least 1, with --param mappers=N or as its default in "params"'
    assert str(issue).count("mappers=") == 1 and "is empty" not in str(issue)
    issues = wds.validate(text, source="wc.json", params={"mappers": 0, "reducers": 0})[1]
    assert [i.path for i in issues] == ["$.params.mappers", "$.params.reducers"]


def test_a_range_that_needs_more_than_one_asks_for_enough() -> None:
    d = mapreduce()
    d["spec"]["map"]["functions"][0]["output"] = ["part_{i}_{2..mappers}"]
    [issue] = [i for i in issues_of(d, params={"mappers": 1}) if "mappers" in i.path]
    assert "parameter 'mappers' is 1" in issue.message and "at least 3" in issue.fix
