"""GC compaction of what the metadata server placed (SION Sec. 5.3.3, issue 33 item 3): a read
of an object whose chunks lie on a degraded GC bucket's functions moves it: the core gives it a
new home on the newest bucket's functions (``MoveObject``), the allocator takes the new extents
and frees the old ones, and the daemon is told (``MoveChunks``, a ``move`` instruction with the
old and new extents). The event is journaled, so a replay and a snapshot hold the same
placements; the follower hands the move to its daemon with the chunks whose place changed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metadata_server._events import (BeginPut, FinishPut, MoveChunks, MoveObject, RegisterCapacity, RegisterWorkflow,
                                     ScaleOut)
from metadata_server._handler import MetadataHandler
from metadata_server._journal import Journal
from metadata_server._snapshot import decode_snapshot, encode_snapshot, restore_into
from metadata_server._state import MetadataState
from sdk.local._control import MetadataSource
from storage_functions.daemon import DaemonConfig, Follower

from .test_control_follower import ADMIN, InProcessClient, Recorder

MIB = 1 << 20
G0, G1 = [f"sion-{i}" for i in range(3)], [f"sion-{i}" for i in range(3, 6)]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _stack(tmp_path: Path, fig9_path: Path, clock: Clock) -> tuple[MetadataHandler, str, str]:
    h = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1, memory_grain=4096),
                        journal=Journal(tmp_path / "j.log"), admin_token=ADMIN, clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9")]
            + [RegisterCapacity(clock(), str(i + 2), f"sion-{i}", 4) for i in range(6)])
    info = h.start_run(ADMIN, "fig9/9", "funcstore", 0)
    run = info.run_id
    for k, (name, size) in enumerate((("big", 2 * MIB), ("small", 1000))):   # coded, and a slice
        h.apply([BeginPut(clock(), f"p{k}", run, "", name, size, name, False, True),
                 FinishPut(clock(), f"f{k}", run, "", name)])
    return h, run, info.token


def _functions(h: MetadataHandler, run: str, name: str) -> set[str]:
    return {e.function for e in h.state.runs[run].objects[name].placement.extents}


def test_a_read_on_a_degraded_function_moves_the_object_to_the_newest_bucket(tmp_path: Path,
                                                                             fig9_path: Path) -> None:
    clock = Clock()
    h, run, token = _stack(tmp_path, fig9_path, clock)
    assert _functions(h, run, "big") == set(G0) and _functions(h, run, "small") <= set(G0)
    old = {n: h.state.runs[run].objects[n].placement for n in ("big", "small")}
    h.get(token, run, "", "big", False)                        # not degraded yet: it stays
    assert not [i for i in h.state.pending if isinstance(i, MoveChunks)]
    h.fetch_instructions(ADMIN, 0, 100, None, {**{fn: "degraded" for fn in G0}})
    for _ in range(2):                                         # the second read finds it moved already
        clock.t += 1.0
        h.get(token, run, "", "big", False)
        h.read_batch(token, run, "", ["small", "big"])
    moves = [i for i in h.state.pending if isinstance(i, MoveChunks)]
    assert [m.object for m in moves] == ["big", "small"]
    for m in moves:                                            # old and new extents: the allocator's
        rec = h.state.runs[run].objects[m.object]
        assert m.old == old[m.object].extents and m.new == rec.placement.extents
        assert not {e.function for e in m.new} & set(G0)       # never onto a degraded function
        assert all((e.function, e.block) in h.state.allocator.used for e in m.new)
    assert _functions(h, run, "big") == set(G1)
    # G0's blocks are all free: its functions may leave the pool (the daemon releases them at H)
    released = {i.function for i in h.state.pending if type(i).__name__ == "ReleaseFunction"}
    assert released == set(G0)
    assert not any(fn in G0 for fn, _ in h.state.allocator.used)
    assert h.state.counters["objects_moved"] == 2
    wire = [i for i in h.fetch_instructions(ADMIN, 0, 100) if i.kind == "move"]
    assert [(i.object_name, len(i.extents), len(i.old_extents)) for i in wire] == [("big", 3, 3), ("small", 1, 1)]
    h.state.validate_state()
    want = {n: r.placement for n, r in h.state.runs[run].objects.items()}
    pending = list(h.state.pending)
    h.journal.close()                                          # type: ignore[union-attr]
    again = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1, memory_grain=4096),
                            journal=Journal(tmp_path / "j.log"), admin_token=ADMIN, clock=clock)
    assert {n: r.placement for n, r in again.state.runs[run].objects.items()} == want   # replayed alike
    assert list(again.state.pending) == pending
    assert sorted(again.state.allocator.used) == sorted(h.state.allocator.used)
    again.state.validate_state()
    snap = MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1, memory_grain=4096)
    restore_into(snap, decode_snapshot(encode_snapshot(again.state, 9))[1])
    assert {n: r.placement for n, r in snap.runs[run].objects.items()} == want
    assert [type(i).__name__ for i in snap.pending] == [type(i).__name__ for i in pending]
    snap.validate_state()
    again.journal.close()                                      # type: ignore[union-attr]


def test_a_move_changes_nothing_for_an_object_not_on_a_degraded_function_or_gone(tmp_path: Path,
                                                                                 fig9_path: Path) -> None:
    clock = Clock()
    h, run, token = _stack(tmp_path, fig9_path, clock)
    before = h.state.runs[run].objects["big"].placement
    assert h.state.handle(MoveObject(clock(), "m1", run, "big")) == []          # not degraded
    assert h.state.handle(MoveObject(clock(), "m2", run, "nothing")) == []      # no such object
    assert h.state.handle(MoveObject(clock(), "m3", "r-none", "big")) == []     # no such run
    assert h.state.runs[run].objects["big"].placement == before
    # no room outside the degraded bucket: it stays (the next read tries again) and a scale-out is
    # asked, once per bucket report
    h.fetch_instructions(ADMIN, 0, 100, None, {fn: "degraded" for fn in G0 + G1})
    (ask,) = h.state.handle(MoveObject(clock(), "m4", run, "big"))
    assert isinstance(ask, ScaleOut) and ask.blocks == 3 and "to move 'big'" in ask.reason
    assert h.state.handle(MoveObject(clock(), "m5", run, "big")) == []
    assert h.state.runs[run].objects["big"].placement == before and h.state.counters["moves_without_room"] == 2
    h.state.validate_state()
    h.journal.close()                                          # type: ignore[union-attr]


@dataclass
class Mover(Recorder):
    moved: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def move(self, key: str, moves: Iterable[Any]) -> None:
        self.moved.append((key, tuple(moves)))


def test_the_follower_hands_a_move_to_its_daemon_with_the_chunks_whose_place_changed(
        tmp_path: Path, fig9_path: Path) -> None:
    clock = Clock()
    h, run, token = _stack(tmp_path, fig9_path, clock)
    h.fetch_instructions(ADMIN, 0, 100, None, {fn: "degraded" for fn in G0})
    h.get(token, run, "", "big", False)
    target = Mover(DaemonConfig(block_size=MIB))
    f = Follower(MetadataSource(InProcessClient(h)), target)  # type: ignore[arg-type]
    assert f.drain(5.0)
    new = h.state.runs[run].objects["big"].placement.extents
    assert target.moved == [(f"{run}/big", tuple((e.chunk, e.function, e.block, e.offset, e.length)
                                                 for e in sorted(new, key=lambda e: e.chunk)))]
    # after the move, in the same round: the functions it emptied (not the one "small" holds)
    assert set(target.released) == set(G0) - _functions(h, run, "small") and target.released
    assert not h.state.pending                                # carried out and acknowledged
    h.journal.close()                                          # type: ignore[union-attr]


def test_a_move_stays_on_the_daemon_that_holds_the_object(tmp_path: Path, fig9_path: Path) -> None:
    """Several daemons: the object's new home is on its own daemon's functions (each daemon
    owns its functions and carries out only its own moves), and the instruction names it."""
    clock = Clock()
    h = MetadataHandler(MetadataState(block_size=MIB, data_chunks=2, parity_chunks=1, memory_grain=4096),
                        admin_token=ADMIN, clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", fig9_path.read_text(), {}, "fig9")]
            + [RegisterCapacity(clock(), f"c{i}", f"{dm}-sion-{i}", 4, dm) for dm in ("a", "b") for i in range(6)])
    info = h.start_run(ADMIN, "fig9/9", "funcstore", 0)
    run = info.run_id
    h.apply([BeginPut(clock(), "p", run, "", "big", 2 * MIB, "big", False, True),
             FinishPut(clock(), "f", run, "", "big")])
    before = h.state.runs[run].objects["big"].placement
    mine = before.daemon
    assert mine in ("a", "b")
    held = {e.function for e in before.extents}
    h.fetch_instructions(ADMIN, 0, 100, None, {fn: "degraded" for fn in held}, mine)
    h.get(info.token, run, "", "big", False)
    after = h.state.runs[run].objects["big"].placement
    assert after.daemon == mine and all(e.function.startswith(f"{mine}-") for e in after.extents)
    assert not {e.function for e in after.extents} & held
    (move,) = [i for i in h.fetch_instructions(ADMIN, 0, 100) if i.kind == "move"]
    assert move.function_name == mine
    h.state.validate_state()
