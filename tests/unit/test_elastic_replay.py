"""The elasticity benchmark's pure parts (``sdk.local._elastic``): the shifting phases, the
pool-size statistics of a sampled step series, the hit ratio from the daemon's counters."""

from __future__ import annotations

import pytest

from sdk.local._elastic import hit_ratio, p99, served_reads, shifting_phases, step_stats


def test_phases_shift_the_working_set_and_never_share_objects() -> None:
    phases = shifting_phases([2, 5, 1], object_bytes=100, reads=3)
    assert [len(p.names) for p in phases] == [2, 5, 1]
    assert [p.bytes for p in phases] == [200, 500, 100] and all(p.reads == 3 for p in phases)
    names = [n for p in phases for n in p.names]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="at least one phase"):
        shifting_phases([3, 0], 100)
    with pytest.raises(ValueError, match="1 byte and 1 read"):
        shifting_phases([3], 100, reads=0)


def test_step_stats_weight_each_value_by_how_long_it_held() -> None:
    # 12 functions for 2 s, 24 for 1 s, 12 for 1 s: peak 24, mean (24 + 24 + 12) / 4
    assert step_stats([(10.0, 12), (12.0, 24), (13.0, 12)], t_end=14.0) == (24, pytest.approx(15.0))
    assert step_stats([], 5.0) == (0, 0.0)
    assert step_stats([(3.0, 7)], 3.0) == (7, 7.0)


def test_hits_are_gets_served_from_function_memory_or_cache_functions_only() -> None:
    before = {"gets": 10, "gets_from_functions": 8, "gets_from_cache": 0, "gets_from_buffer": 1, "gets_from_cos": 1}
    after = {"gets": 28, "gets_from_functions": 21, "gets_from_cache": 3, "gets_from_buffer": 2, "gets_from_cos": 2}
    # 20 reads issued, 18 reached the daemon: 13 from functions, 3 from cache functions, 1 from the
    # buffer, 1 from COS; the 2 that never reached it (COS tier) are COS reads too
    r = served_reads(before, after, reads=20)
    assert r["served"] == {"functions": 13, "cache": 3, "buffer": 1, "cos": 3}
    assert r["hit_ratio"] == pytest.approx(16 / 20) == hit_ratio(before, after, reads=20)
    assert r["buffer_hit_ratio"] == pytest.approx(1 / 20) and r["cos_read_ratio"] == pytest.approx(3 / 20)
    assert r["function_read_ratio"] + r["cache_read_ratio"] == pytest.approx(r["hit_ratio"])
    assert hit_ratio(before, after, reads=0) == 0.0


def test_p99_is_the_nearest_rank() -> None:
    assert p99([]) == 0.0
    assert p99([float(x) for x in range(64)]) == 63.0  # of 64 samples: the largest
    assert p99([float(x) for x in range(200)]) == 197.0  # rank ceil(0.99 * 200) = 198
