"""Lifetime grouping and whole storage functions (issue 32 item 3), on the feature
pipeline, whose stages write objects read at once beside objects kept to the end, on
storage functions that hold 8 MiB each (``sdk.cli._bench_grouping.grouping_stack``) so a
run spans several: under ``funcstore`` functions leave the pool during the run (before
its last commit), each one the metadata server told the daemon to release; and, on the
same trace, grouping objects that die at different times into different pools releases
more of them than ``funcstore:nogroup`` (each lifetime group fills functions of its own:
``metadata_server._allocator.by_lifetime``). The grouping is fed the lifetimes the run
measured: the served model predicts every object of this workload under 0.25 s, one
lifetime bucket, so its pools are nogroup's one (what ``bench lifetime`` reports)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sdk.cli._bench_grouping import DATA_MB, FUNCTION_MEMORY_MB, grouping_stack, replay, run_functions
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow

from .examples import EXAMPLES, check_freed, require_modules

FEATURES = EXAMPLES / "features" / "features.wds.json"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Any, int]]:
    """One run of the pipeline under funcstore: its report, its metadata record, and the
    blocks per storage function."""
    require_modules("features", "numpy")
    with grouping_stack(str(tmp_path_factory.mktemp("grouping"))) as st:
        r = run_workflow(FEATURES, config=st.config, stack=st, policy="funcstore",
                         params={"shards": 6, "parts": 3}, options=ExecutorOptions(progress=False))
        assert r.status == "succeeded", r.error
        d = r.to_dict()
        check_freed(d)
        yield d, st.handler.state.runs[d["run_id"]], DATA_MB * (1 << 20) // st.config.block_size


@pytest.mark.slow
def test_functions_leave_the_pool_during_the_run(traced: tuple[dict[str, Any], Any, int]) -> None:
    _, run, _ = traced
    fig = run_functions(run, FUNCTION_MEMORY_MB)
    assert fig["functions_used"] > 1                            # the run spans several functions
    assert fig["functions_released"] >= 1                       # released before the last commit
    # every release the measure counts is one the metadata server told the daemon
    assert run.counters["functions_released"] >= fig["functions_released"]


@pytest.mark.slow
def test_grouping_releases_more_functions_than_nogroup_on_the_same_trace(
        traced: tuple[dict[str, Any], Any, int]) -> None:
    d, run, blocks = traced
    lifetimes = {name: seconds for name, (seconds, _size) in run.measured.items()}
    assert len(lifetimes) > len(d["objects"]) // 2
    figs = {p: replay(d["objects"], lifetimes, p, blocks, 1 << 20, 10, 2, 12)
            for p in ("funcstore", "funcstore:expiry", "funcstore:nogroup")}
    grouped = max(figs["funcstore"]["functions_released"], figs["funcstore:expiry"]["functions_released"])
    assert figs["funcstore:nogroup"]["functions_released"] < grouped, figs
