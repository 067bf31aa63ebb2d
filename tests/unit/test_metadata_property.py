"""Random executions with crashes, retries and duplicate reads never free early,
never free late, never decrement twice, and leak nothing at run end."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hdag
import wds
from metadata_server import CoreDriver, Freed

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount" / "wordcount.wds.json"
GRAPH = hdag.build(wds.load(WORDCOUNT))
ORDER = list(nx.topological_sort(GRAPH.function_graph()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy=st.sampled_from(["funcstore", "pocket", "oracle"]), grain=st.sampled_from([0, 1024]))
def test_random_retries_never_early_never_late_no_leak(data, policy, grain):
    d = CoreDriver(block_size=4096, data_chunks=2, parity_chunks=1, memory_grain=grain)
    key = d.register(WORDCOUNT)
    for i in range(4):
        d.capacity(f"s{i}", 16)
    r = d.start(key, policy=policy)
    size = st.integers(min_value=0, max_value=9000)
    for o in GRAPH.inputs:
        d.put(r, "", o, data.draw(size))
    freed: dict[str, int] = {}
    committed: set[str] = set()

    def note(out) -> None:
        for i in out:
            if isinstance(i, Freed):
                freed[i.object] = freed.get(i.object, 0) + 1

    for fn in ORDER:
        info = GRAPH.functions[fn]
        attempts = 1 if policy == "oracle" else data.draw(st.integers(min_value=1, max_value=3))  # oracle: no retries
        for attempt in range(attempts):
            last = attempt == attempts - 1
            reads = list(info.inputs)
            if not last:                                 # a crash part-way through
                reads = reads[: data.draw(st.integers(min_value=0, max_value=len(reads)))]
            for o in reads:
                for _ in range(1 if policy == "oracle" else data.draw(st.integers(min_value=1, max_value=2))):
                    note(d.get(r, fn, o))
                    if policy == "funcstore":            # never early: a declared reader that has not
                        assert d.state.runs[r].objects[o].state == "readable"   # committed finds it
            writes = list(info.outputs) if last else info.outputs[: data.draw(
                st.integers(min_value=0, max_value=max(len(info.outputs) - 1, 0)))]
            for o in writes:
                note(d.put(r, fn, o, 50 + len(o)))
            if last and not info.outputs:
                note(d.commit(r, fn))
            d.state.validate_state()
        committed.add(fn)
        # never late: every object whose readers all committed is gone (funcstore)
        if policy == "funcstore":
            for o, rec in d.state.runs[r].objects.items():
                readers = GRAPH.objects[o].readers
                if readers and set(readers) <= committed:
                    assert rec.state in ("freed", "kept"), o
        # a retry after the commit: reads never fail, nothing decrements twice
        if data.draw(st.booleans()) and policy != "oracle":
            for o in info.inputs:
                note(d.get(r, fn, o))
            for o in info.outputs:
                note(d.put(r, fn, o, 50 + len(o)))
            d.state.validate_state()
    assert all(n == 1 for n in freed.values())
    d.end(r)
    d.state.validate_state()
    assert d.state.allocator.allocated_bytes == 0 and d.state.live_bytes == 0
    assert sorted(d.state.runs[r].objects) == sorted(GRAPH.outputs)
