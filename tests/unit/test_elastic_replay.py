"""The elasticity benchmark's pure parts (``sdk.local._elastic``): the shifting phases, the
pool-size statistics of a sampled step series, the hit ratio from the daemon's counters."""

from __future__ import annotations

import pytest

from sdk.local._elastic import hit_ratio, p99, shifting_phases, step_stats


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


def test_hit_ratio_counts_cos_answers_and_cos_tier_reads_as_misses() -> None:
    before = {"gets": 10, "buffer_hits": 1, "cos_fallbacks": 0}
    after = {"gets": 28, "buffer_hits": 2, "cos_fallbacks": 1}
    # 20 reads issued, 18 reached the daemon's GET path: 1 from COS, 1 from the daemon's buffer
    assert hit_ratio(before, after, reads=20) == pytest.approx(17 / 20)
    assert hit_ratio(before, after, reads=20, functions_only=True) == pytest.approx(16 / 20)
    assert hit_ratio(before, after, reads=0) == 0.0


def test_p99_is_the_nearest_rank() -> None:
    assert p99([]) == 0.0
    assert p99([float(x) for x in range(64)]) == 63.0  # of 64 samples: the largest
    assert p99([float(x) for x in range(200)]) == 197.0  # rank ceil(0.99 * 200) = 198
