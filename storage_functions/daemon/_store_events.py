"""Events the daemon's store core (``_state.StoreState``) takes and the
instructions it returns (STYLE 2-3).

Every event is a slotted dataclass carrying ``now`` (seconds from the
daemon's clock; the core never reads one) and ``rid`` (a request id, for
tracing). Events name object versions by reference (``ObjectVersion``) and
chunks by (stripe, index); places are ``(function index, block, offset)``.

Instructions are work for the I/O shell (``Daemon``): send a chunk to a
function, delete chunks from a function, hand lost chunks to recovery, submit
a version to the persistent buffer's uploader or take it back, warm a
function up; ``Begun`` and ``Freed`` are replies to the caller.

Not covered here: the state (``_state``), the GET window (``_window``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import StripeShape
from ._objects import ObjectVersion

__all__ = [
    "Place",
    "Event", "PutBegun", "StripeBegun", "ChunkStored", "ChunkFailed", "PutRetry", "PutReady", "PutAbandoned",
    "Free", "Evict", "FunctionLost", "ChunkRecovered", "Restored", "Tick", "Migrated", "Move",
    "Instruction", "Begun", "SendChunk", "Release", "Recover", "Upload", "Discard", "Warm", "Freed", "Evicted", "Degraded",
    "Retire", "Migrate",
]

Place = tuple[int, int, int]  # (function index, block, offset)


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    now: float = 0.0
    rid: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PutBegun(Event):
    """A PUT of ``key`` (``size`` bytes) starts: a new version, state ``writing``."""

    key: str
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StripeBegun(Event):
    """Stripe ``len(obj.stripes)`` of a PUT arrives: place its chunks, at ``places``
    (the metadata server's allocation, checked and reserved) or where
    ``PlaceChunk`` decides (``places`` None). ``offset``: of its chunk 0 in the
    buffer file."""

    obj: ObjectVersion
    shape: StripeShape
    offset: int
    places: tuple[Place, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkStored(Event):
    """Function ``place[0]`` acknowledged chunk ``index`` of stripe ``stripe`` at ``place``."""

    obj: ObjectVersion
    stripe: int
    index: int
    place: Place


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkFailed(Event):
    """Chunks of a PUT failed twice (``failed``: (stripe, index); a chunk whose function
    did not answer within ``put_timeout_s`` failed); if every stripe
    keeps ``d`` chunks the PUT goes on degraded (their places are given up). ``died``:
    those of them (with their places) whose function was reached and whose instance then
    died during the PUT: they do not count against ``d``; they are recovered there once
    the version is ready, from the buffer that holds it (as chunks lost after their
    acknowledgement are). A function that could not be started fails the PUT."""

    obj: ObjectVersion
    failed: tuple[tuple[int, int], ...]
    died: tuple[tuple[int, int, Place], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PutRetry(Event):
    """Chunks of a PUT whose function failed (``failed``): place them again, at
    ``planned`` (the metadata server's places, by chunk) or on another function."""

    obj: ObjectVersion
    failed: tuple[tuple[int, int], ...]
    planned: tuple[Place, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PutReady(Event):
    """Every chunk is stored (or the PUT went on degraded): the version is readable."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True, kw_only=True)
class PutAbandoned(Event):
    """The PUT failed: its version goes and its chunks leave their functions."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True, kw_only=True)
class Free(Event):
    """Every version of ``keys`` goes (the metadata server expired them)."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict(Event):
    """The chunks of ``keys``' readable versions leave function memory (the metadata server
    released it at the object's last declared read); each version stays readable from its
    durable copy, the persistent buffer's or COS's, until a ``Free``. A version without one
    (a restarted daemon found neither) keeps its chunks."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionLost(Event):
    """A new instance answered for function ``fn``: the old one's memory is gone."""

    fn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRecovered(Event):
    """Recovery stored chunk (``stripe``, ``index``) of ``obj`` at ``place`` again."""

    obj: ObjectVersion
    stripe: int
    index: int
    place: Place


@dataclass(frozen=True, slots=True, kw_only=True)
class Restored(Event):
    """A restarted daemon put back a readable version from its durable table
    (``_restore``): its places are reserved and counted again; the ledger counts
    each chunk once its function is found holding it or it is stored there again
    (``ChunkStored``)."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick(Event):
    """Warm-up check and GC step (``_gc``): ``sleeping`` lists (function, last used) of
    functions whose instance is not running; ``reads`` the (function, chunk key) GETs
    asked since the last tick (those on degraded functions are marked for compaction)."""

    sleeping: tuple[tuple[int, float], ...] = ()
    reads: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Migrated(Event):
    """Compaction loaded chunk (``stripe``, ``index``) of ``obj`` from COS at ``place``
    (``ok``) or failed to."""

    obj: ObjectVersion
    stripe: int
    index: int
    place: Place
    ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Move(Event):
    """The metadata server moved chunks of ``key`` it placed (GC compaction of a chunk read on
    a degraded function): ``moves`` gives, per chunk whose place changed, ``(chunk, function,
    block, offset, length reserved)``, the chunk's new start (its stripes lie end to end from
    there, as a PUT lays them)."""

    key: str
    moves: tuple[tuple[int, int, int, int, int], ...]


# -- instructions ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Instruction:
    pass


@dataclass(frozen=True, slots=True)
class Begun(Instruction):
    """Reply to ``PutBegun``: the new version."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True)
class SendChunk(Instruction):
    """Send chunk ``index`` of stripe ``stripe`` of ``obj`` to ``place``."""

    obj: ObjectVersion
    stripe: int
    index: int
    place: Place


@dataclass(frozen=True, slots=True)
class Release(Instruction):
    """Delete these chunk keys from function ``fn``."""

    fn: int
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Recover(Instruction):
    """Function ``fn`` lost its memory: store these chunks (and the live ones its
    insertion log lists) again at their places (``Recovery.lost``): (obj, stripe, index, place)."""

    fn: int
    chunks: tuple[tuple[ObjectVersion, int, int, Place], ...]


@dataclass(frozen=True, slots=True)
class Upload(Instruction):
    """Hand the version's buffer file to the uploader."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True)
class Discard(Instruction):
    """Take the version's buffer file and COS copy back (it was freed)."""

    obj: ObjectVersion


@dataclass(frozen=True, slots=True)
class Warm(Instruction):
    """Invoke function ``fn`` to keep its instance (and the chunks it holds) warm."""

    fn: int


@dataclass(frozen=True, slots=True)
class Retire(Instruction):
    """The GC window released function ``fn`` (``reason``: ``window`` or ``empty``): end its
    invocation; it is warmed no more."""

    fn: int
    reason: str


@dataclass(frozen=True, slots=True)
class Migrate(Instruction):
    """Compaction: load chunk (``stripe``, ``index``) of ``obj`` from its COS copy into
    ``place`` (a function of the newest GC bucket), then report ``Migrated``."""

    obj: ObjectVersion
    stripe: int
    index: int
    place: Place


@dataclass(frozen=True, slots=True)
class Freed(Instruction):
    """Reply to ``Free``: how many versions went."""

    versions: int


@dataclass(frozen=True, slots=True)
class Evicted(Instruction):
    """Reply to ``Evict``: the versions whose chunks went, and how many kept them (no durable copy)."""

    objs: tuple[ObjectVersion, ...]
    kept: int = 0

    @property
    def versions(self) -> int:
        return len(self.objs)


@dataclass(frozen=True, slots=True)
class Degraded(Instruction):
    """Reply to ``ChunkFailed``: whether the PUT goes on with the chunks it has."""

    ok: bool
