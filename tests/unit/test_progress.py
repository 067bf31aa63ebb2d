"""Progress bars per stage (issue 16 item 4): a stage's bar opens when its first task starts
and closes when its last one ends (once all bars opened at run start and closed at run end,
so a 0.3 s merger showed 4.29 s/task), and retries and failures show. Driven by events with
explicit times; tqdm drawn into a string."""

from __future__ import annotations

import io

from sdk.local._progress import StageProgress, TqdmSink, starting_stack_line

STAGES = [(0, "split", ["splitter"]), (1, "map", ["m0", "m1", "m2"]), (2, "merge", ["merger"])]


class Recorder:
    """A sink that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, object]] = []

    def open(self, stage: int, name: str, total: int, position: int) -> None:
        self.calls.append(("open", stage, (name, total, position)))

    def advance(self, stage: int, n: int) -> None:
        self.calls.append(("advance", stage, n))

    def note(self, stage: int, text: str) -> None:
        self.calls.append(("note", stage, text))

    def close(self, stage: int) -> None:
        self.calls.append(("close", stage, None))

    def end(self) -> None:
        self.calls.append(("end", -1, None))


def test_each_bar_spans_its_stage_not_the_run() -> None:
    p = StageProgress(STAGES)
    p.started("splitter", 1, 1.0)
    p.succeeded("splitter", 1.5)
    for fn in ("m0", "m1", "m2"):
        p.started(fn, 1, 1.6)
    p.succeeded("m0", 2.0)
    p.succeeded("m1", 2.2)
    assert p.bars[2].opened_at is None  # merge has not started: no bar yet
    p.succeeded("m2", 3.0)
    p.started("merger", 1, 3.1)
    p.succeeded("merger", 3.4)
    p.finish(9.0)  # the run ends much later: no bar is held open until then
    spans = {b.name: (b.opened_at, b.closed_at) for b in p.bars.values()}
    assert spans == {"split": (1.0, 1.5), "map": (1.6, 3.0), "merge": (3.1, 3.4)}


def test_retries_and_failures_are_shown() -> None:
    rec = Recorder()
    p = StageProgress(STAGES, rec)
    p.started("splitter", 1, 0.0)
    p.succeeded("splitter", 0.1)
    p.started("m0", 1, 0.2)
    p.started("m1", 1, 0.2)
    assert rec.calls[-1] == ("note", 1, "2 running")
    p.failed("m0", 0.5, retrying=True)
    assert rec.calls[-1] == ("note", 1, "1 running") and p.bars[1].closed_at is None
    p.started("m0", 2, 0.7)
    assert rec.calls[-1] == ("note", 1, "2 running, 1 retry")
    p.failed("m0", 0.9, retrying=False)
    assert rec.calls[-1] == ("note", 1, "1 running, 1 retry, 1 failed")
    p.succeeded("m1", 1.0)
    p.finish(1.2)  # m2 never ran (the run failed): the bar closes with the run
    assert p.bars[1].closed_at == 1.2 and p.bars[2].opened_at is None
    assert [c for c in rec.calls if c[0] in ("open", "close")] == [
        ("open", 0, ("split", 1, 0)), ("close", 0, None), ("open", 1, ("map", 3, 1)), ("close", 1, None)]
    assert ("advance", 1, 1) in rec.calls and rec.calls.count(("advance", 1, 1)) == 1  # only m1 completed


def test_tqdm_draws_a_stage_only_once_it_started() -> None:
    out = io.StringIO()
    p = StageProgress(STAGES, TqdmSink(out))
    p.started("splitter", 1, 0.0)
    p.succeeded("splitter", 0.1)
    drawn = out.getvalue()
    assert "split" in drawn and "1/1" in drawn and "map" not in drawn and "merge" not in drawn
    p.started("m0", 1, 0.2)
    p.failed("m0", 0.3, retrying=True)
    p.started("m0", 2, 0.4)
    assert "map" in out.getvalue() and "1 retry" in out.getvalue()
    p.finish(0.5)


def test_starting_stack_line() -> None:
    line = starting_stack_line(".funcsion", 12)
    assert line == ("funcsion: starting the local stack in .funcsion (metadata server, SION daemon, "
                    "12 storage functions)...")


def _screen(stream: str) -> list[str]:
    """What a terminal shows after ``stream``: text overwrites, ``\\r`` goes to the line's start,
    ``\\n`` to the next line's (a tty's ONLCR), ``ESC[A`` up a line (all tqdm writes)."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(stream):
        if stream.startswith("\x1b[A", i):
            row, i = max(0, row - 1), i + 3
            continue
        c = stream[i]
        if c == "\r":
            col = 0
        elif c == "\n":
            row, col = row + 1, 0
            rows += [[] for _ in range(row + 1 - len(rows))]
        else:
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = c
            col += 1
        i += 1
    return [("".join(r)).rstrip() for r in rows]


def test_a_stopped_run_takes_its_bars_off_before_the_abort_line_and_leaves_none_stale() -> None:
    from sdk.local._progress import announce

    term = io.StringIO()
    p = StageProgress(STAGES, TqdmSink(term))
    p.started("splitter", 1, 0.0)
    p.succeeded("splitter", 0.1)  # split's bar closes; map's opens on the line below
    p.started("m0", 1, 0.2)
    p.started("m1", 1, 0.2)
    announce("funcsion run: SIGINT: stopping the run", term)  # Ctrl-C while the bars are drawn
    assert "SIGINT" not in term.getvalue()
    p.finish(0.5)  # the executor stops: the bars go first
    announce("run r-1 of wf: aborted", term)  # the report, printed at once now
    screen = [ln for ln in _screen(term.getvalue()) if ln]
    assert len(screen) == 4, screen
    assert screen[0].startswith("split") and "1/1" in screen[0]
    assert screen[1].startswith("map") and "0/3" in screen[1] and "2 stopped" in screen[1]
    assert screen[2:] == ["funcsion run: SIGINT: stopping the run", "run r-1 of wf: aborted"]


def test_a_finished_run_leaves_one_line_per_stage_in_order() -> None:
    term = io.StringIO()
    p = StageProgress(STAGES, TqdmSink(term))
    p.started("splitter", 1, 0.0)
    for fn in ("m0", "m1", "m2"):
        p.started(fn, 1, 0.1)  # map opens while split still runs
    p.succeeded("splitter", 0.2)
    for fn in ("m0", "m1", "m2"):
        p.succeeded(fn, 0.3)
    p.started("merger", 1, 0.4)
    p.succeeded("merger", 0.5)
    p.finish(0.6)
    term.write("report\n")
    screen = [ln for ln in _screen(term.getvalue()) if ln]
    assert [ln.split()[0] for ln in screen] == ["split", "map", "merge", "report"], screen
    assert "1/1" in screen[0] and "3/3" in screen[1] and "1/1" in screen[2]
