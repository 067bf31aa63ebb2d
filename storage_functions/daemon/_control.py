"""The daemon's control loop: it follows the metadata server's storage instructions.

The metadata server decides when an object's bytes go, when the pool must grow
and when a function may leave it; this follower carries those decisions out on
the daemon and acknowledges them, wherever the two run (threads of one process
in the embedded stack, two machines in a split deployment). It talks to an
injected ``InstructionSource`` (``sdk`` wires a ``funcsion_rpc.MetadataClient``
to it: nothing here imports the metadata server or its client) and a
``ControlTarget`` (the ``Daemon``).

What each instruction does:

- ``drop`` of a memory-tier object -> ``free`` of its store key
  ``<run_id>/<object>``; of a COS-tier object -> COS delete of its tier key
  (``auth.tier_key``); a drop whose reason says the run ended or expired also
  ``drop_run``s the run (its COS copies and buffer files, also an earlier
  daemon process's); drops a read itself caused (the ``oracle`` policy's last
  read, a client's ``get(delete=True)``: reasons in ``FREED_AT_READ``) wait
  ``oracle_grace_s`` (the reader may still be fetching; it frees the bytes
  itself once it has them); a drop whose reason is ``RELEASED_AT_READ``
  (funcstore: the last declared reader has the bytes) -> ``evict``: the chunks
  leave function memory, the version stays readable from its durable copy
  (persistent buffer or COS) until the drop that frees it;
- ``scale_out`` -> capacity for more whole function groups (enough for the
  blocks asked, at most ``max_functions`` in all) is registered at the source
  and those functions are warmed up;
- ``release_function`` -> ``release_function`` (a function none of whose blocks
  is in use leaves the pool at once);
- ``move`` (GC compaction of a chunk the metadata server placed, read on a degraded
  function) -> ``move`` of its store key with the chunks' new places, on the daemon
  the instruction names (this one: its ``daemon_id``); the daemon copies them there and
  drops the old copies (``_gc_core``), serving reads from the old place meanwhile.

Load reports: each fetch carries the daemon's storage functions with requests queued or in
flight (``function_loads``: name -> (requests, PUT bytes among them); a target without it
reports nothing), so the metadata server's placement skips busy functions as the daemon's
own ``PlaceChunk`` does with its queue test (SION Fig. 5 ``TestAndPlace``). One report per
round: while the last one named a loaded function the rounds come every ``load_poll_s`` at
most (the embedded stack's ``poll_s`` is 0.5 s: PUTs make no instructions to wake it), so
the report lags the daemon's queues by that much. Likewise the GC window's functions that must not take
new data (``function_buckets``: name -> ``active`` for an older bucket, ``degraded``,
``released``), so the allocator places new data on the newest bucket's functions only.

Delivery is at least once: the source keeps an instruction until it is
acknowledged, and ``fetch(after_seq)`` acknowledges everything up to
``after_seq``; the follower passes the last seq it carried out, so a follower
(or daemon) restarted at any point is offered again everything it had not
finished. Every instruction is idempotent (a free of an unknown key, a COS
delete of a missing key, a release of a function that holds chunks change
nothing; a scale-out offered twice registers at most one group more, bounded by
``max_functions``), and one this follower already carried out is skipped by seq.

Connecting (``hello``, again after every failure): the source's block size
must be the daemon's; capacity is registered for every function group the
source already knows of this pool (at least the first; idempotent), functions
of this pool's prefix beyond ``max_functions`` (left by an earlier, larger
daemon) are withdrawn, and the first time, before this daemon stored anything,
COS copies and buffer files of runs that are not running are swept. A source
whose last seq is below what was acknowledged lost its history (a metadata
server restarted without its journal): the follower starts again from 0. So does
one whose source is another process than before (``SourceView.instance``
changed: a replacement restored from COS may have lost the shipping window's
tail and issue new instructions under seqs this follower already carried
out); what it had carried out and not acknowledged is offered again, and
every instruction is idempotent.

Faults: a failed round (source unreachable, COS failing) changes nothing here
and is retried with exponential backoff (``backoff_min_s`` .. ``backoff_max_s``),
logged once per ``log_interval_s``; the daemon serves data all along.
``step`` is one round with an injected clock, for tests; ``start`` runs rounds
on a thread that ``wake`` (the embedded stack's metadata listener) hurries.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..auth import tier_key
from ..exceptions import ControlError

__all__ = ["ControlTarget", "ControlError", "Follower", "Instruction", "InstructionSource", "SourceView",
           "ORACLE_GRACE_S", "RUN_END_REASONS", "FREED_AT_READ", "RELEASED_AT_READ"]

log = logging.getLogger("storage_functions.control")

#: The ``oracle`` policy frees an object at its last *read*, before that reader has fetched
#: the bytes; its drops wait this long so the read it counted can finish.
ORACLE_GRACE_S = 2.0
#: Drop reasons (substrings) of objects a read freed before its reader had the bytes: the
#: ``oracle`` policy's last read, a client's ``get(delete=True)``; they wait ``ORACLE_GRACE_S``.
FREED_AT_READ = ("oracle", "deleted at read")
#: The reason of a drop that releases an object's function memory once its last declared
#: reader has the bytes and keeps its durable copy (the metadata server's
#: ``_events.RELEASED_AT_READ``, the same string): carried out as ``evict``, at once.
RELEASED_AT_READ = "released at last read"
#: Reasons of the drops the metadata server sends when a run ends or its TTL expires.
RUN_END_REASONS = ("run ended", "run expired")


@dataclass(frozen=True, slots=True)
class Instruction:
    """One storage instruction as the source numbered it (``seq``). ``kind``: ``drop``
    (``run_id``, ``object_name``, ``tier``, ``reason``), ``scale_out`` (``blocks``),
    ``release_function`` (``function``) or ``move`` (``run_id``, ``object_name``; ``function``:
    the id of the daemon holding it, "" for the only one; ``moves``: per chunk whose place
    changed, ``(chunk, function, block, offset, length reserved)``)."""

    seq: int
    kind: str
    run_id: str = ""
    object_name: str = ""
    tier: str = "memory"
    reason: str = ""
    blocks: int = 0
    function: str = ""
    moves: tuple[tuple[int, str, int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SourceView:
    """What the follower needs to know when it connects: the source's block size, the
    storage functions it has capacity for (name -> blocks), the runs running now and
    the last seq it issued."""

    block_size: int
    functions: Mapping[str, int] = field(default_factory=dict)
    running: frozenset[str] = frozenset()
    last_seq: int = 0
    #: which process answers (a new one per server start; "": the source does not say)
    instance: str = ""


class InstructionSource(Protocol):
    def fetch(self, after_seq: int, limit: int, loads: Mapping[str, tuple[int, int]] | None = None,
              buckets: Mapping[str, str] | None = None) -> Sequence[Instruction]:
        """Instructions with seq > ``after_seq``, oldest first; acknowledges up to ``after_seq``;
        ``loads``, ``buckets``: the daemon's reports (passed only when there is one)."""

    def view(self) -> SourceView: ...

    def register_capacity(self, function: str, blocks: int, daemon: str = "") -> None:
        """Offer ``function``'s blocks; ``daemon``: this daemon's id (only one of several passes it)."""

    def unregister_capacity(self, function: str) -> None: ...


class ControlTarget(Protocol):
    """What the follower drives: ``Daemon`` (its ``config`` is a ``DaemonConfig``)."""

    config: Any
    cos: Any
    counters: dict[str, int]

    def free(self, keys: Iterable[str]) -> int: ...

    def evict(self, keys: Iterable[str]) -> int: ...

    def drop_run(self, run_id: str) -> int: ...

    def prewarm(self, count: int, first: int = 0) -> int: ...

    def release_function(self, name: str) -> bool: ...

    def sweep_runs(self, keep: Callable[[str], bool]) -> list[str]: ...


class Follower:
    def __init__(self, source: InstructionSource, target: ControlTarget, *, poll_s: float = 0.02,
                 batch: int = 1000, oracle_grace_s: float = ORACLE_GRACE_S, backoff_min_s: float = 0.05,
                 backoff_max_s: float = 5.0, log_interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 owns_group: Callable[[int], bool] | None = None, sweep_keeps: Callable[[str], bool] | None = None,
                 load_poll_s: float = 0.05) -> None:
        self.source, self.target = source, target
        # several metadata shards: this follower registers only the function groups its source owns
        # (the others' followers register theirs), and its first-start sweep leaves the runs other
        # shards own alone (``sweep_keeps``: True for a run this source does not know of)
        self.owns_group = owns_group or (lambda group: True)
        self.sweep_keeps = sweep_keeps or (lambda run_id: False)
        self.next_group = 0           # the daemon's next function group this follower may register
        self.functions_bound = 0      # functions 0 .. this-1 hold every group registered
        self.poll_s, self.batch, self.oracle_grace_s = poll_s, batch, oracle_grace_s
        self.backoff_min_s, self.backoff_max_s, self.log_interval_s = backoff_min_s, backoff_max_s, log_interval_s
        self.clock = clock
        self.load_poll_s = load_poll_s
        self.loaded = False           # the last report named a function with requests queued or in flight
        self.done = 0                 # the last seq carried out (acknowledged by the next fetch)
        self.instance = ""            # the source process this follower last connected to
        self.source_changes = 0       # times it connected to another process than before (a replacement)
        self.carried_out = 0          # instructions carried out (not counting duplicates)
        self.duplicates = 0           # instructions offered again and skipped
        self.groups_registered = 0
        self.swept_runs: list[str] | None = None  # None: not swept (yet, or the daemon had stored data)
        self.connected = False
        self.failures = 0             # consecutive failed rounds
        self.last_error = ""
        self._delay = 0.0
        self._last_log = -math.inf
        self._unlogged = 0
        self._deferred: deque[tuple[float, int, tuple[str, str, str]]] = deque()  # (due, seq, drop)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._nap = threading.Event()  # never set: drain's pause between rounds
        self._thread: threading.Thread | None = None

    # -- rounds ----------------------------------------------------------------------
    def step(self) -> float:
        """One round: connect if needed, carry out one batch and the deferred drops that
        are due. Returns how long to wait before the next round (0: more is waiting)."""
        with self._lock:
            try:
                if not self.connected:
                    self.hello()
                n = self._round()
            except Exception as exc:  # noqa: BLE001 - any failure: nothing changed here; retry later
                self.connected = False
                return self._failed(exc)
            self._recovered()
            if n:
                return 0.0
            wait = min(self.poll_s, self.load_poll_s) if self.loaded else self.poll_s
            if self._deferred:
                wait = min(wait, max(0.0, self._deferred[0][0] - self.clock()))
            return wait

    def hello(self) -> int:
        """Connect: check the source, register this pool's capacity, sweep once. Returns how
        many functions are registered. Raises what the source raises, or ``ControlError``."""
        with self._lock:
            view = self.source.view()
            c = self.target.config
            if view.block_size != c.block_size:
                raise ControlError(f"the metadata server allocates blocks of {view.block_size:,} bytes, this daemon "
                                   f"stores blocks of {c.block_size:,}: start both with the same block size "
                                   "(config block_size / --block-size)")
            if view.last_seq < self.done:
                log.warning("the metadata server has issued instructions up to #%d only, this daemon carried out "
                            "up to #%d: it lost its history (restarted without its journal?); following from #0",
                            view.last_seq, self.done)
                self.done = 0
            elif view.instance and self.instance and view.instance != self.instance:
                self.source_changes += 1
                if self.done:
                    log.warning("the metadata server is another process than before (a replacement?); following "
                                "its instructions from #0 again (they are idempotent)")
                    self.done = 0
            self.instance = view.instance or self.instance
            prefix = f"{c.function_prefix}-"
            ours = [int(n[len(prefix):]) for n in view.functions
                    if n.startswith(prefix) and n[len(prefix):].isdigit()]
            for i in sorted(i for i in ours if i >= c.max_functions):  # an earlier, larger pool's
                self.source.unregister_capacity(f"{prefix}{i}")
                log.info("withdrew %s%d from the metadata server: outside this daemon's pool of %d functions",
                         prefix, i, c.max_functions)
            known = [i for i in ours if i < c.max_functions]
            top = max(known) // c.group_size if known else 0     # the last group the source knows of
            self.groups_registered = self.next_group = self.functions_bound = 0
            functions = self._register_group()
            while self.next_group <= top:
                before = self.next_group
                functions = self._register_group()
                if self.next_group == before:
                    break
            self.target.prewarm(functions)
            if self.swept_runs is None and not self.target.counters.get("puts", 0):
                running, keeps = view.running, self.sweep_keeps
                self.swept_runs = self.target.sweep_runs(lambda run_id: run_id in running or keeps(run_id))
            self.connected = True
            return functions

    def _round(self) -> int:
        now = self.clock()
        batch = [i for i in self.source.fetch(self.done, self.batch, **self._report())]
        fresh = [i for i in batch if i.seq > self.done]
        self.duplicates += len(batch) - len(fresh)
        drops: list[tuple[str, str, str]] = []        # (tier, run_id, object)
        deferred: list[tuple[float, int, tuple[str, str, str]]] = []
        ended: set[str] = set()
        for i in fresh:
            if i.kind != "drop":
                continue
            d = (i.tier or "memory", i.run_id, i.object_name)
            if i.reason in RUN_END_REASONS:
                ended.add(i.run_id)
            if i.reason == RELEASED_AT_READ:
                d = ("release", i.run_id, i.object_name)
            if any(r in i.reason for r in FREED_AT_READ):
                deferred.append((now + self.oracle_grace_s, i.seq, d))
            else:
                drops.append(d)
        due = 0
        while due < len(self._deferred) and self._deferred[due][0] <= now:
            drops.append(self._deferred[due][2])
            due += 1
        self._drop(drops)
        for run_id in sorted(ended):
            self.target.drop_run(run_id)
        want = sum(i.blocks for i in fresh if i.kind == "scale_out")
        if want:
            self._scale_out(want)
        move = getattr(self.target, "move", None)
        mine = getattr(self.target.config, "daemon_id", "")
        for i in fresh:   # before the releases: a function a move empties goes once its copy left
            if i.kind == "move" and callable(move) and i.function == mine and i.moves:
                move(f"{i.run_id}/{i.object_name}", i.moves)
        for i in fresh:
            if i.kind == "release_function":
                self.target.release_function(i.function)
        # everything above is idempotent: only now does this round count
        for _ in range(due):
            self._deferred.popleft()
        self._deferred.extend(deferred)
        if fresh:
            self.done = fresh[-1].seq
            self.carried_out += len(fresh)
        return len(batch) + due

    def _report(self) -> dict[str, Any]:
        """What the target reports with this fetch (``function_loads``, ``function_buckets``:
        a target without one, or one that returns None, reports nothing of it)."""
        out: dict[str, Any] = {}
        for arg, name in (("loads", "function_loads"), ("buckets", "function_buckets")):
            report = getattr(self.target, name, None)
            got = report() if callable(report) else None
            if got is not None:
                out[arg] = got
        self.loaded = bool(out.get("loads"))
        return out

    def _drop(self, drops: Sequence[tuple[str, str, str]]) -> None:
        """Carry out drops, (tier, run, object) each; tier ``release``: evict its chunks only."""
        if not drops:
            return
        released = [f"{run_id}/{name}" for tier, run_id, name in drops if tier == "release"]
        if released:
            self.target.evict(released)
        self.target.free([f"{run_id}/{name}" for tier, run_id, name in drops if tier not in ("cos", "release")])
        cos = self.target.cos
        for tier, run_id, name in drops:
            if tier == "cos" and cos is not None:
                cos.delete(tier_key(run_id, name))

    def _register_group(self) -> int:
        """Offer one more function group's blocks to the source; returns how many
        functions are registered now (it stops at the daemon's ``max_functions``)."""
        c = self.target.config
        blocks = c.capacity // c.block_size
        g = self.next_group
        while g * c.group_size < c.max_functions and not self.owns_group(g):
            g += 1                                  # another shard's group
        start = g * c.group_size
        end = min(start + c.group_size, c.max_functions)
        daemon = getattr(c, "daemon_id", "")
        for i in range(start, end):
            if daemon:      # one of several daemons: the metadata server places on it by its id
                self.source.register_capacity(f"{c.function_prefix}-{i}", blocks, daemon)
            else:
                self.source.register_capacity(f"{c.function_prefix}-{i}", blocks)
        if end > start:
            self.groups_registered += 1
            self.next_group = g + 1
            self.functions_bound = max(self.functions_bound, end)
        return int(self.functions_bound if self.functions_bound else max(end, start))

    def _scale_out(self, blocks: int) -> None:
        """At least ``blocks`` more blocks: whole groups, then warm their functions (only
        theirs: the older groups' are warmed by the GC window's schedule, or left to sleep)."""
        c = self.target.config
        per_group = c.group_size * (c.capacity // c.block_size)
        before = functions = min(self.functions_bound, c.max_functions)
        for _ in range(max(1, -(-blocks // per_group))):
            functions = self._register_group()
        if functions > before:
            self.target.prewarm(functions, first=before)

    # -- faults ----------------------------------------------------------------------
    def _failed(self, exc: BaseException) -> float:
        self.failures += 1
        self.last_error = str(exc) or type(exc).__name__
        self._delay = min(self.backoff_max_s, max(self.backoff_min_s, self._delay * 2))
        now = self.clock()
        if now - self._last_log >= self.log_interval_s:
            more = f" ({self._unlogged} more failures since the last message)" if self._unlogged else ""
            log.warning("control loop: %s%s; the daemon keeps serving, retrying (every %.2g s at most)",
                        self.last_error, more, self.backoff_max_s)
            self._last_log, self._unlogged = now, 0
        else:
            self._unlogged += 1
        return self._delay

    def _recovered(self) -> None:
        if self.failures:
            log.warning("control loop: following the metadata server again after %d failed rounds", self.failures)
        self.failures, self._delay, self._unlogged = 0, 0.0, 0
        self._last_log = -math.inf

    # -- running it ------------------------------------------------------------------
    @property
    def deferred(self) -> int:
        return len(self._deferred)

    def wake(self, *_: Any) -> None:
        """Hurry the next round (a listener for new instructions)."""
        self._wake.set()

    def start(self) -> Follower:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="funcsion-control", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = self.step()
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread, then acknowledge what was carried out (best effort)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        with self._lock:
            if self.connected and self.done:
                try:
                    self.source.fetch(self.done, 1)
                except Exception:  # noqa: BLE001 - the source is gone: it offers them again
                    pass

    def close(self) -> None:
        """``stop``, then close the source's connections (when it has any)."""
        self.stop()
        close = getattr(self.source, "close", None)
        if callable(close):
            close()

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Carry out every instruction, the deferred drops too (after a run ends); False
        when ``timeout_s`` ran out first."""
        deadline = self.clock() + timeout_s
        while True:
            wait = self.step()
            if wait == 0:
                continue
            if not self._deferred and not self.failures:
                return True
            left = deadline - self.clock()
            if left <= 0:
                return False
            self._nap.wait(min(wait, left))
