"""A picture of one run from its saved report (``funcsion report RUN --png``), in
the spirit of Dask's performance report and Lithops' plots: on top, allocated
and live memory over time (``memory.series``: ``[t, allocated_bytes,
live_bytes]`` points, a step function); below, a timeline of every task
attempt grouped by stage (a cold start's init time pale, failed attempts red
and hatched, each stage's span shaded in both panels), on one time axis from
the run's start.

Up to ``ROWS_PER_TASK_MAX`` tasks get a row each, labelled; more are packed
into lanes per stage (an attempt takes the first lane free when it starts),
so a 64-mapper stage is as many lanes as ran at once. matplotlib (the
``plot`` extra) is imported only when drawing. Pure but for the file written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["render_report_png", "timeline_rows", "ROWS_PER_TASK_MAX"]

ROWS_PER_TASK_MAX = 40
_STAGE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#72b7b2", "#eeca3b", "#9d755d", "#ff9da6")
_FAILED, _ABORTED = "#d62728", "#9e9e9e"
_MIB = 2**20


def _stages(report: dict[str, Any]) -> list[tuple[int, str, list[str]]]:
    """(stage id, name, tasks) in stage order, from the report's task rows."""
    groups: dict[int, tuple[str, list[str]]] = {}
    for name, t in report.get("tasks", {}).items():
        sid = int(t.get("stage", 0))
        groups.setdefault(sid, (str(t.get("stage_name", f"stage {sid}")), []))[1].append(name)
    return [(sid, nm, fns) for sid, (nm, fns) in sorted(groups.items())]


Try = tuple[float, float, str, float]  # start, finish, outcome, init seconds (0: warm)


def _tries(t: dict[str, Any], end: float) -> list[Try]:
    """(start, finish, outcome, init s) of each attempt; a task from an older report without
    ``tries`` is one bar from its start to its finish."""
    tries = t.get("tries") or []
    if not tries and t.get("started_at") is not None:
        tries = [{"started_at": t["started_at"], "finished_at": t.get("finished_at"),
                  "outcome": "ok" if t.get("state") == "succeeded" else "error"}]
    return [(float(a["started_at"]), float(a["finished_at"] if a.get("finished_at") is not None else end),
             str(a.get("outcome", "ok")), float(a.get("init_ms") or 0.0) / 1000.0) for a in tries]


def timeline_rows(report: dict[str, Any]) -> list[tuple[int, str, list[Try]]]:
    """The timeline's rows top to bottom: (stage id, label, attempts as (start, finish,
    outcome, init s)). One row per task, or lanes per stage past ``ROWS_PER_TASK_MAX`` tasks
    (label empty but on a stage's first lane)."""
    end = float(report.get("wall_s") or 0.0)
    tasks = report.get("tasks", {})
    per_task = len(tasks) <= ROWS_PER_TASK_MAX
    rows: list[tuple[int, str, list[Try]]] = []
    for sid, _name, fns in _stages(report):
        if per_task:
            rows += [(sid, fn, _tries(tasks[fn], end)) for fn in fns]
            continue
        lanes: list[list[Try]] = []
        for a in sorted((a for fn in fns for a in _tries(tasks[fn], end)), key=lambda a: a[0]):
            lane = next((ln for ln in lanes if ln[-1][1] <= a[0]), None)
            if lane is None:
                lanes.append([a])
            else:
                lane.append(a)
        rows += [(sid, f"{len(fns)} tasks" if k == 0 else "", lane) for k, lane in enumerate(lanes or [[]])]
    return rows


def _series(report: dict[str, Any]) -> list[Sequence[float]]:
    return [p for p in (report.get("memory") or {}).get("series") or [] if len(p) >= 3]


def render_report_png(report: dict[str, Any], path: str | Path) -> Path:
    """Draw ``report`` (a saved ``RunReport`` dict) to ``path``; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stages = _stages(report)
    color = {sid: _STAGE_COLORS[k % len(_STAGE_COLORS)] for k, (sid, _, _) in enumerate(stages)}
    rows = timeline_rows(report)
    wall = max(float(report.get("wall_s") or 0.0), 1e-3)
    row_h = 0.24 if len(rows) <= 24 else max(0.08, 6.0 / len(rows))
    tl_h = min(12.0, max(1.6, row_h * len(rows) + 0.8))
    fig, (ax_m, ax_t) = plt.subplots(2, 1, figsize=(11, 3.6 + tl_h), sharex=True, layout="constrained",
                                     gridspec_kw={"height_ratios": [3.2, tl_h]})
    status = report.get("status", "?")
    fig.suptitle(f"run {report.get('run_id')} of {report.get('workflow')}: {status} in {wall:.2f} s "
                 f"(policy {report.get('policy')})", x=0.01, ha="left", fontsize=12, fontweight="bold",
                 color="#222" if status == "succeeded" else _FAILED)

    spans = {}
    for sid, _name, fns in stages:
        times = [a for fn in fns for a in _tries(report["tasks"][fn], wall)]
        if times:
            spans[sid] = (min(a[0] for a in times), max(a[1] for a in times))
    for sid, (t0, t1) in spans.items():
        for ax in (ax_m, ax_t):
            ax.axvspan(t0, t1, color=color[sid], alpha=0.07, lw=0)

    _draw_memory(ax_m, report)
    _draw_timeline(ax_t, rows, stages, color)

    ax_t.set_xlim(0, wall * 1.02)
    ax_t.set_xlabel("seconds from the run's start")
    handles = [Patch(facecolor=color[sid], label=name) for sid, name, _ in stages]
    handles.append(Patch(facecolor="#888", alpha=0.35, label="cold start (init)"))
    handles.append(Patch(facecolor=_FAILED, hatch="///", edgecolor="white", label="failed attempt"))
    source = (report.get("memory") or {}).get("series_source")
    legend = fig.legend(handles=handles, loc="outside lower center", ncol=min(6, len(handles)), frameon=False,
                        fontsize=8, title=f"memory: {source}" if source else None, title_fontsize=7)
    legend.get_title().set_color("#999")
    out = Path(path)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def _draw_memory(ax: Any, report: dict[str, Any]) -> None:
    m = report.get("memory") or {}
    pts = _series(report)
    ax.set_ylabel("memory (MiB)")
    ax.grid(axis="y", color="#ddd", lw=0.6)
    ax.set_axisbelow(True)
    title = (f"memory: peak {m.get('peak_bytes', 0) / _MIB:.2f} MiB allocated, "
             f"{m.get('peak_live_bytes', 0) / _MIB:.2f} MiB live; {m.get('mb_s', 0):.3f} MB·s allocated, "
             f"{m.get('live_mb_s', 0):.3f} MB·s live")
    ax.set_title(title, loc="left", fontsize=9, color="#444")
    if not pts:
        ax.text(0.5, 0.5, "no memory samples in this report", transform=ax.transAxes, ha="center", va="center",
                color="#888")
        return
    t = [float(p[0]) for p in pts]
    alloc = [p[1] / _MIB for p in pts]
    live = [p[2] / _MIB for p in pts]
    ax.fill_between(t, alloc, step="post", color="#4c78a8", alpha=0.25, lw=0)
    ax.step(t, alloc, where="post", color="#4c78a8", lw=1.6, label="allocated (blocks held)")
    ax.step(t, live, where="post", color="#e45756", lw=1.4, label="live (objects not yet freed)")
    ax.set_ylim(0, max(max(alloc), max(live), 1e-3) * 1.18)
    ax.legend(loc="upper right", fontsize=8, frameon=False)


def _draw_timeline(ax: Any, rows: list[tuple[int, str, list[Try]]],
                   stages: list[tuple[int, str, list[str]]], color: dict[int, str]) -> None:
    n = len(rows)
    height = 0.72 if n <= 60 else 0.9
    for y, (sid, _label, tries) in enumerate(rows):
        for start, finish, outcome, init in tries:
            width = max(finish - start, 0.002)
            init = min(init, width)
            fc = color[sid] if outcome == "ok" else _FAILED if outcome == "error" else _ABORTED
            hatch = None if outcome == "ok" else "///"
            if init > 0:  # the new worker importing the handler: pale
                ax.barh(y, init, left=start, height=height, color=fc, alpha=0.35, lw=0)
            ax.barh(y, width - init, left=start + init, height=height, color=fc, hatch=hatch,
                    edgecolor="white" if hatch else None, lw=0)
    ax.set_ylim(n - 0.5, -0.5)
    per_task = all(label for _, label, _ in rows)
    ax.set_yticks(range(n) if per_task else [])
    if per_task:
        ax.set_yticklabels([label if tries else f"{label} (not run)" for _, label, tries in rows],
                           fontsize=7 if n > 16 else 8)
    # stage names at the left edge, each against its rows, with a line between stages
    first: dict[int, list[int]] = {}
    for y, (sid, _, _) in enumerate(rows):
        first.setdefault(sid, [y, y])[1] = y
    for sid, name, fns in stages:
        if sid not in first:
            continue
        y0, y1 = first[sid]
        ax.annotate(f"{name}" + ("" if per_task else f"  ({len(fns)} tasks)"), xy=(1.0, (y0 + y1) / 2),
                    xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points",
                    va="center", ha="left", fontsize=8, fontweight="bold", color=color[sid])
        if y1 < n - 1:
            ax.axhline(y1 + 0.5, color="#ccc", lw=0.6)
    ax.set_ylabel("tasks by stage" if per_task else "concurrent attempts by stage")
    ax.grid(axis="x", color="#eee", lw=0.6)
    ax.set_axisbelow(True)
