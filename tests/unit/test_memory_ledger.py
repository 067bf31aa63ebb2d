"""The daemon's physical memory ledger: blocks held per function and per run,
byte-seconds and peaks, against a model computed independently."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_functions.daemon._ledger import MemoryLedger, run_of

BS = 1000


def test_run_of_store_and_chunk_keys():
    assert run_of("r-1/counts_00") == "r-1"
    assert run_of("loose") == ""


def test_slices_share_a_block_and_free_it_with_the_last():
    led = MemoryLedger(BS)
    led.stored(0.0, "sion-0", "r-1/a", 3, 0, 400)
    led.stored(1.0, "sion-0", "r-1/b", 3, 400, 500)
    assert led.function_bytes("sion-0") == BS
    s = led.run_summary("r-1", 1.0)
    assert s["allocated_bytes"] == BS and s["live_bytes"] == 900
    led.released(2.0, "sion-0", "r-1/a")
    assert led.function_bytes("sion-0") == BS          # b still holds block 3
    led.released(4.0, "sion-0", "r-1/b")
    assert led.function_bytes("sion-0") == 0
    s = led.run_summary("r-1", 10.0)
    # one block from t=0 to t=4; live 400 for [0,2), 500 for [1,4)
    assert s["allocated_mb_s"] * (1 << 20) == pytest.approx(4 * BS)
    assert s["live_mb_s"] * (1 << 20) == pytest.approx(400 * 2 + 500 * 3)
    assert s["peak_allocated_bytes"] == BS and s["peak_live_bytes"] == 900
    led.validate()


def test_a_chunk_spanning_blocks_and_chunk_keys_count_for_their_run():
    led = MemoryLedger(BS)
    led.stored(0.0, "sion-2", "7/0/3/r-9/big", 5, 600, 1900)   # 400 in 5, 1000 in 6, 500 in 7
    assert led.function_bytes("sion-2") == 3 * BS
    assert led.run_summary("r-9", 0.0)["allocated_bytes"] == 3 * BS
    led.validate()


def test_storing_a_key_again_replaces_it_and_function_loss_drops_everything():
    led = MemoryLedger(BS)
    led.stored(0.0, "f", "r/a", 0, 0, 10)
    led.stored(0.0, "f", "r/a", 1, 0, 10)
    assert led.function_grains["f"].edges == {1: 1} and len(led.function_grains["f"]) == 1
    led.stored(0.0, "g", "r/b", 0, 0, 10)
    assert led.function_lost(1.0, "f") == 1
    assert led.function_bytes("f") == 0 and led.function_bytes("g") == BS
    assert led.run_summary("r", 1.0)["live_bytes"] == 10
    led.validate()


def test_bad_entries_are_refused_and_unknown_releases_ignored():
    led = MemoryLedger(BS)
    with pytest.raises(ValueError):
        led.stored(0.0, "f", "r/a", -1, 0, 10)
    with pytest.raises(ValueError):
        led.stored(0.0, "f", "r/a", 0, BS, 10)
    assert led.released(0.0, "f", "r/zzz") is False
    assert led.run_summary("nope", 0.0) is None


def test_series_stays_bounded_and_integrals_exact():
    led = MemoryLedger(BS, max_series=16)
    for t in range(200):
        led.stored(float(t), "f", f"r/o{t}", t, 0, 10)
    s = led.run_summary("r", 200.0)
    assert len(s["series"]) <= 17
    # block k held from t=k to 200
    assert s["allocated_mb_s"] * (1 << 20) == pytest.approx(sum((200 - k) * BS for k in range(200)))


op = st.tuples(st.sampled_from(["store", "release", "lose"]), st.sampled_from(["f0", "f1", "f2"]),
               st.sampled_from([f"r{r}/o{o}" for r in range(2) for o in range(5)]),
               st.integers(0, 4), st.integers(0, BS - 1), st.integers(0, 3 * BS))


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=60), st.sampled_from([BS, 250, 100]))
def test_random_events_keep_the_ledger_consistent_with_a_recount(ops, grain):
    """Whole blocks and grains alike: every grain an entry lies on, counted once; and the
    run's whole blocks beside its grains (``block_mb_s``), whatever the grain."""
    led = MemoryLedger(BS, grain=grain)
    model: dict[tuple[str, str], tuple[int, int, int]] = {}
    byte_s: dict[str, float] = {}
    block_s: dict[str, float] = {}
    t = 0.0

    def blocks_of(run: str, unit: int = grain) -> set[tuple[str, int]]:
        out = set()
        for (fn, key), (b, off, n) in model.items():
            if key.startswith(run + "/") and n:
                start = b * BS + off
                out |= {(fn, u) for u in range(start // unit, (start + n - 1) // unit + 1)}
        return out

    for kind, fn, key, block, off, n in ops:
        for run in ("r0", "r1"):
            byte_s[run] = byte_s.get(run, 0.0) + len(blocks_of(run)) * grain * 0.5
            block_s[run] = block_s.get(run, 0.0) + len(blocks_of(run, BS)) * BS * 0.5
        t += 0.5
        if kind == "store":
            led.stored(t, fn, key, block, off, n)
            start = block * BS + off                     # an overlapped entry is superseded
            model = {k: v for k, v in model.items() if k == (fn, key) or k[0] != fn or not
                     (v[2] and n and v[0] * BS + v[1] < start + n and start < v[0] * BS + v[1] + v[2])}
            model[(fn, key)] = (block, off, n)
        elif kind == "release":
            assert led.released(t, fn, key) == ((fn, key) in model)
            model.pop((fn, key), None)
        else:
            led.function_lost(t, fn)
            model = {k: v for k, v in model.items() if k[0] != fn}
        led.validate()
    for run in ("r0", "r1"):
        s = led.run_summary(run, t)
        if s is not None:
            assert s["allocated_bytes"] == len(blocks_of(run)) * grain
            assert s["allocated_mb_s"] * (1 << 20) == pytest.approx(byte_s[run])
            assert s["block_bytes"] == len(blocks_of(run, BS)) * BS
            assert s["block_mb_s"] * (1 << 20) == pytest.approx(block_s[run])
            assert s["block_mb_s"] >= s["allocated_mb_s"] - 1e-9
