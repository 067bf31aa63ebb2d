"""The metadata core's invariants (DESIGN.md "Data path and invariants"), asserted over a
``MetadataState``: never early, never late, nothing leaks, the accounting adds up, the
pending storage instructions are in order. Tests call it (``validate_state``) after every
scenario; it changes nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ._grains import GrainCount

if TYPE_CHECKING:
    from ._allocator import Allocator
    from ._events import StorageInstruction
    from ._records import RunRecord

__all__ = ["validate", "StateView"]


class StateView(Protocol):
    """What the invariants read of the metadata core (``_state.MetadataState``)."""

    @property
    def allocator(self) -> Allocator: ...

    @property
    def runs(self) -> Mapping[str, RunRecord]: ...

    @property
    def live_bytes(self) -> int: ...

    @property
    def next_seq(self) -> int: ...

    @property
    def pending(self) -> Sequence[StorageInstruction]: ...


def validate(state: StateView) -> None:
    """Assert every invariant of DESIGN.md that the state can see."""
    state.allocator.validate()
    grains = state.allocator.grains
    recount = GrainCount(grains.block_size, grains.grain) if grains is not None else None
    total_live = 0
    for run in state.runs.values():
        live = sum(r.size for r in run.objects.values()   # a released object's memory went at its last read
                   if r.state in ("allocated", "readable") and r.placement.tier == "memory" and r.released_at is None)
        assert run.live_bytes == live, (run.run_id, run.live_bytes, live)
        written = sum(r.size for r in run.objects.values()
                      if r.state == "readable" and r.placement.tier == "memory" and r.released_at is None)
        assert run.written_bytes == written, (run.run_id, run.written_bytes, written)
        total_live += live
        for fn, buf in run.buffers.items():
            assert fn not in run.committed, f"{fn} committed but still has a buffer"
            for name in buf:
                assert fn in run.graph.objects[name].readers, f"{fn} buffered undeclared read {name}"
        for fn, names in run.deletes.items():
            assert fn not in run.committed and all(run.objects[n].adhoc for n in names)
        for rec in run.objects.values():
            if rec.state in ("allocated", "readable"):    # ad-hoc ones too: their extents hold grains
                for e in rec.placement.extents:
                    assert (e.function, e.block) in state.allocator.used
                if recount is not None and rec.placement.kind in ("slice", "blocks"):
                    recount.add(run.run_id, rec.placement.extents)
            if rec.adhoc:
                assert rec.name not in run.graph.objects and rec.declared == 0 and not rec.committed_by
                continue
            info = run.graph.objects[rec.name]
            assert rec.remaining == rec.declared - len(rec.committed_by) >= 0, rec
            assert len(set(rec.committed_by)) == len(rec.committed_by), f"double decrement of {rec.name}"
            assert set(rec.committed_by) <= set(info.readers)
            if rec.freed_reason == "committed":   # never early
                assert rec.remaining == 0 and set(rec.committed_by) == set(info.readers), rec
            if (run.policy.frees_on_commit and rec.state == "readable" and rec.declared > 0
                    and rec.remaining == 0):      # never late
                raise AssertionError(f"{rec.name} of {run.run_id} should have been freed")
            if rec.released_at is not None:       # released only at the last declared read, keeping no extents
                assert rec.read_by is not None and len(rec.read_by) == rec.declared and not rec.placement.extents, rec
        if run.state != "running":                # nothing leaks
            assert run.live_bytes == 0 and not run.buffers
            assert run.run_id not in state.allocator.owner_blocks, f"{run.run_id} ended holding blocks"
            assert grains is None or run.run_id not in grains.owners, f"{run.run_id} ended holding grains"
            assert all(r.state == "kept" or r.freed_reason == "deleted" for r in run.objects.values())
    assert total_live == state.live_bytes
    if grains is not None and recount is not None:  # the grains held are those the live placements lie on
        assert grains.shape() == recount.shape() and grains.owners == recount.owners, "grain count drifted"
        assert grains.total == recount.total == sum(recount.owners.values())
    seqs = [i.seq for i in state.pending]   # acknowledged ones leave from the front, none from elsewhere
    if seqs:
        assert seqs == list(range(seqs[0], state.next_seq)), f"pending instructions lost: {seqs}"
