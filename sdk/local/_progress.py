"""Progress of a local run: one bar per stage, open from the start of the
stage's first task to the end of its last, with retries and failures shown.

``StageProgress`` is the policy, pure: it takes task events with explicit
times and says when each stage's bar opens, moves and closes (``opened_at``,
``closed_at``), handing the drawing to a ``ProgressSink``. ``TqdmSink`` draws
with tqdm (one bar per stage at a fixed line, so a bar's rate and elapsed time
are its stage's own); ``NullSink`` draws nothing. ``starting_stack_line``
is what ``funcsion run`` prints while the embedded stack starts.

Not here: scheduling (``_schedule``) or what a failure says (``_executor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

__all__ = ["StageProgress", "ProgressSink", "NullSink", "TqdmSink", "StageBar", "starting_stack_line"]


class ProgressSink(Protocol):
    def open(self, stage: int, name: str, total: int, position: int) -> None: ...
    def advance(self, stage: int, n: int) -> None: ...
    def note(self, stage: int, text: str) -> None: ...
    def close(self, stage: int) -> None: ...


class NullSink:
    def open(self, stage: int, name: str, total: int, position: int) -> None:
        pass

    def advance(self, stage: int, n: int) -> None:
        pass

    def note(self, stage: int, text: str) -> None:
        pass

    def close(self, stage: int) -> None:
        pass


@dataclass(slots=True)
class StageBar:
    """One stage's bar: its tasks, what they did, and when the bar opened and closed."""

    stage: int
    name: str
    position: int
    tasks: frozenset[str]
    done: int = 0
    running: set[str] = field(default_factory=set)
    retries: int = 0
    failed: int = 0
    finished: set[str] = field(default_factory=set)  # succeeded or failed for good
    opened_at: float | None = None
    closed_at: float | None = None

    def note(self) -> str:
        parts = [f"{len(self.running)} running"] if self.running else []
        if self.retries:
            parts.append(f"{self.retries} retr{'y' if self.retries == 1 else 'ies'}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        return ", ".join(parts)


class StageProgress:
    """Task events in, bar actions out (see the module docstring)."""

    def __init__(self, stages: Sequence[tuple[int, str, Sequence[str]]], sink: ProgressSink | None = None) -> None:
        self.sink: ProgressSink = sink or NullSink()
        self.bars = {sid: StageBar(sid, name, pos, frozenset(fns)) for pos, (sid, name, fns) in enumerate(stages)}
        self._stage_of = {fn: sid for sid, _, fns in stages for fn in fns}

    def _bar(self, fn: str) -> StageBar:
        return self.bars[self._stage_of[fn]]

    def started(self, fn: str, attempt: int, now: float) -> None:
        bar = self._bar(fn)
        if bar.opened_at is None:
            bar.opened_at = now
            self.sink.open(bar.stage, bar.name, len(bar.tasks), bar.position)
        if attempt > 1:
            bar.retries += 1
        bar.running.add(fn)
        self.sink.note(bar.stage, bar.note())

    def succeeded(self, fn: str, now: float) -> None:
        bar = self._bar(fn)
        bar.running.discard(fn)
        bar.finished.add(fn)
        bar.done += 1
        self.sink.advance(bar.stage, 1)
        self._settle(bar, now)

    def failed(self, fn: str, now: float, *, retrying: bool) -> None:
        """An attempt failed; ``retrying``: the task will be tried again."""
        bar = self._bar(fn)
        bar.running.discard(fn)
        if not retrying:
            bar.failed += 1
            bar.finished.add(fn)
        self._settle(bar, now)

    def finish(self, now: float) -> None:
        """The run is over: close every bar still open (a failed run skips the rest)."""
        for bar in self.bars.values():
            if bar.opened_at is not None and bar.closed_at is None:
                bar.closed_at = now
                self.sink.note(bar.stage, bar.note())
                self.sink.close(bar.stage)

    def _settle(self, bar: StageBar, now: float) -> None:
        self.sink.note(bar.stage, bar.note())
        if bar.finished == bar.tasks and bar.closed_at is None:
            bar.closed_at = now
            self.sink.close(bar.stage)


class TqdmSink:
    """One tqdm bar per stage, opened when asked (so its elapsed time and rate are the stage's)."""

    def __init__(self, file: IO[str] | None = None, width: int = 16) -> None:
        import sys

        self.file = file if file is not None else sys.stderr
        self.width = width
        self._bars: dict[int, Any] = {}

    def open(self, stage: int, name: str, total: int, position: int) -> None:
        import shutil

        from tqdm import tqdm

        sized = shutil.get_terminal_size((0, 0)).columns > 0  # a pty may report 0x0: 100 wide, 50 rows
        self._bars[stage] = tqdm(total=total, desc=f"{name:<{self.width}}", position=position, leave=True,
                                 file=self.file, unit="task", dynamic_ncols=sized, ncols=None if sized else 100,
                                 nrows=None if sized else 50)

    def advance(self, stage: int, n: int) -> None:
        self._bars[stage].update(n)

    def note(self, stage: int, text: str) -> None:
        self._bars[stage].set_postfix_str(text, refresh=True)

    def close(self, stage: int) -> None:
        self._bars[stage].close()


def starting_stack_line(state_dir: str, functions: int) -> str:
    """What ``funcsion run`` prints before it starts an embedded stack (a second or two)."""
    return (f"funcsion: starting the local stack in {state_dir} (metadata server, SION daemon, "
            f"{functions} storage functions)...")
