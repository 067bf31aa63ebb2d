"""Progress of a local run: one bar per stage, open from the start of the
stage's first task to the end of its last, with retries and failures shown.

``StageProgress`` is the policy, pure: it takes task events with explicit
times and says when each stage's bar opens, moves and closes (``opened_at``,
``closed_at``), handing the drawing to a ``ProgressSink``. ``TqdmSink`` draws
with tqdm (one bar per stage at a fixed line, so a bar's rate and elapsed time
are its stage's own); ``NullSink`` draws nothing. ``starting_stack_line``
is what ``funcsion run`` prints while the embedded stack starts.

The bars stay at their lines until the run ends (``end``): a stage's bar that closes
keeps its final text, and at the end every bar is cleared and the final lines are
written in stage order below what was there, so nothing printed afterwards lands on a
bar and no stale bar is left (a bar that tqdm closes in place moves the cursor under
the bars still drawn). ``announce`` prints a line now, or, while bars are drawn, right
after they are taken off at the end: ``funcsion run``'s Ctrl-C message goes through it.

Not here: scheduling (``_schedule``) or what a failure says (``_executor``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

__all__ = ["StageProgress", "ProgressSink", "NullSink", "TqdmSink", "StageBar", "starting_stack_line", "announce"]

#: Lines ``announce`` holds while bars are drawn, and the sinks drawing them now (weakly: a
#: sink dropped without ``end`` holds nothing back).
_held: list[tuple[str, IO[str] | None]] = []
_drawing: weakref.WeakSet[TqdmSink] = weakref.WeakSet()


def announce(text: str, file: IO[str] | None = None) -> None:
    """Print ``text`` (to ``file``, default stderr) now, or once the progress bars drawn now
    are taken off (see the module docstring). Safe in a signal handler: while bars are
    drawn it only appends to a list."""
    if _drawing:
        _held.append((text, file))
        return
    import sys

    print(text, file=file or sys.stderr, flush=True)


def _release_held() -> None:
    import sys

    while _held and not _drawing:
        text, file = _held.pop(0)
        print(text, file=file or sys.stderr, flush=True)


class ProgressSink(Protocol):
    def open(self, stage: int, name: str, total: int, position: int) -> None: ...
    def advance(self, stage: int, n: int) -> None: ...
    def note(self, stage: int, text: str) -> None: ...
    def close(self, stage: int) -> None: ...
    def end(self) -> None: ...


class NullSink:
    def open(self, stage: int, name: str, total: int, position: int) -> None:
        pass

    def advance(self, stage: int, n: int) -> None:
        pass

    def note(self, stage: int, text: str) -> None:
        pass

    def close(self, stage: int) -> None:
        pass

    def end(self) -> None:
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
    stopped: int = 0  # tasks still running when the run stopped
    opened_at: float | None = None
    closed_at: float | None = None

    def note(self) -> str:
        parts = [f"{len(self.running)} running"] if self.running else []
        if self.retries:
            parts.append(f"{self.retries} retr{'y' if self.retries == 1 else 'ies'}")
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.stopped:
            parts.append(f"{self.stopped} stopped")
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
        """The run is over (or stopped): close every bar still open (a failed run skips the
        rest) and take the bars off the screen. Again: nothing more happens."""
        for bar in self.bars.values():
            if bar.opened_at is not None and bar.closed_at is None:
                bar.closed_at = now
                bar.stopped, bar.running = len(bar.running), set()  # a stopped run's tasks end with it
                self.sink.note(bar.stage, bar.note())
                self.sink.close(bar.stage)
        self.sink.end()

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
        self._final: dict[int, str] = {}  # stage -> its closed bar's last text
        self._lines: dict[int, int] = {}  # stage -> the line its bar is drawn at
        self._order: list[int] = []  # stages in line order

    def open(self, stage: int, name: str, total: int, position: int) -> None:
        import shutil

        from tqdm import tqdm

        sized = shutil.get_terminal_size((0, 0)).columns > 0  # a pty may report 0x0: 100 wide, 50 rows
        self._bars[stage] = tqdm(total=total, desc=f"{name:<{self.width}}", position=position, leave=False,
                                 file=self.file, unit="task", dynamic_ncols=sized, ncols=None if sized else 100,
                                 nrows=None if sized else 50)
        self._lines[stage] = position
        self._order = sorted(self._bars, key=lambda k: self._lines[k])
        _drawing.add(self)

    def advance(self, stage: int, n: int) -> None:
        if stage not in self._final:
            self._bars[stage].update(n)

    def note(self, stage: int, text: str) -> None:
        if stage not in self._final:
            self._bars[stage].set_postfix_str(text, refresh=True)

    def close(self, stage: int) -> None:
        """The stage is over: its bar keeps its last text (and elapsed time) until ``end``."""
        bar = self._bars[stage]
        if stage not in self._final:
            bar.refresh()
            self._final[stage] = str(bar)

    def end(self) -> None:
        """Clear every bar, then write each stage's final line in order, and let ``announce``
        print what it held."""
        if not self._bars:
            return
        bars = [(k, self._bars[k]) for k in self._order]
        self._final.update({k: str(bar) for k, bar in bars if k not in self._final})
        for _, bar in bars:
            bar.close()  # leave=False: clears its own line, the cursor stays where it was
        self.file.write("".join(f"\r{self._final[k]}\n" for k, _ in bars))
        self.file.flush()
        self._bars.clear()
        _drawing.discard(self)
        _release_held()


def starting_stack_line(state_dir: str, functions: int) -> str:
    """What ``funcsion run`` prints before it starts an embedded stack (a second or two)."""
    return (f"funcsion: starting the local stack in {state_dir} (metadata server, SION daemon, "
            f"{functions} storage functions)...")
