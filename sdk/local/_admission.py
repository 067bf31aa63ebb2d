"""Admission of concurrent jobs under a memory budget (FuncStore Fig. 11b), pure: jobs are
submitted with their expected peak (bytes of storage memory) and admitted first come, first
served while the sum of the admitted jobs' expected peaks fits in the budget; a job never
overtakes an earlier one still waiting, and a job whose peak alone exceeds the budget is
refused when it is submitted (``AdmissionError``). No clock and no threads here:
``sdk.local._jobs`` waits on it; ``Admission.log`` is what the study reports."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

from ._inputs import InputError

__all__ = ["Admission", "AdmissionError"]


class AdmissionError(InputError):
    """A job that can never be admitted: its expected peak exceeds the whole budget."""


@dataclass(slots=True)
class Admission:
    """The admission queue of one budget. ``submit``/``finish`` return the jobs admitted by
    that step, in order; ``running`` maps admitted, unfinished jobs to their peaks."""

    budget_bytes: int
    running: dict[Hashable, int] = field(default_factory=dict)
    waiting: deque[tuple[Hashable, int]] = field(default_factory=deque)
    #: every admission and finish in order: ("admit" | "finish", job, bytes held after it)
    log: list[tuple[str, Hashable, int]] = field(default_factory=list)
    max_running: int = 0
    peak_held_bytes: int = 0

    def __post_init__(self) -> None:
        if self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {self.budget_bytes}")

    @property
    def held_bytes(self) -> int:
        """The expected peaks of the running jobs, summed: what the budget has promised."""
        return sum(self.running.values())

    def check(self, job: Hashable, peak_bytes: int) -> None:
        """Refuse a job that could never run (before anything starts)."""
        if peak_bytes < 0:
            raise AdmissionError(f"job {job}: expected peak must be >= 0 bytes, got {peak_bytes}")
        if peak_bytes > self.budget_bytes:
            raise AdmissionError(f"job {job} expects a peak of {peak_bytes / 2**20:.1f} MiB of storage memory, "
                                 f"more than the whole budget of {self.budget_bytes / 2**20:.1f} MiB: it could "
                                 "never be admitted; raise the budget or run it alone")

    def submit(self, job: Hashable, peak_bytes: int) -> list[Hashable]:
        self.check(job, peak_bytes)
        if job in self.running or any(j == job for j, _ in self.waiting):
            raise ValueError(f"job {job} was already submitted")
        self.waiting.append((job, peak_bytes))
        return self._admit()

    def finish(self, job: Hashable) -> list[Hashable]:
        """``job`` ended (whatever its outcome): its share of the budget is free again."""
        if job not in self.running:
            raise ValueError(f"job {job} is not running")
        del self.running[job]
        self.log.append(("finish", job, self.held_bytes))
        return self._admit()

    def _admit(self) -> list[Hashable]:
        out: list[Hashable] = []
        while self.waiting and self.held_bytes + self.waiting[0][1] <= self.budget_bytes:
            job, peak = self.waiting.popleft()
            self.running[job] = peak
            self.log.append(("admit", job, self.held_bytes))
            self.max_running = max(self.max_running, len(self.running))
            self.peak_held_bytes = max(self.peak_held_bytes, self.held_bytes)
            out.append(job)
        return out
