"""``funcsion logs RUN [TASK] [--attempt N]``: a task's log lines, attempt by attempt,
without grepping files.

A task's worker processes write to their entry's log file (``<state_dir>/logs/<app>-<entry>.log``,
shared by every replica of the entry and by every run), CloudWatch-style: each attempt is
framed by ``START RequestId: <id>`` and ``END``/``REPORT RequestId: <id>`` lines, and each
line the handler prints is ``<time>\\t<request id>\\t<text>``. The run's saved report
(``funcsion report``) lists each task's attempts with their request ids and its log file;
this command prints the lines of those attempts (the request-id column dropped: the header
names it), each attempt under a header with its outcome and times. Without TASK: every
task that ran, in the order they first started; ``--attempt N``: only that attempt.

RUN as ``funcsion report`` takes it: a run id (r-3), ``last``, or a report file. The
selection (``attempt_lines``) is pure; reading the report and the files is ``run``.
Not here: the report's summary (``_summary``) or how the platform writes logs
(``storage_functions.local._worker``).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable
from typing import Any

from funcsion_errors import FuncsionError

__all__ = ["add_parser", "run", "attempt_lines", "LogsNotFound"]


class LogsNotFound(FuncsionError):
    """The run has no such task or attempt, or its log file cannot be read."""

    retryable = False


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "logs", help="print a run's task logs, attempt by attempt",
        description="Print the log lines of a run's tasks (each attempt between its START and REPORT lines), "
                    "from the log files of the state directory and the run's saved report.")
    p.add_argument("run_id", metavar="RUN", help="a run id (r-3), 'last', or the path of a report file")
    p.add_argument("task", metavar="TASK", nargs="?", help="one task (default: every task that ran, in order)")
    p.add_argument("--attempt", type=int, metavar="N", help="only attempt N of TASK (1 is the first)")
    p.add_argument("--state-dir", default=None, help="the state directory the run used (.funcsion)")
    p.set_defaults(run=run, _parser=p)


def attempt_lines(lines: Iterable[str], request_ids: Iterable[str]) -> dict[str, list[str]]:
    """The lines of each of ``request_ids`` in a log file: its ``START``, ``END`` and ``REPORT``
    lines as they are, and the lines it printed as ``<time>\\t<text>`` (its id dropped); in file
    order. A line of another invocation, or of a handler's import (``INIT``), is not taken."""
    wanted = set(request_ids)
    out: dict[str, list[str]] = {rid: [] for rid in wanted}
    for raw in lines:
        line = raw.rstrip("\n")
        when, sep, rest = line.partition("\t")
        if not sep:
            continue
        tag, sep, text = rest.partition("\t")
        if sep and tag in wanted:  # a line the invocation printed
            out[tag].append(f"{when}\t{text}")
            continue
        for frame in ("START RequestId: ", "END RequestId: ", "REPORT RequestId: "):
            if rest.startswith(frame):
                rid = rest[len(frame):].split(maxsplit=1)[0] if len(rest) > len(frame) else ""
                if rid in wanted:
                    out[rid].append(line)
                break
    return out


def _select(doc: dict[str, Any], task: str | None, attempt: int | None) -> list[tuple[str, dict[str, Any]]]:
    """(task, try) pairs to show, in order; raises ``LogsNotFound`` naming what exists."""
    tasks: dict[str, Any] = doc.get("tasks") or {}
    if task is not None and task not in tasks:
        close = difflib.get_close_matches(task, list(tasks), n=3)
        hint = (f"did you mean {' or '.join(map(repr, close))}?" if close else
                f"its tasks: {', '.join(list(tasks)[:8])}{' ...' if len(tasks) > 8 else ''}")
        raise LogsNotFound(f"run {doc['run_id']} has no task {task!r}; {hint}")
    names = [task] if task is not None else sorted(
        (n for n, t in tasks.items() if t.get("tries")), key=lambda n: (tasks[n]["tries"][0]["started_at"], n))
    chosen = []
    for name in names:
        tries = tasks[name].get("tries") or []
        if attempt is not None:
            tries = [t for t in tries if t.get("attempt") == attempt]
            if not tries:
                had = len(tasks[name].get("tries") or [])
                raise LogsNotFound(f"task {name} of run {doc['run_id']} has no attempt {attempt}; it made {had} "
                                   f"(attempts count from 1)")
        if task is not None and not tries:
            raise LogsNotFound(f"task {name} of run {doc['run_id']} did not run (state {tasks[name].get('state')}): "
                               "it has no log lines")
        chosen += [(name, t) for t in tries]
    return chosen


def _header(doc: dict[str, Any], name: str, t: dict[str, Any], log: str) -> str:
    made = len(doc["tasks"][name].get("tries") or [])
    end = t.get("finished_at")
    when = f"{t.get('started_at')} s to {end} s" if end is not None else f"from {t.get('started_at')} s"
    return (f"== task {name}, attempt {t.get('attempt')} of {made}: {t.get('outcome')} ({when} into run "
            f"{doc['run_id']}), request id {t.get('request_id')}, {log}")


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._report_store import load_report

    if args.attempt is not None and args.task is None:
        args._parser.error("--attempt N picks an attempt of one task: give TASK too")
    cfg = Config.load(state_dir=args.state_dir)
    doc = load_report(cfg.state_dir, args.run_id)
    chosen = _select(doc, args.task, args.attempt)
    if not chosen:
        print(f"run {doc['run_id']}: no task ran, so there are no log lines")
        return 0
    by_file: dict[str, list[str]] = {}
    for name, t in chosen:
        log = doc["tasks"][name].get("log")
        if not log:
            raise LogsNotFound(f"the report of run {doc['run_id']} names no log file for task {name} (the platform "
                               "kept none)")
        by_file.setdefault(log, []).append(str(t.get("request_id")))
    found: dict[str, list[str]] = {}
    for log, rids in by_file.items():
        try:
            with open(log, encoding="utf-8", errors="replace") as fh:
                found.update(attempt_lines(fh, rids))
        except OSError as exc:
            raise LogsNotFound(f"cannot read the log of run {doc['run_id']}: {log}: {exc.strerror or exc} (the "
                               "state directory's logs/ was removed, or the run used another: give --state-dir)"
                               ) from None
    out: list[str] = []
    for name, t in chosen:
        log = str(doc["tasks"][name].get("log"))
        lines = found.get(str(t.get("request_id"))) or [f"(no lines of request {t.get('request_id')} in {log})"]
        out += [*([""] if out else []), _header(doc, name, t, log), *lines]
    print("\n".join(out))
    return 0
