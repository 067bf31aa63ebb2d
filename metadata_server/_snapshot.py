"""A snapshot of the metadata core: its whole live state as one checked blob. Pure, no I/O.

Compaction (``_journal``) writes one beside the journal and starts the log
afresh after it, so a journal holds what is live plus the events since the
last snapshot instead of its whole history. A snapshot restores exactly:
workflows, runs with their counters, commit buffers and committed functions,
the allocator's pools and blocks, token digests, TTL clocks, pending
storage instructions, what was freed (finished runs are kept as the core
keeps them, up to ``max_finished_runs``). It does not hold the server's
settings (predictor, limits, back-pressure, budgets): those come from the
restoring server's configuration.

Format: a checked frame (``_journal_format.frame_snapshot``) holding a pickle
of the state's fields. The pickle is read by an unpickler that builds only the
core's own record types and plain containers, so a snapshot file that is not
ours is refused, never run. Not covered: where snapshots are kept (``_journal``)
or shipped (``_ship``).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from typing import Any

from ._journal_format import JournalCorrupt, frame_snapshot, unframe_snapshot
from ._records import ObjectRecord
from ._state import MetadataState

__all__ = ["encode_snapshot", "decode_snapshot", "restore_into"]

#: fields of ``MetadataState`` that are configuration, not state: never in a snapshot
_SETTINGS = frozenset({"predictor", "_handlers", "wds_limits", "max_pending", "backpressure",
                       "max_finished_runs", "sample_interval_s", "memory_budget"})
_MODULES = ("metadata_server.", "hdag.", "wds.", "networkx.")
_PLAIN = {("collections", "deque"), ("collections", "OrderedDict"), ("collections", "defaultdict"),
          ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "tuple"), ("builtins", "dict"),
          ("builtins", "list"), ("builtins", "float"), ("builtins", "int"), ("builtins", "complex")}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN or module.startswith(_MODULES):
            return super().find_class(module, name)
        raise JournalCorrupt(f"the snapshot names {module}.{name}, which no metadata snapshot holds "
                             "(not a funcsion snapshot, or damaged)")


def encode_snapshot(state: MetadataState, seq: int) -> bytes:
    """The snapshot of ``state`` after the journal's first ``seq`` events."""
    fields = {k: v for k, v in vars(state).items() if k not in _SETTINGS}
    return frame_snapshot(pickle.dumps(fields, protocol=5), seq)


def decode_snapshot(blob: bytes | memoryview, what: str = "snapshot") -> tuple[int, dict[str, Any]]:
    """(seq, fields) of a snapshot; ``JournalCorrupt`` naming ``what`` if it is not a whole one."""
    seq, payload = unframe_snapshot(blob, what)
    try:
        fields = _Restricted(io.BytesIO(payload)).load()
    except JournalCorrupt:
        raise
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError,
            IndexError, KeyError) as exc:
        raise JournalCorrupt(f"{what} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(fields, dict):
        raise JournalCorrupt(f"{what} holds no state")
    return seq, fields


def restore_into(state: MetadataState, fields: dict[str, Any]) -> None:
    """Give ``state`` (fresh, with its settings) the snapshotted fields."""
    unknown = set(fields) - set(vars(state))
    if unknown:
        raise JournalCorrupt(f"the snapshot has fields this version does not know: {', '.join(sorted(unknown))}")
    for k, v in fields.items():
        setattr(state, k, v)
    _fill_new_fields(state)
    state.link_filters()


def _fill_new_fields(state: MetadataState) -> None:
    """Records pickled by an older version lack the fields added since (a slotted dataclass
    restores only the slots its pickle names): give those their defaults, so an upgraded
    server carries on from an old snapshot."""
    defaults = [(f.name, f.default) for f in dataclasses.fields(ObjectRecord)
                if f.default is not dataclasses.MISSING]
    for run in state.runs.values():
        for rec in run.objects.values():
            for name, value in defaults:
                if not hasattr(rec, name):
                    setattr(rec, name, value)
