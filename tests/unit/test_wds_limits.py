"""The bounds on one WDS (``wds.Limits``): each is checked before the work it
bounds, so a hostile file is refused in milliseconds with one issue that
names the limit and the config field that raises it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import wds
from wds import Issue, Limits, WDSValidationError
from wds._templates import TemplateError, expand, size

from .test_wds_validation import doc, fn, issues_of


def only(d: dict[str, Any] | str, limits: Limits | None = None, **kw: Any) -> Issue:
    (issue,) = issues_of(d, limits=limits, **kw)
    return issue


def wide(replicas: int | str, output: str = "o_{i}", **top: Any) -> dict[str, Any]:
    return doc(("s", 0, [fn("w_{i}", ["in"], [output], [], start=True, replicas=replicas)]), **top)


def test_defaults_fit_real_workflows(example_paths: dict[str, Path], fig9_path: Path) -> None:
    for path in [*example_paths.values(), fig9_path]:
        wds.load(path, limits=Limits())
    limits = Limits()
    assert (limits.max_bytes, limits.max_depth, limits.max_functions, limits.max_objects, limits.max_edges,
            limits.max_range, limits.max_format_width) == (4 << 20, 32, 10_000, 200_000, 1_000_000, 100_000, 32)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_functions"):
        Limits(max_functions=0)


def test_replicas_over_the_function_limit_are_refused_before_expanding() -> None:
    t0 = time.perf_counter()
    issue = only(wide(100_000))
    assert time.perf_counter() - t0 < 2.0  # 100,000 functions were never made
    assert issue.path == "$.spec.s.functions[0].replicas"
    assert "'replicas' is 100,000, over the limit of 10,000" in issue.message
    assert "wds_max_functions" in issue.message and "FUNCSION_WDS_MAX_FUNCTIONS" in issue.fix


def test_a_huge_run_time_parameter_is_refused_like_any_count() -> None:
    d = wide("mappers", params={"mappers": 2})
    issue = only(d, params={"mappers": 10**20})
    assert "'replicas' is 100,000,000,000,000,000,000, over the limit" in issue.message


def test_functions_are_counted_over_the_whole_workflow() -> None:
    d = doc(("s", 0, [fn("a_{i}", ["in"], ["a_{i}"], [], start=True, replicas=6),
                      fn("b_{i}", ["in"], ["b_{i}"], [], start=True, replicas=5)]))
    issue = only(d, Limits(max_functions=10))
    assert issue.path == "$.spec"
    assert "expands to 11 functions, over the limit of 10" in issue.message
    assert "'a_{i}' (6)" in issue.message  # the largest entries are named
    assert issues_of(d, limits=Limits(max_functions=11)) == []


def test_range_product_is_sized_before_it_is_made() -> None:
    d = doc(("s", 0, [fn("w", ["in"], ["o_{0..101}_{0..101}_{0..101}"], [], start=True)]))
    issue = only(d)
    assert issue.path == "$.spec.s.functions[0].output[0]"
    assert "expands to 1,030,301 names, over the limit of 100,000" in issue.message and "wds_max_range" in issue.message
    assert size("o_{0..101}_{0..101}_{0..101}", {}) == 101 ** 3
    assert size("x_{i}_{0..n}", {"n": 4}) == 4


def test_edges_are_bounded_across_replicas() -> None:
    # each string is small, but 100 replicas each read 100 objects: 101 + 100 * (100 + 1) names
    d = doc(("a", 0, [fn("p", ["in"], ["x_{0..100}"], [], start=True)]),
            ("b", 1, [fn("r_{i}", ["x_{0..100}"], ["r_{i}"], [], replicas=100)]))
    issue = only(d, Limits(max_edges=10_000))
    assert "expand to 10,201 names, over the limit of 10,000" in issue.message and "wds_max_edges" in issue.message
    assert issues_of(d, limits=Limits(max_edges=10_201)) == []


def test_objects_are_counted_after_a_bounded_expansion() -> None:
    d = doc(("s", 0, [fn("w", ["in"], ["o_{0..50}"], [], start=True)]), inputs=["extra"])
    issue = only(d, Limits(max_objects=51))
    assert "has 52 objects, over the limit of 51" in issue.message and "wds_max_objects" in issue.message
    assert issues_of(d, limits=Limits(max_objects=52)) == []


@pytest.mark.parametrize(("text", "what"), [
    ("o_{0..3:99999999d}", "width of 99,999,999"),
    ("o_{0..3:>99999999}", "width of 99,999,999"),
    ("o_{0..3:.99999999f}", "precision of 99,999,999"),
    ("o_{0..3:" + "9" * 5000 + "d}", "5000-digit number"),
])
def test_format_width_is_bounded(text: str, what: str) -> None:
    issue = only(doc(("s", 0, [fn("w", ["in"], [text], [], start=True)])))
    assert what in issue.message and "wds_max_format_width" in issue.message
    assert len(str(issue)) < 500  # a 5000-digit spec is not echoed whole


def test_format_width_in_a_function_name_and_templates_module() -> None:
    d = doc(("s", 0, [fn("w_{i:40d}", ["in"], ["o_{i}"], [], start=True, replicas=2)]))
    assert "width of 40" in only(d).message
    assert issues_of(d, limits=Limits(max_format_width=40)) == []
    with pytest.raises(TemplateError, match="width of 9"):
        expand("x_{i:9d}", {}, 1, max_width=8)
    assert expand("x_{i:08d}", {}, 1, max_width=8) == ["x_00000001"]


def test_nesting_is_bounded_before_json_loads() -> None:
    deep = '{"app": ' + "[" * 100_000 + "]" * 100_000 + "}"
    issue = only(deep)
    assert "more than 32 levels deep" in issue.message and "wds_max_depth" in issue.message
    unclosed = '{"app": ' + "[" * 100_000  # unbalanced: json.loads's RecursionError becomes the same issue
    assert "more than 32 levels deep" in only(unclosed).message
    # $ > spec > stage > functions > entry > input: 6 levels
    ok = json.dumps({**doc(("s", 0, [fn("w", ["in"], ["o"], [], start=True)])), "description": [[[["x"]]]]})
    assert issues_of(ok, limits=Limits(max_depth=6)) == []
    assert "more than 5 levels" in only(ok, Limits(max_depth=5)).message
    brackets_in_strings = json.dumps({**json.loads(ok), "description": '[[[[[[[[[\\"{{{{{{{{{{"'})
    assert issues_of(brackets_in_strings, limits=Limits(max_depth=6)) == []
    assert "more than 6 levels" in only(json.dumps({**json.loads(ok), "description": [[[[[["x"]]]]]]}),
                                        Limits(max_depth=6)).message


def test_text_size_is_bounded(tmp_path: Path) -> None:
    good = json.dumps(doc(("s", 0, [fn("w", ["in"], ["o"], [], start=True)])))
    assert issues_of(good, limits=Limits(max_bytes=len(good))) == []
    issue = only(good, Limits(max_bytes=len(good) - 1))
    assert f"larger than the limit of {len(good) - 1:,} bytes" in issue.message and "wds_max_bytes" in issue.message
    assert "FUNCSION_WDS_MAX_BYTES" in issue.fix
    utf8 = good.replace('"t"', '"\u00e9\u00e9"')  # two more bytes than characters
    assert only(utf8, Limits(max_bytes=len(utf8))).path == "$"


def test_load_reads_no_further_than_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.wds.json"
    big.write_text(json.dumps({**doc(("s", 0, [fn("w", ["in"], ["o"], [], start=True)])), "description": "x" * 5000}))
    with pytest.raises(WDSValidationError) as err:
        wds.load(big, limits=Limits(max_bytes=4096))
    (issue,) = err.value.issues
    assert issue.source == str(big) and "larger than the limit of 4,096 bytes" in issue.message
    assert "\n" not in str(err.value)  # one issue, one line
    assert wds.load(big, limits=Limits(max_bytes=8192)).app == "t"


def test_absurdly_long_numbers_are_refused_not_converted() -> None:
    text = '{"app": "x", "workflow_id": ' + "9" * 5000 + ', "category": "c", "spec": {}}'
    assert "5000 digits" in only(text).message
    issue = only(wide("9" * 5000))
    assert "5000-digit number" in issue.message


def test_wide_next_fan_validates_in_linear_time() -> None:
    """2000 start functions each name 50 functions of a 2000-long data chain in next:
    a per-edge search of the chain took 111 s here; the ancestor bitsets take about one."""
    chain = [fn(f"c{k}", [f"co{k - 1}" if k else "in"], [f"co{k}"], [], start=k == 0) for k in range(2000)]
    fans = [fn(f"x{j}", ["in"], [f"xo{j}"], ["c{1..51}"], start=True) for j in range(2000)]
    d = doc(("fan", 0, fans), ("chain", 1, chain))
    t0 = time.perf_counter()
    assert issues_of(d) == []
    assert time.perf_counter() - t0 < 10.0


def test_next_against_the_data_flow_is_still_found_through_a_long_chain() -> None:
    chain = [fn(f"c{k}", [f"co{k - 1}" if k else "in"], [f"co{k}"], [], start=k == 0) for k in range(300)]
    chain[299]["next"] = ["c5"]
    issue = only(doc(("chain", 1, chain)))
    assert "next edge 'c299' -> 'c5' contradicts the data flow" in issue.message


def test_config_fields_build_the_limits(tmp_path: Path) -> None:
    from sdk._config import Config, ConfigError

    assert Config().wds_limits() == Limits()
    cfg = Config.load(cwd=tmp_path, env={"FUNCSION_WDS_MAX_FUNCTIONS": "20"}, wds_max_depth=8)
    assert cfg.wds_limits() == Limits(max_functions=20, max_depth=8)
    (tmp_path / "funcsion.toml").write_text("wds_max_range = 7\nwds_max_format_width = 4\n")
    assert Config.load(cwd=tmp_path, env={}).wds_limits() == Limits(max_range=7, max_format_width=4)
    with pytest.raises(ConfigError, match=r"'wds_max_bytes' = 0 \(from \$FUNCSION_WDS_MAX_BYTES\).*at least 1"):
        Config.load(cwd=tmp_path, env={"FUNCSION_WDS_MAX_BYTES": "0"})
