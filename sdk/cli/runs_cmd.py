"""``funcsion runs``: the saved run reports of a state directory, one line each
(``<state_dir>/runs/<run_id>.json``, written by every ``funcsion run``)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

__all__ = ["add_parser", "run", "format_runs"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "runs", help="list the saved run reports (funcsion report RUN shows one)",
        description="List the runs whose reports are saved in the state directory, oldest first.")
    p.add_argument("--state-dir", default=None, help="the state directory the runs used (.funcsion)")
    p.add_argument("--json", action="store_true", help="print one JSON array of run summaries")
    p.set_defaults(run=run, _parser=p)


def keeps(r: dict[str, Any], now: float) -> dict[str, Any]:
    """What a finished run still keeps at ``now``: its saved outputs, and its persisted copies
    whose lifetime is not over (name -> expiry, Unix time; None: until deleted)."""
    expiry = r.get("persisted_expiry") or {}
    persisted = {}
    for name in r.get("persisted") or {}:
        life = expiry.get(name)
        if life is None or float(life["expires_at"]) > now:
            persisted[name] = None if life is None else life["expires_at"]
    return {"outputs": sorted(r.get("outputs") or {}), "persisted": persisted}


def _keeps_text(k: dict[str, Any]) -> str:
    parts = [f"{len(k['outputs'])} output{'s' if len(k['outputs']) != 1 else ''}"] if k["outputs"] else []
    for name, until in sorted(k["persisted"].items()):
        parts.append(f"{name} (until {time.strftime('%H:%M:%S', time.localtime(until))})" if until is not None
                     else f"{name} (until deleted)")
    return ", ".join(parts) or "nothing"


def _ran(tasks: dict[str, Any]) -> int:
    """The tasks that ran (an attempt started), as the report's tasks line counts them: a failed
    or aborted run skips the rest of those it planned."""
    return sum(1 for t in tasks.values() if t.get("attempts", 0) > 0)


def _summary(r: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    m = r.get("memory") or {}
    tasks = r.get("tasks") or {}
    return {"run_id": r["run_id"], "workflow": r.get("workflow"), "status": r.get("status"),
            "started": r.get("started"), "wall_s": r.get("wall_s"), "tasks": _ran(tasks), "planned": len(tasks),
            "peak_bytes": m.get("peak_bytes"), "mb_s": m.get("mb_s"), "failed_task": r.get("failed_task"),
            "keeps": keeps(r, time.time() if now is None else now), "report": r.get("_path")}


def format_runs(rows: list[dict[str, Any]]) -> str:
    table = [("run", "started", "workflow", "status", "wall s", "tasks", "peak MiB", "MB*s", "failed task",
              "keeps")]
    for s in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["started"])) if s.get("started") else "-"
        table.append((s["run_id"], started, str(s["workflow"]), str(s["status"]),
                      f"{s['wall_s']:.2f}" if s.get("wall_s") is not None else "-",
                      str(s["tasks"]) if s.get("planned", s["tasks"]) == s["tasks"] else f"{s['tasks']} of {s['planned']}",
                      f"{(s['peak_bytes'] or 0) / 2**20:.2f}", f"{s['mb_s'] or 0:.3f}", s.get("failed_task") or "",
                      _keeps_text(s["keeps"]) if s.get("keeps") else "-"))
    widths = [max(len(r[k]) for r in table) for k in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._report_store import list_reports, runs_dir

    cfg = Config.load(state_dir=args.state_dir)
    rows = [_summary(r) for r in list_reports(cfg.state_dir)]
    if args.json:
        print(json.dumps(rows))
    elif not rows:
        print(f"no saved runs in {runs_dir(cfg.state_dir)}; `funcsion run WDS` saves one report per run")
    else:
        print(format_runs(rows))
    return 0
