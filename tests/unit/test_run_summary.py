"""What the run summary says about its tasks, its cost rate and its stack (issue 30, 3):
retries count attempts after the first, an aborted run names the tasks it interrupted as
``aborted`` and counts the tasks that ran, a short run gets no hourly rate, and the stack a
run used is named."""

from __future__ import annotations

from typing import Any

from sdk.cli._summary import format_report, stack_line, tasks_line
from sdk.local._schedule import RetryPolicy, RunSchedule
from storage_functions.cost import MIN_RATE_WALL_S, CostInputs, cost_account, format_cost


def _task(state: str, attempts: int) -> dict[str, Any]:
    return {"state": state, "attempts": attempts, "stage": 0, "duration_s": None, "started_at": None,
            "finished_at": None}


def _report(tasks: dict[str, Any], status: str = "succeeded", wall_s: float = 1.0,
            stack: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"run_id": "r-1", "workflow": "wc/1", "status": status, "wall_s": wall_s, "policy": "funcstore",
            "outputs": {}, "tasks": tasks, "objects": {}, "error": "interrupted by SIGINT" if status != "succeeded"
            else None, "memory": {"leaked_bytes": 0, "peak_bytes": 0, "peak_live_bytes": 0, "mb_s": 0.0},
            "cost": cost_account(CostInputs(wall_s=wall_s)), "stack": stack or {}}


def test_retried_counts_retries_not_attempts() -> None:
    line = tasks_line({"worker_00": _task("succeeded", 3), "worker_01": _task("succeeded", 2),
                       "reduce": _task("succeeded", 1)})
    assert line == "  tasks: 3, retried: worker_00 twice, worker_01 once"
    assert tasks_line({"a": _task("succeeded", 1)}) == "  tasks: 1, retried: none"


def test_an_aborted_run_counts_what_ran_and_names_what_it_interrupted() -> None:
    s = RunSchedule({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, RetryPolicy(max_attempts=2))
    s.started("a", 0)
    s.succeeded_task("a", 1)
    s.started("b", 1)
    assert s.abort(2, "aborted: the run stopped (KeyboardInterrupt)") == ["b"]
    assert s.tasks["b"].state == "aborted" and s.tasks["c"].state == "skipped"
    assert s.finished
    tasks = {n: _task(t.state, t.attempts) for n, t in s.tasks.items()}
    text = format_report(_report(tasks, status="aborted"))
    assert "  tasks: 2 ran (of 4 planned), retried: none; aborted: b" in text.splitlines()


def test_a_short_run_gets_no_hourly_rate() -> None:
    short = "\n".join(format_cost(cost_account(CostInputs(wall_s=0.1, task_invocations=8, task_gb_s=0.2))))
    assert "/h at its rate" not in short and f"no hourly rate from a run under {MIN_RATE_WALL_S:g} s" in short
    assert "always-on" in short  # a node's price per hour is a price, not a rate: it stays
    long = "\n".join(format_cost(cost_account(CostInputs(wall_s=MIN_RATE_WALL_S, task_invocations=8))))
    assert "/h at its rate" in long


def test_the_summary_names_the_stack_the_run_used() -> None:
    up = {"kind": "up", "state_dir": "/s", "stack_file": "/s/stack.json", "pid": 42, "metadata": "127.0.0.1:1",
          "daemon": "127.0.0.1:2"}
    text = format_report(_report({"a": _task("succeeded", 1)}, stack=up))
    assert text.splitlines()[1] == ("  stack: the one `funcsion up` keeps in /s (/s/stack.json, pid 42: "
                                    "metadata 127.0.0.1:1, daemon 127.0.0.1:2)")
    assert "embedded for this run in /s" in str(stack_line({"kind": "embedded", "state_dir": "/s"}))
    assert stack_line({}) is None  # a report saved before the field


def test_funcsion_runs_counts_the_tasks_that_ran() -> None:
    """``funcsion runs``' tasks column counts as the report's tasks line does: what ran, and of how
    many planned when a stopped run skipped some."""
    from sdk.cli.runs_cmd import _summary, format_runs

    stopped = _report({"a": _task("succeeded", 1), "b": _task("aborted", 1), "c": _task("pending", 0),
                       "d": _task("pending", 0)}, status="aborted")
    done = {**_report({"a": _task("succeeded", 2), "b": _task("succeeded", 1)}), "run_id": "r-2"}
    rows = [_summary(stopped, now=0.0), _summary(done, now=0.0)]
    assert [(r["tasks"], r["planned"]) for r in rows] == [(2, 4), (2, 2)]
    lines = format_runs(rows).splitlines()
    assert "  tasks  " in lines[0]
    assert " 2 of 4 " in lines[1] and " 2 of " not in lines[2]
