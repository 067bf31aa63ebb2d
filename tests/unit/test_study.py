"""The utilization study's pure figures: jiffy's lease, reductions, cost, the budget's job
count and summed memory series."""

from __future__ import annotations

from typing import Any

import pytest

from sdk.local import _study
from storage_functions.local._pricing import (
    PRICE_PER_GB_SECOND_USD,
    PRICE_PER_REQUEST_USD,
)


def test_the_lease_is_the_longest_observed_lifetime() -> None:
    reports = [{"objects": {"a": {"written_at": 0.1, "freed_at": 0.4}, "b": {"written_at": 0.2, "freed_at": None}}},
               {"objects": {"c": {"written_at": 1.0, "freed_at": 2.25}}}]
    assert _study.lease_ms(reports) == 1250
    assert _study.lease_ms([{"objects": {}}]) == 1  # never 0: jiffy:0 is not a policy


def test_reductions_against_pocket_jiffy_and_the_oracle() -> None:
    r = _study.reductions({"funcstore": 11.0, "pocket": 100.0, "jiffy": 55.0, "oracle": 10.0})
    assert r == {"reduction_vs_pocket": 0.89, "reduction_vs_jiffy": 0.8, "over_oracle": 0.1}
    assert _study.reductions({"funcstore": 1.0, "pocket": 0.0})["reduction_vs_pocket"] is None


def test_storage_cost_at_aws_prices() -> None:
    c = _study.storage_cost(2048.0, 10, 1000, 1000)
    assert c["function_gb_s"] == 2.0
    assert c["function_usd"] == pytest.approx(2 * PRICE_PER_GB_SECOND_USD)
    assert c["invocation_usd"] == pytest.approx(10 * PRICE_PER_REQUEST_USD)
    assert c["cos_usd"] == pytest.approx(0.005 + 0.0004)
    assert c["total_usd"] == pytest.approx(c["function_usd"] + c["invocation_usd"] + c["cos_usd"])


def test_store_deltas_count_invocations_puts_and_cos_reads() -> None:
    before = {"functions": [{"invocations": 2}, {"invocations": 1}], "uploads": 5, "cos_fallbacks": 0}
    after = {"functions": [{"invocations": 4}, {"invocations": 1}], "uploads": 9, "cos_fallbacks": 3}
    assert _study.store_deltas(before, after) == {"invocations": 2, "cos_puts": 4, "cos_gets": 3}


def test_jobs_are_admitted_in_turn_while_their_peaks_fit() -> None:
    assert _study.max_jobs([100, 50], 300) == 4  # 100 + 50 + 100 + 50; the next 100 does not fit
    assert _study.max_jobs([100, 50], 99) == 0
    assert _study.max_jobs([], 1000) == 0


def test_series_of_several_runs_sum_over_time() -> None:
    a = [[0.0, 10, 1], [2.0, 20, 2], [4.0, 0, 0]]
    b = [[1.0, 5, 5], [3.0, 0, 0]]
    assert _study.summed_series([a, b]) == [(0.0, 10), (1.0, 15), (2.0, 25), (3.0, 20), (4.0, 0)]
    assert _study.summed_series([a, b], column=2) == [(0.0, 1), (1.0, 6), (2.0, 7), (3.0, 2), (4.0, 0)]


def test_the_median_run_counts_and_every_runs_figure_is_kept() -> None:
    runs = [{"id": i, "memory": {"mb_s": v}} for i, v in enumerate([9.0, 3.0, 5.0])]
    m = _study.median_run(runs)
    assert m["id"] == 2 and m["mb_s_runs"] == [9.0, 3.0, 5.0]
    assert _study.median_run(runs[:2])["id"] == 1          # an even count: the lower middle
    with pytest.raises(ValueError, match="at least one"):
        _study.median_run([])


def test_pocket_reserves_its_peak_for_the_whole_run() -> None:
    assert _study.reserved_mb_s(64 << 20, 1.5) == 96.0
    assert _study.reserved_series(64 << 20, 1.5) == [[0.0, 64 << 20, 64 << 20], [1.5, 0, 0]]


def test_the_admission_controller_gets_jobs_until_one_must_wait() -> None:
    jobs = _study.admission_jobs([("a", 100), ("b", 50)], 300, cap=10)
    assert jobs == [("a", 100), ("b", 50), ("a", 100), ("b", 50), ("a", 100)]   # 400 > 300: the fifth waits
    assert len(_study.admission_jobs([("a", 1)], 10**9, cap=7)) == 7
    assert _study.admission_jobs([("a", 0)], 300, cap=10) == []
    assert len(_study.admission_jobs([("a", 10), ("b", 20)], 1000)) == 68         # no cap: 1020 > 1000
    assert _study.admission_jobs([("a", 10)], 1000, cap=-1) == []


def test_a_pocket_report_is_charged_as_its_reservation_and_keeps_what_it_allocated() -> None:
    from sdk.cli.bench_utilization import _reserve

    series = [[0.1, 2 << 20, 100], [0.5, 4 << 20, 200], [0.9, 0, 0]]
    d = _reserve({"policy": "pocket", "wall_s": 2.0, "memory": {"mb_s": 1.5, "peak_bytes": 4 << 20, "series": series}})
    mem = d["memory"]
    assert mem["mb_s"] == 8.0 and mem["alloc_mb_s"] == 1.5 and mem["alloc_series"] == series
    assert mem["series"] == [[0.0, 4 << 20, 4 << 20], [2.0, 0, 0]] and "reserv" in mem["charged_as"]
    assert _reserve(d)["memory"]["mb_s"] == 8.0                  # once only
    other = {"policy": "funcstore", "wall_s": 2.0, "memory": {"mb_s": 1.5, "peak_bytes": 4 << 20, "series": series}}
    assert _reserve(other)["memory"] == {"mb_s": 1.5, "peak_bytes": 4 << 20, "series": series}


def test_over_the_oracle_is_blocks_per_byte_held_times_bytes_held_against_the_oracle() -> None:
    def rep(mb_s: float, live: float, objects: dict[str, tuple[int, float, float]]) -> dict[str, Any]:
        return {"memory": {"mb_s": mb_s, "live_mb_s": live},
                "objects": {n: {"size": sz, "written_at": w, "freed_at": f, "tier": "memory"}
                            for n, (sz, w, f) in objects.items()}}

    f = rep(30.0, 20.0, {"a": (1 << 20, 0.0, 2.0), "b": (1 << 20, 1.0, 2.0), "c": (5, 0.0, None)})
    o = rep(16.0, 16.0, {"a": (1 << 20, 0.0, 1.5), "b": (1 << 20, 1.0, 1.5)})
    d = _study.decompose([f], [o])
    assert d == {"blocks": 1.5, "held": 1.25, "held_objects": 1.5, "over_oracle": 0.875}
    assert abs(d["blocks"] * d["held"] - 1 - d["over_oracle"]) < 1e-9
    assert _study.decompose([f], [rep(0.0, 0.0, {})])["over_oracle"] is None


def test_every_policy_in_one_unit_against_the_trace_oracle_of_funcstores_runs() -> None:
    def rep(grain: float, block: float, trace: float = 0.0) -> dict[str, Any]:
        return {"memory": {"mb_s": grain, "block_mb_s": block, "live_mb_s": grain / 2, "trace_oracle_mb_s": trace}}

    u = _study.in_units({"funcstore": [rep(2.0, 4.0, 1.0), rep(1.0, 2.0, 0.5)],
                         "pocket": [rep(20.0, 60.0), rep(10.0, 30.0)], "jiffy": [rep(10.0, 40.0), rep(5.0, 20.0)]})
    assert u["grain"]["mb_s"] == {"funcstore": 3.0, "pocket": 30.0, "jiffy": 15.0, "oracle": 1.5}
    assert (u["grain"]["reduction_vs_pocket"], u["grain"]["reduction_vs_jiffy"], u["grain"]["over_oracle"]) == \
        (0.9, 0.8, 1.0)
    assert u["block"]["mb_s"] == {"funcstore": 6.0, "pocket": 90.0, "jiffy": 60.0, "oracle": 1.5}
    assert u["paper_block_model"]["mb_s"] == {"funcstore": 3.0, "pocket": 90.0, "jiffy": 60.0, "oracle": 1.5}
    assert all("charged_as" in col for col in u.values())
    assert _study.shares({"funcstore": {"a": 3.0, "b": 1.0}, "none": {"a": 0.0}}) == \
        {"funcstore": {"a": 0.75, "b": 0.25}, "none": {"a": None}}
    d = _study.decompose_trace([rep(2.0, 4.0, 1.0), rep(1.0, 2.0, 0.5)])
    assert d == {"blocks": 2.0, "held": 1.0, "over_oracle": 1.0}
