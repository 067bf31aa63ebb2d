"""The run report (``RunReport``, documented in README "The run report") and
what goes into it: per-task attempts and times, per-object sizes and
lifetimes (all times in seconds from the run's start) and tier (memory, or COS
and why), and the memory figures
from the metadata server's run summary. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import hdag

__all__ = ["RunReport", "task_rows", "object_rows", "memory_figures"]


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
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "workflow": self.workflow, "policy": self.policy,
                "wall_s": round(self.wall_s, 3), "outputs": self.outputs, "persisted": self.persisted,
                "failed_task": self.failed_task, "error": self.error, "tasks": self.tasks, "objects": self.objects,
                "memory": self.memory, "plan": self.plan, "billing": self.billing}


def _rel(t: float, t0: float) -> float | None:
    return round(t - t0, 4) if t else None


def task_rows(graph: hdag.HDAG, tasks: Mapping[str, Any], st: Mapping[str, Any], t0: float) -> dict[str, Any]:
    out = {}
    for name, rec in tasks.items():
        last = graph.functions[name].last_output
        committed = st[last].readable_at if last and last in st else 0.0
        out[name] = {"state": rec.state, "attempts": rec.attempts,
                     "duration_s": round(rec.duration_s, 4) if rec.duration_s is not None else None,
                     "started_at": _rel(rec.started_at or 0, t0), "finished_at": _rel(rec.finished_at or 0, t0),
                     "committed_at": _rel(committed, t0), "errors": rec.errors}
    return out


def object_rows(st: Mapping[str, Any], t0: float) -> dict[str, Any]:
    return {n: {"size": s.size, "state": s.state, "producer": s.producer or None,
                "written_at": _rel(s.readable_at, t0), "freed_at": _rel(s.freed_at, t0),
                "reads": list(s.committed_by), "declared_reads": s.declared_reads,
                "freed_reason": s.freed_reason or None,
                "tier": s.placement.tier if s.placement is not None else None,
                "tier_reason": getattr(s, "tier_reason", None) or None}
            for n, s in st.items()}


def memory_figures(summary: Mapping[str, Any] | None, leaked: int | None,
                   physical: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report's ``memory``. ``summary``: the metadata server's run summary (None: the run
    could not be ended); ``physical``: what the storage functions held for the run (the
    daemon's ledger; None: the daemon could not be asked, then the model's figures stand in
    and ``source`` says so). ``mb_s``/``peak_bytes`` are allocated blocks, except under
    ``oracle``, which is byte-granular by definition: there the bytes held."""
    s = summary or {}
    model = {"model_mb_s": round(float(s.get("allocated_mb_s", 0.0)), 6),
             "model_peak_bytes": int(s.get("peak_allocated_bytes", 0)),
             "model_live_mb_s": round(float(s.get("live_mb_s", 0.0)), 6)}
    if physical is None:
        return {"peak_bytes": model["model_peak_bytes"], "peak_live_bytes": int(s.get("peak_live_bytes", 0)),
                "mb_s": model["model_mb_s"], "live_mb_s": model["model_live_mb_s"], **model,
                "source": "model", "series": [], "leaked_bytes": leaked}
    exact = s.get("policy") == "oracle"
    p = physical
    return {"peak_bytes": int(p["peak_live_bytes" if exact else "peak_allocated_bytes"]),
            "peak_live_bytes": int(p["peak_live_bytes"]),
            "mb_s": round(float(p["live_mb_s" if exact else "allocated_mb_s"]), 6),
            "live_mb_s": round(float(p["live_mb_s"]), 6), **model,
            "source": "storage functions", "series": [list(x) for x in p.get("series", [])],
            "leaked_bytes": leaked}
