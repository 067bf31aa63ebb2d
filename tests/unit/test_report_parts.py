"""The pure parts of run reports: memory over time from the metadata server's samples, the
attempt log, the timeline's rows, and the per-stage table."""

from __future__ import annotations

from types import SimpleNamespace

from sdk.cli._summary import stage_table
from sdk.local._attempts import AttemptLog
from sdk.local._report import memory_series
from sdk.local._report_plot import ROWS_PER_TASK_MAX, timeline_rows


def test_memory_series_is_the_runs_window_of_the_samples() -> None:
    # (time, live, allocated) as the metadata server samples them
    samples = [(90.0, 5, 100), (101.0, 10, 1000), (102.0, 30, 2000), (103.5, 0, 1000), (120.0, 0, 0)]
    pts = memory_series(samples, started=100.0, ended=104.0, t0=99.5, end=(0, 0))
    assert pts == [[0.5, 100, 5],        # at the start: the last sample before it
                   [1.5, 1000, 10], [2.5, 2000, 30], [4.0, 1000, 0],
                   [4.5, 0, 0]]         # the end: what the run held once ended
    assert memory_series([], 10.0, 12.0, 10.0) == [[0.0, 0, 0], [2.0, 0, 0]]


def test_a_long_series_keeps_each_stretchs_peak() -> None:
    samples = [(float(k), k % 7, 1000 if k == 5003 else k % 5) for k in range(10_000)]
    pts = memory_series(samples, 0.0, 9999.0, 0.0, max_points=100)
    assert len(pts) <= 101 and max(p[1] for p in pts) == 1000 and max(p[2] for p in pts) == 6
    assert [p[0] for p in pts] == sorted(p[0] for p in pts)


def test_attempt_log_rows_carry_request_ids_errors_and_platform_figures() -> None:
    log = AttemptLog()
    log.begin("a", 1, "rq-1", 10.0)
    log.begin("b", 1, "rq-2", 10.5)
    log.end("rq-1", 11.0, "error", "ValueError: x", "Traceback ...\nValueError: x\n")
    log.begin("a", 2, "rq-3", 11.5)
    log.end("rq-3", 12.0, "ok")
    log.abort(13.0, "aborted: the run stopped (KeyboardInterrupt)")
    log.add_platform_records([SimpleNamespace(request_id="rq-1", billed_ms=1001, max_memory_used_mb=48.04,
                                              cold=True, init_ms=350.123)])
    rows = log.rows(t0=10.0)
    assert rows["a"]["tries"] == [
        {"attempt": 1, "request_id": "rq-1", "started_at": 0.0, "finished_at": 1.0, "outcome": "error",
         "billed_ms": 1001, "max_memory_mb": 48.0, "cold": True, "init_ms": 350.1},
        {"attempt": 2, "request_id": "rq-3", "started_at": 1.5, "finished_at": 2.0, "outcome": "ok",
         "billed_ms": None, "max_memory_mb": None, "cold": None, "init_ms": None}]
    assert rows["a"]["errors"] == [{"attempt": 1, "at": 1.0, "error": "ValueError: x",
                                    "traceback": "Traceback ...\nValueError: x\n", "request_id": "rq-1"}]
    assert rows["b"]["errors"][0]["error"].startswith("aborted") and rows["b"]["tries"][0]["outcome"] == "aborted"


def _report(stages: dict[str, list[tuple[str, list[tuple[float, float, str]]]]]) -> dict:  # type: ignore[type-arg]
    tasks = {}
    for sid, (sname, members) in enumerate(stages.items()):
        for name, tries in members:
            tasks[name] = {"stage": sid, "stage_name": sname, "state": "succeeded", "attempts": len(tries),
                           "duration_s": tries[-1][1] - tries[0][0] if tries else None,
                           "started_at": tries[0][0] if tries else None,
                           "finished_at": tries[-1][1] if tries else None,
                           "tries": [{"started_at": s, "finished_at": f, "outcome": o} for s, f, o in tries]}
    return {"wall_s": 10.0, "tasks": tasks}


def test_timeline_has_a_row_per_task_in_stage_order() -> None:
    r = _report({"split": [("splitter", [(0.0, 1.0, "ok")])],
                 "map": [("m0", [(1.0, 2.0, "error"), (2.5, 3.0, "ok")]), ("m1", [(1.0, 2.0, "ok")])]})
    rows = timeline_rows(r)
    assert [(sid, label) for sid, label, _ in rows] == [(0, "splitter"), (1, "m0"), (1, "m1")]
    assert rows[1][2] == [(1.0, 2.0, "error", 0.0), (2.5, 3.0, "ok", 0.0)]


def test_many_tasks_pack_into_lanes_per_stage() -> None:
    n = ROWS_PER_TASK_MAX + 24
    # 64 mappers, 4 at a time: each wave starts when the previous ends
    mappers = [(f"m{k}", [(float(k // 4), float(k // 4) + 1.0, "ok")]) for k in range(n)]
    rows = timeline_rows(_report({"split": [("s", [(0.0, 0.5, "ok")])], "map": mappers}))
    lanes = [r for r in rows if r[0] == 1]
    assert len(lanes) == 4 and lanes[0][1] == f"{n} tasks" and all(r[1] == "" for r in lanes[1:])
    assert sum(len(r[2]) for r in lanes) == n
    for _, _, tries in lanes:  # no two attempts overlap on one lane
        assert all(a[1] <= b[0] for a, b in zip(tries, tries[1:]))


def test_stage_table() -> None:
    r = _report({"split": [("s", [(0.0, 0.5, "ok")])],
                 "map": [("m0", [(0.5, 1.0, "error"), (1.2, 2.0, "ok")]), ("m1", [(0.5, 1.5, "ok")])]})
    lines = stage_table(r, [("split", ["s"]), ("map", ["m0", "m1"])])
    assert lines[0].split() == ["stage", "tasks", "start", "s", "end", "s", "busy", "s", "retries", "failed"]
    assert lines[2].split() == ["map", "2", "0.50", "2.00", "2.50", "1", "0"]


def test_recovery_counts_from_the_daemon_restart_when_there_was_one() -> None:
    from sdk.local._report import recovery_figures

    before = {"daemon_restarts": 2, "cos_fallbacks": 40, "chunks_recovered": 9, "lost_instances": 3}
    after = {"daemon_restarts": 3, "cos_fallbacks": 5, "chunks_recovered": 1}  # a new process: counters anew
    got = recovery_figures(before, after)
    assert got["daemon_restarts"] == 1
    assert got["cos_reads"] == 5 and got["chunks_recovered"] == 1 and got["functions_lost"] == 0
    same = recovery_figures(before, dict(before, cos_fallbacks=42))
    assert same["cos_reads"] == 2 and same["daemon_restarts"] == 0
