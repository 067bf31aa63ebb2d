"""One placement authority (the metadata server's allocator) and memory measured from the
storage functions: bytes live where the allocator put them, asked of the functions
themselves; the daemon's ledger agrees with what the functions report; a function whose
blocks all freed leaves the pool; the report's physical MB-s agrees with the model's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import hdag
import wds
from metadata_server._grains import grain_units
from metadata_server._policy import HeuristicPredictor, pool_key
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.daemon import DaemonConfig, LocalStore
from storage_functions.exceptions import StoreError
from sdk._store_client import StoreClient

HERE = Path(__file__).parent
LIFETIME = HERE / "lifetimewf" / "lifetime.wds.json"
WORDCOUNT = HERE.parents[1] / "examples" / "wordcount" / "wordcount.wds.json"


def _physical_place(stack: Stack, run_id: str, name: str) -> tuple[str, int]:
    """(function, block) that holds ``name``, asked of every function in the pool."""
    daemon = stack.store.daemon
    found = []
    for h in list(daemon.handles):
        entries = daemon.function_memory(h.name, f"{run_id}/{name}")["entries"]
        found += [(h.name, e[0]) for k, e in entries.items() if k.endswith(f"/{run_id}/{name}")]
    assert len(found) == 1, found
    return found[0]


def _grain_bytes(stack: Stack, run: Any, names: list[str]) -> int:
    """The memory the functions hold for ``names`` by their placements: the grains their
    extents lie on (``memory_grain``), once each."""
    block, grain = stack.config.block_size, stack.config.memory_grain
    return grain * len({(e.function_name, u) for n in names for e in run.lookup(n).placement.extents
                        for u in grain_units(e.block, e.offset, e.length, block, grain)})


def _blocks_held(stack: Stack) -> int:
    return sum(len(stack.store.daemon.function_memory(h.name)["blocks"]) for h in list(stack.store.daemon.handles))


def test_lifetime_pools_pack_where_the_allocator_said(stack: Stack) -> None:
    """A short-lived object fills the block the seed's pool took (slice packing); a long-lived
    one too big for the rest takes a block of its own; the functions hold exactly that."""
    graph = hdag.build(wds.load(LIFETIME))
    keys = {n: pool_key(HeuristicPredictor().predict(graph.objects[n])) for n in ("short", "long")}
    assert keys["short"] != keys["long"], keys          # the precondition: two lifetime pools
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    run.put("seed", b"0123456789")
    writer = run.bind(function="writer")
    block = stack.config.block_size
    writer.put("short", b"s" * (block // 2))
    writer.put("long", b"l" * (block // 2 + 1))
    model = {n: run.lookup(n).placement.extents[0] for n in ("short", "long")}
    phys = {n: _physical_place(stack, run.run_id, n) for n in ("short", "long")}
    for n in ("short", "long"):                       # the bytes are where the allocator said
        assert phys[n] == (model[n].function_name, model[n].block)
    assert phys["short"] == _physical_place(stack, run.run_id, "seed")   # packed beside the seed
    assert phys["short"] != phys["long"]              # no room left there: a block of its own
    ledger = stack.store.daemon.memory(run.run_id)             # seed + short, long: two blocks,
    assert _blocks_held(stack) == 2                            # held by the grains they lie on
    assert ledger["allocated_bytes"] == _grain_bytes(stack, run, ["seed", "short", "long"]) < 2 * block
    run.end_run("aborted")
    run.close()
    driver.close()


def test_the_ledger_agrees_with_what_each_function_reports(stack: Stack) -> None:
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    run.put("seed", b"x" * 3_000_000)                 # a coded object: 12 chunks on 12 functions
    run.bind(function="writer").put("short", b"s" * 10)
    daemon = stack.store.daemon
    for h in list(daemon.handles):
        held = daemon.function_memory(h.name)
        assert held["mem"] == daemon.ledger.function_bytes(h.name), h.name
    assert sum(1 for h in daemon.handles if daemon.ledger.function_bytes(h.name)) >= 12
    run.end_run("aborted")
    stack.drain()
    deadline = time.monotonic() + 10
    while daemon.memory(run.run_id)["allocated_bytes"] and time.monotonic() < deadline:
        stack.pump_once()
        time.sleep(0.02)
    assert daemon.memory(run.run_id)["allocated_bytes"] == 0
    for h in list(daemon.handles):                     # the functions themselves hold none of it
        assert not daemon.function_memory(h.name, run.run_id)["entries"]
    assert daemon.counters.get("released_functions", 0) >= 1   # scale-in: functions left empty were let go
    run.close()
    driver.close()


def test_coded_chunks_smaller_than_a_block_share_blocks_physically(stack: Stack) -> None:
    """4 MB objects of one pool: 12 chunks of ~400 KB each, packed two to a block on each
    of 12 functions (12 blocks held, not 24), a third running on into the next block;
    freeing one leaves its block-mates whole."""
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    one, two = bytes(range(256)) * 15_625, bytes(reversed(range(256))) * 15_625     # 4,000,000 bytes each
    run.put("adhoc-one", one, adhoc=True)
    run.put("adhoc-two", two, adhoc=True)
    places = {n: {(e.function_name, e.block) for e in run.lookup(n).placement.extents} for n in ("adhoc-one", "adhoc-two")}
    assert len(places["adhoc-one"]) == 12 and places["adhoc-one"] == places["adhoc-two"]
    daemon = stack.store.daemon
    assert _blocks_held(stack) == 12                          # what the functions hold
    assert daemon.memory(run.run_id)["allocated_bytes"] == _grain_bytes(stack, run, ["adhoc-one", "adhoc-two"])
    three = bytes(range(7, 256)) * 16_065                    # a third runs on into the next block
    run.put("adhoc-three", three, adhoc=True)
    first = {e.chunk: e.block for e in run.lookup("adhoc-one").placement.extents}
    spans = sorted((e.chunk, e.block, e.offset > 0) for e in run.lookup("adhoc-three").placement.extents)
    assert spans == [(i, first[i] + k, k == 0) for i in range(12) for k in (0, 1)]
    assert run.get("adhoc-three") == three
    names = ["adhoc-one", "adhoc-two", "adhoc-three"]
    assert _blocks_held(stack) == 24
    assert daemon.memory(run.run_id)["allocated_bytes"] == _grain_bytes(stack, run, names)
    for h in list(daemon.handles):
        assert daemon.function_memory(h.name)["mem"] == daemon.ledger.function_bytes(h.name)
    assert run.get("adhoc-one") == one
    run.delete("adhoc-one")
    stack.drain()
    deadline = time.monotonic() + 10
    while daemon.memory(run.run_id)["live_bytes"] > len(two) * 2 * 1.25 and time.monotonic() < deadline:
        stack.pump_once()
        time.sleep(0.02)
    m = daemon.memory(run.run_id)
    assert _blocks_held(stack) == 24 and m["live_bytes"] < len(two) * 2 * 1.25
    assert m["allocated_bytes"] == _grain_bytes(stack, run, names[1:])   # one's grains went back
    assert run.get("adhoc-two") == two and run.get("adhoc-three") == three   # the block-mates are intact
    run.end_run("aborted")
    run.close()
    driver.close()


@pytest.mark.parametrize("size", [50_000, 3_000_000])    # a slice, a coded object
def test_oracle_frees_a_streamed_read_when_its_last_reader_closes_the_stream(stack: Stack, size: int) -> None:
    """Under ``oracle`` the last declared reader's read frees the object: its bytes leave
    function memory once the reader has them, also when it streamed them (closing the
    stream), not only after the drop instruction's grace period (``Stack.ORACLE_GRACE_S``)."""
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)), policy="oracle")
    run.put("seed", b"0123456789")
    daemon = stack.store.daemon
    seed = daemon.memory(run.run_id)["live_bytes"]
    run.bind(function="writer").put("short", b"s" * size)
    assert daemon.memory(run.run_id)["live_bytes"] > seed + size   # short held (coded: with parity)
    with run.bind(function="a").get("short", stream=True) as src:
        assert sum(len(piece) for piece in src) == size
        closed_at = time.monotonic()
    deadline = closed_at + Stack.ORACLE_GRACE_S / 2           # well before the grace period ends
    while daemon.memory(run.run_id)["live_bytes"] > seed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert daemon.memory(run.run_id)["live_bytes"] == seed, "the streamed object waited for the grace period"
    run.end_run("aborted")
    run.close()
    driver.close()


@pytest.mark.slow
def test_a_stack_with_smaller_blocks_codes_what_its_allocator_codes(tmp_path: Path) -> None:
    """Blocks of 256 KiB: word count's 466 KB input is a coded object for the allocator, so
    the tasks' client must code it too (its codec's threshold is the stack's block size, not
    the 1 MiB default); its ~47 KB chunks are packed, and the run frees everything."""
    from sdk._config import Config

    cfg = Config.load(state_dir=str(tmp_path), env={}, block_size=256 << 10)
    with Stack(cfg, metadata_port=0, daemon_port=0) as small:
        rep = run_workflow(WORDCOUNT, config=cfg, stack=small)
        assert rep.status == "succeeded", rep.error
        assert rep.memory["leaked_bytes"] == 0 and rep.memory["peak_bytes"] % cfg.memory_grain == 0


@pytest.fixture(scope="module")
def text_18mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Word count's default text repeated to 18 MB: objects large enough (coded, several
    blocks) and a run long enough (seconds) for the memory-time to mean something."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics)) + "\n\n"
    path = tmp_path_factory.mktemp("wc18") / "text.txt"
    path.write_text(text * (18_000_000 // len(text.encode()) + 1))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["funcstore", "funcstore:commit", "pocket", "jiffy:5000", "oracle"])
def test_physical_and_model_memory_agree_on_word_count(stack: Stack, text_18mb: Path, policy: str) -> None:
    """With an 18 MB input the report's physical MB-s (the daemon's ledger) is at least the
    metadata server's model and at most 10% above it under every block policy: the model counts
    an object's grains from when its bytes have arrived (its finish_put) to its free, the ledger
    from each entry's acknowledgement (before the finish_put) to its drop (after the free, once
    the drop reaches the function), both in MiB, so the physical figure is the model plus those
    two lags: 1.01-1.05x measured, the lags growing with the machine's load. Under ``oracle`` the model is the
    ideal (the bytes from the end of their write to their last read, the trace oracle) and the
    physical figure holds every coded chunk (parity included) until the drop, so it is at least
    the model, never below. Under ``funcstore`` an object's memory goes once its last reader
    has the bytes (the model at that reader's ``read_done``, the ledger at its eviction, one
    round trip later): the same lags, about the same MB-s (3.7 against ``funcstore:commit``'s
    3.1 on a machine at load 35), over a model 2.4x smaller (30 MB-s against 73), so a larger
    share of it: 1.10-1.12x measured, bounded at 1.20 (``funcstore:commit``, which frees at the
    commit as before, keeps the 10% bound)."""
    m = _word_count_memory(stack, policy, text_18mb)
    assert m["series"] and m["series"][-1][1] == 0     # the physical series ends with nothing held
    if policy == "oracle":
        assert m["mb_s"] >= m["model_mb_s"], m
        assert m["model_mb_s"] >= m["trace_oracle_mb_s"] * (1 - 1e-4), m
        return
    over = 1.20 if policy == "funcstore" else 1.10
    assert m["model_mb_s"] * 0.99 <= m["mb_s"] <= m["model_mb_s"] * over, {k: m[k] for k in ("mb_s", "model_mb_s")}
    assert m["block_mb_s"] >= m["mb_s"] >= m["trace_oracle_mb_s"] > 0


def _word_count_memory(stack: Stack, policy: str, text: Path) -> dict[str, Any]:
    rep = run_workflow(WORDCOUNT, config=stack.config, stack=stack, policy=policy, inputs={"raw_text": str(text)})
    m = rep.memory
    assert rep.status == "succeeded" and m["leaked_bytes"] == 0 and m["source"] == "storage functions"
    if policy == "oracle":      # its physical peak holds the coded chunks, parity included
        assert m["peak_bytes"] >= m["model_peak_bytes"]
    else:
        assert m["peak_bytes"] == m["model_peak_bytes"]
    return dict(m)


def test_a_daemon_under_the_metadata_authority_refuses_a_put_without_placement(tmp_path: Path) -> None:
    with LocalStore(str(tmp_path), config=DaemonConfig(placement="metadata", max_functions=12,
                                                       function_memory_mb=128)) as st:
        with StoreClient(st.address, st.token) as c:
            with pytest.raises(StoreError, match="carries no placement"):
                c.put("r-1/x", b"abc")
            c.put("r-1/x", b"abc", alloc=[("sion-0", 0, 0, 3)])   # with one it is stored there
            assert c.get("r-1/x") == b"abc"
            assert st.daemon.function_memory("sion-0", "r-1/x")["entries"]["1/0/0/r-1/x"] == [0, 0, 3]
