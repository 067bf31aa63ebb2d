"""Several workflow runs at once on one stack, each its own run (FuncStore's concurrent
jobs): every job runs ``run_workflow`` in its own thread against the same metadata server
and storage daemon, and the reports come back in the order the jobs were given. A job that
fails does not stop the others; bad input (``InputError``) is raised before any job starts.

With an ``Admission`` (a memory budget) and every job's expected peak, a job's thread
waits until the controller admits it (first come, first served, while the admitted jobs'
peaks fit the budget) and frees its share when its run ends; a job whose peak exceeds
the whole budget is refused (``AdmissionError``) before any job starts."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._client import Client, Endpoints
from .._config import Config
from ._admission import Admission
from ._executor import ExecutorOptions
from ._inputs import PreparedRun, prepare_run
from ._run import RunHints, RunReport, run_workflow
from ._stack import Stack

__all__ = ["jobs_summary", "run_jobs"]


def run_jobs(jobs: Sequence[str | Path | PreparedRun], *, config: Config, stack: Stack | None = None,
             endpoints: Endpoints | None = None, policy: str | None = None,
             options: ExecutorOptions | None = None, params: Mapping[str, int] | None = None,
             hints: RunHints | None = None, admission: Admission | None = None,
             peaks: Sequence[int] | None = None, where: Mapping[str, Any] | None = None) -> list[RunReport]:
    """Run every job concurrently on an in-process ``stack`` or a running one's ``endpoints``
    (each job its own driver client); one report per job, in the given order. With
    ``admission``, ``peaks`` gives each job's expected peak in bytes and jobs start as the
    controller admits them (job ``i`` is submitted as ``i``). ``where``: the stack, for each report."""
    if (stack is None) == (endpoints is None):
        raise ValueError("run_jobs needs a stack or a running stack's endpoints")
    if admission is not None and (peaks is None or len(peaks) != len(jobs)):
        raise ValueError("run_jobs with an admission controller needs one expected peak per job")
    preps = [j if isinstance(j, PreparedRun) else
             prepare_run(j, params=params, options=options, limits=config.wds_limits()) for j in jobs]
    if admission is not None and peaks is not None:
        for i, peak in enumerate(peaks):
            admission.check(i, peak)             # a job that never fits: refused before any starts
    reports: list[RunReport | None] = [None] * len(preps)
    errors: list[BaseException] = []
    turn = threading.Condition()
    admitted: set[Hashable] = set()
    if admission is not None and peaks is not None:
        for i, peak in enumerate(peaks):         # submitted in the given order: first come, first served
            admitted.update(admission.submit(i, peak))

    def done(i: int) -> None:
        if admission is None:
            return
        with turn:
            admitted.update(admission.finish(i))
            turn.notify_all()

    def one(i: int, prep: PreparedRun) -> None:
        if admission is not None:
            with turn:
                turn.wait_for(lambda: i in admitted)
        try:
            if stack is not None:
                reports[i] = run_workflow(prep, config=config, stack=stack, policy=policy, options=options,
                                          hints=hints, where=where)
            else:
                assert endpoints is not None
                with Client(endpoints) as client:
                    reports[i] = run_workflow(prep, config=config, client=client, policy=policy,
                                              options=options, hints=hints, where=where)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)
        finally:
            done(i)

    threads = [threading.Thread(target=one, args=(i, p), name=f"job-{i}", daemon=True)
               for i, p in enumerate(preps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in reports if r is not None]


def jobs_summary(reports: Sequence[RunReport], wall_s: float) -> dict[str, Any]:
    """The report of a set of concurrent jobs: every job's own report under ``jobs``, the
    status (``succeeded`` only if every job did), the wall time of the whole set and the
    summed physical memory-time product and leaked bytes."""
    dicts = [r.to_dict() for r in reports]
    leaked = [d["memory"].get("leaked_bytes") for d in dicts]
    return {"status": "succeeded" if all(d["status"] == "succeeded" for d in dicts) else "failed",
            "wall_s": round(wall_s, 4), "mb_s": round(sum(d["memory"]["mb_s"] for d in dicts), 6),
            "leaked_bytes": None if None in leaked else sum(leaked), "jobs": dicts}
