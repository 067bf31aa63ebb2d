"""A run report as text: the summary ``funcsion run`` and ``funcsion report``
print, the line that says what failed (naming the task once), the details
of a failure (the handler's traceback, the log file and request id to look
for), and a table of the stages. Pure: report dicts in, strings out.
"""

from __future__ import annotations

import time

from typing import Any

from storage_functions.cost import format_cost

__all__ = ["format_report", "failure_line", "failure_details", "stage_table", "tasks_line", "stack_line"]


def failure_line(d: dict[str, Any]) -> str | None:
    """What stopped the run, e.g. ``task square_1 of run r-1 failed: ZeroDivisionError: ...``
    (None when it succeeded)."""
    if d["status"] == "succeeded":
        return None
    task, error = d.get("failed_task"), d.get("error") or "(no error recorded)"
    if not task:
        return f"run {d['run_id']} {d['status']}: {error}"
    who = f"task {task} of run {d['run_id']}"
    return error if error.startswith(f"{who} failed") else f"{who} failed: {error}"


def _last_error(d: dict[str, Any]) -> dict[str, Any] | None:
    task = d.get("failed_task")
    errors = (d.get("tasks", {}).get(task) or {}).get("errors") or [] if task else []
    last = errors[-1] if errors else None
    return last if isinstance(last, dict) else None


def failure_details(d: dict[str, Any], *, traceback: bool = True) -> list[str]:
    """Lines that help find the cause: the failed attempt's traceback (indented), its log file
    and request id, and how to see the whole report."""
    task = d.get("failed_task")
    if not task:
        return []
    lines: list[str] = []
    err = _last_error(d)
    if traceback and err and err.get("traceback"):
        trace = str(err["traceback"]).rstrip("\n").splitlines()
        said = failure_line(d)
        if trace and said and trace[-1].endswith(f"Error: {said}"):
            trace.pop()  # "sdk.exceptions.FatalTaskError: <the failure line>": said once is enough
        lines += ["  " + ln for ln in trace]
    log = (d.get("tasks", {}).get(task) or {}).get("log")
    if log:
        rid = f" (request id {err['request_id']}, attempt {err['attempt']})" if err and err.get("request_id") else ""
        lines.append(f"  log of {task}: {log}{rid}")
    return lines


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def tasks_line(tasks: dict[str, Any]) -> str:
    """``tasks: 3 ran (of 5 planned), retried: worker_00 twice; aborted: worker_01``: the tasks
    that ran (an attempt started; a failed or aborted run skips the rest), the retries of each
    (attempts after the first) and the tasks a stopped run interrupted."""
    ran = [n for n, t in tasks.items() if t.get("attempts", 0) > 0]
    count = f"{len(ran)}" if len(ran) == len(tasks) else f"{len(ran)} ran (of {len(tasks)} planned)"
    retried = {n: t["attempts"] - 1 for n, t in tasks.items() if t.get("attempts", 0) > 1}
    line = f"  tasks: {count}, retried: " + (
        ", ".join(f"{n} {_times(r)}" for n, r in retried.items()) if retried else "none")
    aborted = [n for n, t in tasks.items() if t.get("state") == "aborted"]
    return line + (f"; aborted: {', '.join(aborted)}" if aborted else "")


def stack_line(s: dict[str, Any]) -> str | None:
    """Which stack the run used (the report's ``stack``; None for a report without it)."""
    kind = s.get("kind")
    if not kind:
        return None
    addrs = f"metadata {s.get('metadata', '?')}, daemon {s.get('daemon', '?')}"
    if kind == "up":
        return (f"  stack: the one `funcsion up` keeps in {s.get('state_dir')} ({s.get('stack_file')}, pid "
                f"{s.get('pid')}: {addrs})")
    if kind == "given":
        return f"  stack: --stack ({addrs}); reports and logs in {s.get('state_dir')}"
    return f"  stack: embedded for this run in {s.get('state_dir')} ({addrs}, stopped after it)"


def format_report(d: dict[str, Any]) -> str:
    lines = [f"run {d['run_id']} of {d['workflow']}: {d['status']} in {d['wall_s']:.2f} s (policy {d['policy']})"]
    where = stack_line(d.get("stack") or {})
    if where:
        lines.append(where)
    for name, where in d["outputs"].items():
        lines.append(f"  output {name}: {where}")
    expiry = d.get("persisted_expiry") or {}
    for name, where in d.get("persisted", {}).items():
        life = expiry.get(name)
        until = (f"kept until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(life['expires_at']))}, "
                 f"{life['keep_s']:g} s after the run" if life else "kept until deleted")
        lines.append(f"  persisted {name}: {where} ({until})")
    lines.append(tasks_line(d["tasks"]))
    objs = d["objects"]
    freed = sum(1 for o in objs.values() if o["state"] == "freed")
    lines.append(f"  objects: {len(objs)}, freed during the run: {freed}")
    m = d["memory"]
    leaked = "unknown" if m["leaked_bytes"] is None else f"{m['leaked_bytes']} bytes"
    lines.append(f"  memory: peak {m['peak_bytes'] / 2**20:.2f} MiB allocated ({m['peak_live_bytes'] / 2**20:.2f} "
                 f"MiB live), {m['mb_s']:.3f} MB*s allocated, leaked {leaked}")
    if d.get("cost"):
        lines += format_cost(d["cost"])
    else:
        cost = d.get("billing", {}).get("cost_usd")
        if cost is not None:  # a report saved before the cost account
            lines.append(f"  task Lambda cost at AWS prices: ${cost:.8f}")
    failed = failure_line(d)
    if failed is not None:
        lines.append(f"  {failed}")
    return "\n".join(lines)


def stage_table(d: dict[str, Any], stages: list[tuple[str, list[str]]]) -> list[str]:
    """One line per stage: tasks, when its first task started and its last ended, retries,
    failures. ``stages``: (name, task names) in order (from the WDS), or one group per task
    name prefix when the WDS is not at hand."""
    rows = [("stage", "tasks", "start s", "end s", "busy s", "retries", "failed")]
    tasks = d.get("tasks", {})
    for name, fns in stages:
        mine = [tasks[f] for f in fns if f in tasks]
        starts = [t["started_at"] for t in mine if t.get("started_at") is not None]
        ends = [t["finished_at"] for t in mine if t.get("finished_at") is not None]
        busy = sum(t["duration_s"] or 0.0 for t in mine)
        rows.append((name, str(len(fns)), f"{min(starts):.2f}" if starts else "-", f"{max(ends):.2f}" if ends else "-",
                     f"{busy:.2f}", str(sum(max(0, t["attempts"] - 1) for t in mine)),
                     str(sum(t["state"] == "failed" for t in mine))))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths)))
            for r in rows]
