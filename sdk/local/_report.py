"""The run report (``RunReport``, documented in docs/run-report.md) and
what goes into it: per-task attempts and times (each attempt with its Lambda
request id, each failure with the handler's traceback), per-object sizes,
lifetimes (all times in seconds from the run's start) and tier (memory, or COS
and why), and the memory figures (physical, from the daemon's ledger, beside the
metadata server's model) with allocated and live bytes over time
(``memory.series``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hdag

from ._attempts import AttemptLog

__all__ = ["RunReport", "task_rows", "object_rows", "memory_figures", "memory_series", "MAX_SERIES_POINTS"]

#: Most points ``memory.series`` keeps (longer series keep each stretch's peaks).
MAX_SERIES_POINTS = 2000


@dataclass
class RunReport:
    status: str  # succeeded | failed | aborted
    run_id: str
    workflow: str
    policy: str
    wall_s: float
    outputs: dict[str, str]
    tasks: dict[str, dict[str, Any]]
    objects: dict[str, dict[str, Any]]
    memory: dict[str, Any]
    failed_task: str | None = None
    error: str | None = None
    billing: dict[str, Any] = field(default_factory=dict)
    persisted: dict[str, str] = field(default_factory=dict)
    #: persisted copies with a lifetime: name -> {"location", "keep_s", "expires_at" (Unix time)};
    #: a copy in ``persisted`` but not here is kept until ``Client.delete``
    persisted_expiry: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    recovery: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0  # wall clock (Unix time) of the run's start; report times count from here
    output_codecs: dict[str, str] = field(default_factory=dict)  # codec each saved output was written with
    cost: dict[str, Any] = field(default_factory=dict)  # the cost account (storage_functions.cost)
    #: the stack the run used: ``kind`` (embedded, up: the one ``funcsion up`` keeps, given: ``--stack``),
    #: ``state_dir``, ``stack_file`` (up), ``metadata`` and ``daemon`` addresses
    stack: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)  # where it ran when not on a local stack (AWS: sdk.aws_run)
    saved_to: str | None = None  # the file the report was saved to (not part of the report)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "workflow": self.workflow, "policy": self.policy,
                "started": round(self.started, 3), "wall_s": round(self.wall_s, 3), "outputs": self.outputs,
                "output_codecs": self.output_codecs, "persisted": self.persisted,
                "persisted_expiry": self.persisted_expiry,
                "failed_task": self.failed_task, "error": self.error, "tasks": self.tasks, "objects": self.objects,
                "memory": self.memory, "plan": self.plan, "billing": self.billing, "recovery": self.recovery,
                "cost": self.cost, "stack": self.stack, **({"target": self.target} if self.target else {})}


_MIB = float(1 << 20)
_MB_PER_MIB = 1e6 / _MIB   # MB-s (10^6 bytes) to MiB-s


def _rel(t: float, t0: float) -> float | None:
    return round(t - t0, 4) if t else None


def task_rows(graph: hdag.HDAG, tasks: Mapping[str, Any], st: Mapping[str, Any], t0: float,
              attempts: AttemptLog | None = None, logs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per task: state, times, ``tries`` (each attempt: request id, times, outcome, billed ms,
    peak memory), ``errors`` (each failed attempt: its error, the handler's traceback and
    request id) and ``log`` (the file its worker wrote; None when no logs are kept)."""
    per_task = attempts.rows(t0) if attempts is not None else {}
    out = {}
    for name, rec in tasks.items():
        info = graph.functions[name]
        last = info.last_output
        committed = st[last].readable_at if last and last in st else 0.0
        mine = per_task.get(name)
        errors = mine["errors"] if mine is not None else [
            {"attempt": None, "at": None, "error": e, "traceback": None, "request_id": None} for e in rec.errors]
        out[name] = {"stage": info.stage, "stage_name": info.stage_name, "state": rec.state,
                     "attempts": rec.attempts,
                     "duration_s": round(rec.duration_s, 4) if rec.duration_s is not None else None,
                     "started_at": _rel(rec.started_at or 0, t0), "finished_at": _rel(rec.finished_at or 0, t0),
                     "committed_at": _rel(committed, t0), "errors": errors,
                     "tries": mine["tries"] if mine is not None else [], "log": (logs or {}).get(name)}
    return out


def object_rows(st: Mapping[str, Any], t0: float) -> dict[str, Any]:
    return {n: {"size": s.size, "state": s.state, "producer": s.producer or None,
                "written_at": _rel(s.readable_at, t0), "freed_at": _rel(s.freed_at, t0),
                "released_at": _rel(getattr(s, "released_at", None) or 0, t0),
                "reads": list(s.committed_by), "declared_reads": s.declared_reads,
                "freed_reason": s.freed_reason or None,
                "tier": s.placement.tier if s.placement is not None else None,
                "tier_reason": getattr(s, "tier_reason", None) or None,
                # several daemons: the one whose functions held it
                **({"daemon": d} if (d := getattr(s.placement, "daemon", None)) else {})}
            for n, s in st.items()}


def memory_figures(summary: Mapping[str, Any] | None, leaked: int | None,
                   physical: Mapping[str, Any] | None = None, *, first_write: float = 0.0,
                   series: list[list[float]] | None = None, series_source: str | None = None) -> dict[str, Any]:
    """The report's ``memory``. ``summary``: the metadata server's run summary (None: the run
    could not be ended); ``physical``: what the storage functions held for the run (the
    daemon's ledger; None: the daemon could not be asked, then the model's figures stand in,
    with ``series`` from ``memory_series``, and ``source`` says so). ``mb_s``/``peak_bytes`` are
    allocated blocks, except under ``oracle``, which is byte-granular by definition: there the
    bytes held. ``block_mb_s``/``peak_block_bytes``: the same entries counted by the whole block
    (the ledger's second unit; equal to ``mb_s`` on a stack without grains), physical only.
    ``trace_oracle_mb_s``: the oracle from this run's own trace (every object in function memory,
    its bytes from the end of its write to its last read, no rounding; the metadata server's
    ``trace_oracle_byte_s``), which no policy's memory-time can fall below. Every MB is a MiB.
    The physical series starts at the run's first stored byte, placed at
    ``first_write`` (seconds from the run's start, as every report time)."""
    s = summary or {}
    # the metadata server's summary counts MB (10^6 bytes); every figure here is MiB, as the ledger's
    model = {"model_mb_s": round(float(s.get("allocated_mb_s", 0.0)) * _MB_PER_MIB, 6),
             "model_peak_bytes": int(s.get("peak_allocated_bytes", 0)),
             "model_live_mb_s": round(float(s.get("live_mb_s", 0.0)) * _MB_PER_MIB, 6),
             "trace_oracle_mb_s": round(float(s.get("trace_oracle_byte_s", 0.0)) / _MIB, 6)}
    if physical is None:
        return {"peak_bytes": model["model_peak_bytes"], "peak_live_bytes": int(s.get("peak_live_bytes", 0)),
                "mb_s": model["model_mb_s"], "live_mb_s": model["model_live_mb_s"], **model,
                "source": "model", "series": series or [], "series_source": series_source,
                "leaked_bytes": leaked}
    exact = s.get("policy") == "oracle"
    p = physical
    return {"peak_bytes": int(p["peak_live_bytes" if exact else "peak_allocated_bytes"]),
            "peak_live_bytes": int(p["peak_live_bytes"]),
            "mb_s": round(float(p["live_mb_s" if exact else "allocated_mb_s"]), 6),
            "live_mb_s": round(float(p["live_mb_s"]), 6),
            "block_mb_s": round(float(p.get("block_mb_s", p["allocated_mb_s"])), 6),
            "peak_block_bytes": int(p.get("peak_block_bytes", p["peak_allocated_bytes"])), **model,
            "source": "storage functions", "series_source": "storage functions (the daemon's ledger)",
            "series": [[round(t - float(p.get("first_t", t)) + first_write, 4), int(a), int(v)]
                       for t, a, v in p.get("series", [])],
            "leaked_bytes": leaked,
            # several daemons: what each one's functions held for the run (``_daemon_stats``)
            **({"daemons": {d: {"mb_s": round(float(q.get("allocated_mb_s", 0.0)), 6),
                                "peak_bytes": int(q.get("peak_allocated_bytes", 0)),
                                "live_mb_s": round(float(q.get("live_mb_s", 0.0)), 6)}
                            for d, q in p["daemons"].items()}} if p.get("daemons") else {})}


#: daemon counters the report's ``recovery`` shows, as (report key, counter names summed);
#: ``functions_lost`` is storage-function instances lost, each once, when the daemon saw it
#: go (``lost_instances``: a connection closed without a BYE, or a new instance answering in
#: its place), whether or not it held chunks; ``lost_functions`` counts only the new
#: instances that found placed chunks missing, when next invoked (4 killed at once: 1)
RECOVERY_COUNTERS = (("functions_lost", ("lost_instances",)), ("chunks_recovered", ("chunks_recovered",)),
                     ("chunks_unrecovered", ("chunks_unrecovered",)),
                     ("cos_reads", ("cos_fallbacks", "recovery_cos_reads")),
                     ("parallel_recoveries", ("parallel_recoveries",)), ("daemon_restarts", ("daemon_restarts",)),
                     # each GET once, where it was served (``_collect.SERVED_FROM``): function memory and
                     # cache functions are memory hits, the daemon's persistent buffer and COS are not
                     ("gets_from_functions", ("gets_from_functions",)), ("gets_from_cache", ("gets_from_cache",)),
                     ("gets_from_buffer", ("gets_from_buffer",)), ("gets_from_cos", ("gets_from_cos",)))


def recovery_figures(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the store lived through during the run: the daemon's counters at its end minus at
    its start (the daemon is shared: concurrent runs' events count in each). A daemon restarted
    meanwhile (``daemon_restarts`` grew: that count survives in its durable table) began its
    counters again: the others then count from its last start. Empty when the daemon could
    not be asked."""
    if before is None or after is None:
        return {}
    restarted = int(after.get("daemon_restarts", 0)) > int(before.get("daemon_restarts", 0))
    base = {} if restarted else before
    out = {k: sum(int(after.get(n, 0)) - int(base.get(n, 0)) for n in names) for k, names in RECOVERY_COUNTERS}
    out["daemon_restarts"] = int(after.get("daemon_restarts", 0)) - int(before.get("daemon_restarts", 0))
    return out


def memory_series(samples: Sequence[Sequence[float]], started: float, ended: float, t0: float,
                  end: tuple[int, int] | None = None, max_points: int = MAX_SERIES_POINTS) -> list[list[float]]:
    """The run's memory over time as ``[t, allocated_bytes, live_bytes]`` (``t`` in seconds from
    ``t0``), a step function: each point holds until the next. ``samples`` are the metadata
    server's ``(time, live_bytes, allocated_bytes)``; the run is ``[started, ended]`` on the same
    clock. The value at ``started`` is the last sample before it (or 0); a point at ``ended``
    closes the series with ``end`` (allocated, live: what the run held once ended) or the last
    sample. Past ``max_points`` each stretch keeps its highest point."""
    before = [p for p in samples if p[0] < started]
    inside = [p for p in samples if started <= p[0] <= ended]
    first = before[-1] if before else (started, 0, 0)
    pts = [[started, first[2], first[1]]] + [[p[0], p[2], p[1]] for p in inside]
    last = inside[-1] if inside else first
    if end is not None:
        pts.append([max(ended, pts[-1][0]), end[0], end[1]])
    elif ended > pts[-1][0]:
        pts.append([ended, last[2], last[1]])
    if len(pts) > max_points:
        step = len(pts) / max_points
        buckets = [pts[int(k * step):int((k + 1) * step)] for k in range(max_points)]
        pts = [[b[0][0], max(p[1] for p in b), max(p[2] for p in b)] for b in buckets if b]
    return [[round(t - t0, 4), int(a), int(v)] for t, a, v in pts]
