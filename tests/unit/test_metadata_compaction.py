"""Journal compaction: a snapshot of the live state plus the log since it. A server that has
run 10,000 runs keeps files proportional to what is live, and a reopened journal restores the
state exactly (counts, buffers, allocator, tokens, TTLs, what was freed), a crash between the
snapshot's rename and the log's included."""

from __future__ import annotations

import pickle
from collections import deque
from pathlib import Path

import hdag
import pytest

from metadata_server import (AckInstructions, BeginPut, Commit, EndRun, FinishPut, Get, Journal, JournalCorrupt, MetadataHandler,
                             MetadataState, RegisterCapacity, RegisterWorkflow, StartRun, token_digest)
from metadata_server._bench import wide_wds
from metadata_server._journal_format import SNAP_MAGIC, frame_snapshot, scan
from metadata_server._snapshot import encode_snapshot

WF = wide_wds(3, 2, name="c")


def handler(path: Path, compact_bytes: int = 32 << 10) -> MetadataHandler:
    return MetadataHandler(MetadataState(max_finished_runs=8, data_chunks=2, parity_chunks=1),
                           journal=Journal(path, compact_bytes=compact_bytes))


def setup(h: MetadataHandler) -> None:
    h.apply([RegisterWorkflow(0.0, "a", WF, {}, "c"), RegisterCapacity(0.0, "b", "s0", 64),
             RegisterCapacity(0.0, "b", "s1", 64), RegisterCapacity(0.0, "b", "s2", 64)])


def one_run(h: MetadataHandler, i: int, *, end: bool = True, commit_all: bool = True) -> str:
    t = float(i)
    h.apply([StartRun(t, "s", "c/1", token_digest(f"tok{i}"), "funcstore", 60.0)])
    run = f"r-{h.state.next_run - 1}"
    evs = []
    for k in range(3):
        evs += [BeginPut(t, "p", run, "w", f"o{k:06d}", 100 + 5000 * k, "c"), FinishPut(t, "f", run, "w", f"o{k:06d}")]
    for r in ("r00000", "r00001") if commit_all else ("r00000",):
        evs += [Get(t, "g", run, r, f"o{k:06d}") for k in range(3)] + [Commit(t, "c", run, r)]
    h.apply(evs)
    if end:
        h.apply([EndRun(t + 0.5, "e", run)])
        h.apply([AckInstructions(t + 0.5, "a", h.state.next_seq - 1)])   # the daemon carried them out
    return run


def plain(x: object, depth: int = 0, path: tuple[int, ...] = ()) -> object:
    """``x`` as nested plain values (objects by their attributes), to compare two states; an
    object met again on its own path (the allocator's filters point back at the state's bucket
    report) becomes a marker, not its repr with an address."""
    if depth > 12 or isinstance(x, (str, int, float, bool, type(None), bytes)):
        return x
    if id(x) in path:
        return f"<cycle: {type(x).__name__}>"
    path = (*path, id(x))
    if isinstance(x, dict):
        return {repr(plain(k, depth + 1, path)): plain(v, depth + 1, path) for k, v in x.items()}
    if isinstance(x, (list, tuple, deque)):
        return [plain(v, depth + 1, path) for v in x]
    if isinstance(x, (set, frozenset)):
        return sorted(repr(plain(v, depth + 1, path)) for v in x)
    if isinstance(x, hdag.HDAG):
        return sorted(x.objects)
    names = getattr(type(x), "__slots__", None) or list(vars(x))
    return {type(x).__name__: {n: plain(getattr(x, n), depth + 1, path) for n in names if hasattr(x, n)}}


def fingerprint(st: MetadataState) -> object:
    st.validate_state()
    fields = pickle.loads(encode_snapshot(st, 0)[len(SNAP_MAGIC) + 20:])
    return plain(fields)


@pytest.mark.slow
def test_ten_thousand_runs_keep_the_journal_proportional_to_what_is_live(tmp_path: Path):
    path = tmp_path / "j"
    h = handler(path)
    setup(h)
    biggest = 0
    for i in range(10_000):
        one_run(h, i)
        if i % 97 == 0:
            biggest = max(biggest, path.stat().st_size + h.journal.snapshot_path.stat().st_size
                          if h.journal.snapshot_path.exists() else path.stat().st_size)
    live = [one_run(h, 10_000 + i, end=False, commit_all=False) for i in range(3)]
    j = h.journal
    assert j.compactions >= 5 and j.seq > 10_000 * 10
    assert biggest < 512 << 10, biggest          # bounded: 32 KiB log threshold + a snapshot of what is live
    want = fingerprint(h.state)
    seq = j.seq
    j.close()
    h2 = handler(path)
    assert h2.journal.seq == seq
    assert fingerprint(h2.state) == want
    st = h2.state
    for run in live:                              # live objects still counted, one reader left
        assert st.runs[run].state == "running"
        assert {o.remaining for o in st.runs[run].objects.values()} == {1}
        st.authorize(run, f"tok{int(run[2:]) - 1}")
    before = st.allocator.allocated_bytes
    one_run(h2, 20_000)                           # carries on: nothing handed out twice
    h2.state.validate_state()
    assert h2.state.allocator.allocated_bytes == before
    h2.journal.close()


def test_a_crash_between_the_snapshot_and_the_new_log_finishes_the_compaction(tmp_path: Path):
    path = tmp_path / "j"
    h = handler(path, compact_bytes=1 << 30)
    setup(h)
    for i in range(5):
        one_run(h, i)
    mid = h.journal.seq
    old_log = path.read_bytes()
    snap = encode_snapshot(h.state, mid)
    one_run(h, 5, end=False)                      # events after the snapshot, in the old log only
    want = fingerprint(h.state)
    h.journal.close()
    full_log = path.read_bytes()
    assert full_log.startswith(old_log)
    h.journal.snapshot_path.write_bytes(snap)     # the snapshot renamed, the log not replaced yet
    h2 = handler(path, compact_bytes=1 << 30)
    assert fingerprint(h2.state) == want
    assert h2.journal.base == mid and scan(path.read_bytes()).base == mid
    h2.journal.close()


def test_a_missing_or_foreign_snapshot_is_refused(tmp_path: Path):
    path = tmp_path / "j"
    h = handler(path, compact_bytes=1)
    setup(h)
    one_run(h, 0)
    assert h.journal.base > 0
    h.journal.close()
    snap = h.journal.snapshot_path
    blob = snap.read_bytes()
    snap.unlink()
    with pytest.raises(JournalCorrupt, match="snapshot .* is missing"):
        Journal(path)
    snap.write_bytes(blob[:-10])
    with pytest.raises(JournalCorrupt, match="torn or damaged"):
        Journal(path)
    snap.write_bytes(frame_snapshot(pickle.dumps({"x": print}), scan(path.read_bytes()).base))
    with pytest.raises(JournalCorrupt, match="builtins.print, which no metadata snapshot holds"):
        handler(path)
