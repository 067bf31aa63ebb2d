"""Every attempt of every task of one local run: when it ran, under which
Lambda request id, how it ended, and for a failure the error and the
handler's traceback. The executor records; the report and the timeline plot
read. Pure: times are given, nothing is measured here.

Not here: whether a task is retried (``_schedule``) or how a failure is worded
(``_executor``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Attempt", "AttemptLog", "Outcome"]

Outcome = Literal["running", "ok", "error", "aborted"]


@dataclass(slots=True)
class Attempt:
    task: str
    attempt: int  # 1-based
    request_id: str
    started_at: float
    finished_at: float | None = None
    outcome: Outcome = "running"
    error: str | None = None
    traceback: str | None = None
    billed_ms: int | None = None  # from the platform's record of the invocation
    max_memory_mb: float | None = None
    cold: bool | None = None
    init_ms: float | None = None  # the cold start's share of the attempt (a new worker imported the handler)

    def row(self, t0: float) -> dict[str, Any]:
        """The attempt in the report (times in seconds from ``t0``)."""
        return {"attempt": self.attempt, "request_id": self.request_id,
                "started_at": round(self.started_at - t0, 4),
                "finished_at": None if self.finished_at is None else round(self.finished_at - t0, 4),
                "outcome": self.outcome, "billed_ms": self.billed_ms, "max_memory_mb": self.max_memory_mb,
                "cold": self.cold, "init_ms": self.init_ms}

    def error_row(self, t0: float) -> dict[str, Any]:
        """The failure in the report's ``errors`` list."""
        return {"attempt": self.attempt, "at": None if self.finished_at is None else round(self.finished_at - t0, 4),
                "error": self.error, "traceback": self.traceback, "request_id": self.request_id}


class AttemptLog:
    """Attempts in the order they started."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self._open: dict[str, Attempt] = {}  # request id -> attempt still running

    def begin(self, task: str, attempt: int, request_id: str, now: float) -> None:
        a = Attempt(task, attempt, request_id, now)
        self.attempts.append(a)
        self._open[request_id] = a

    def end(self, request_id: str, now: float, outcome: Outcome, error: str | None = None,
            traceback: str | None = None) -> None:
        a = self._open.pop(request_id)
        a.finished_at, a.outcome, a.error, a.traceback = now, outcome, error, traceback or None

    def abort(self, now: float, reason: str) -> None:
        """The run stopped from outside: every running attempt ends ``aborted``."""
        for rid in list(self._open):
            self.end(rid, now, "aborted", reason)

    def add_platform_records(self, records: Iterable[Any]) -> None:
        """Take billed time, peak memory and cold start (init time) from the platform's invocation records
        (``storage_functions.local.InvocationRecord``), matched by request id."""
        by_id = {a.request_id: a for a in self.attempts}
        for r in records:
            a = by_id.get(r.request_id)
            if a is not None:
                a.billed_ms, a.max_memory_mb, a.cold = r.billed_ms, round(r.max_memory_used_mb, 1), r.cold
                a.init_ms = round(r.init_ms, 1) if r.cold else None

    def of(self, task: str) -> list[Attempt]:
        return [a for a in self.attempts if a.task == task]

    def rows(self, t0: float) -> Mapping[str, dict[str, list[dict[str, Any]]]]:
        """Per task: ``{"tries": [...], "errors": [...]}`` for the report."""
        out: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for a in self.attempts:
            row = out.setdefault(a.task, {"tries": [], "errors": []})
            row["tries"].append(a.row(t0))
            if a.outcome in ("error", "aborted"):
                row["errors"].append(a.error_row(t0))
        return out
