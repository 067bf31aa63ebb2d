"""The trace oracle (``RunRecord.trace_oracle_byte_s``): every object in function memory, its
bytes from the end of its write to its last read. A property over random timings, sizes and
policies: no policy's memory-time falls below it (so a study's ``over_oracle`` against it is
never negative: the oracle policy too, which also holds outputs nobody reads until they
are kept), and a run's end does not lose it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_server import CoreDriver

FIG9 = Path(__file__).parents[1] / "data" / "fig9.wds.json"

#: Fig. 9's operations: (function, kind, object); a put is split into its begin and finish
OPS = [("", "put", "in1"), ("", "put", "in2"), ("F1", "get", "in1"), ("F1", "put", "a"),
       ("F2", "get", "in2"), ("F2", "put", "b1"), ("F2", "put", "b2"), ("F3", "get", "a"),
       ("F3", "put", "c"), ("F4", "get", "b1"), ("F4", "put", "d"), ("F5", "get", "b2"),
       ("F5", "get", "d"), ("F5", "put", "e"), ("F6", "get", "a"), ("F6", "get", "c"),
       ("F6", "get", "e"), ("F6", "put", "result")]


def _run(fig9: Path, policy: str, steps: list[float], sizes: list[int]) -> dict[str, float]:
    d = CoreDriver(block_size=1000, memory_grain=0)
    d.capacity("s0", 64)
    r = d.start(d.register(fig9), policy=policy)
    for i, (fn, kind, obj) in enumerate(OPS):
        if kind == "put":
            d.begin(r, fn, obj, sizes[i])
            d.advance(steps[2 * i])                  # the bytes travel
            d.finish(r, fn, obj)
        else:
            d.get(r, fn, obj)
        d.advance(steps[2 * i + 1])
    d.end(r)
    d.state.validate_state()
    return d.state.runs[r].summary()  # type: ignore[no-any-return]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 3.0), min_size=2 * len(OPS), max_size=2 * len(OPS)),
       st.lists(st.integers(1, 3500), min_size=len(OPS), max_size=len(OPS)),
       st.sampled_from(["funcstore", "pocket", "jiffy:100000", "oracle"]))
def test_no_policy_holds_less_than_the_trace_oracle(steps: list[float], sizes: list[int], policy: str) -> None:
    s = _run(FIG9, policy, steps, sizes)
    trace = s["trace_oracle_byte_s"]
    assert trace >= 0
    assert s["allocated_mb_s"] * 1e6 >= trace - 1e-6
    assert s["live_mb_s"] * 1e6 >= trace - 1e-6


def test_the_trace_counts_write_end_to_last_read(fig9_path: Path) -> None:
    """in1 (100 B) is readable at t=1 and last read at t=5: 400 byte-seconds, whatever is held after."""
    steps = [1.0] * (2 * len(OPS))
    sizes = [100] * len(OPS)
    d = CoreDriver(block_size=1000, memory_grain=0)
    d.capacity("s0", 64)
    r = d.start(d.register(fig9_path), policy="pocket")
    d.begin(r, "", "in1", 100)
    d.advance(1.0)
    d.finish(r, "", "in1")                           # t=1
    d.advance(4.0)
    d.get(r, "F1", "in1")                            # t=5
    d.advance(10.0)
    assert d.state.runs[r].summary()["trace_oracle_byte_s"] == pytest.approx(400.0)
    assert _run(fig9_path, "pocket", steps, sizes)["trace_oracle_byte_s"] > 0
