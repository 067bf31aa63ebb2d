"""One workflow run on the local stack, start to report: register the
workflow, start a run, upload its inputs, execute its tasks, copy its
outputs to COS, end the run, and measure what it held.

The report (``RunReport.to_dict``, documented in README "The run report")
has per-task attempts and times, per-object sizes and lifetimes (all times in
seconds from the run's start), and the memory figures: ``peak_bytes`` and
``mb_s`` (the memory-time product of allocated bytes, from the metadata
server) and ``leaked_bytes`` (what metadata or the daemon still hold for the
run after it ended; 0 unless something is wrong).
"""

from __future__ import annotations

import importlib.util
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hdag
import wds

from .._client import Client
from .._config import Config
from ..exceptions import TaskError
from ._executor import ExecutorOptions, LocalExecutor
from ._stack import Stack

__all__ = ["RunReport", "RunHints", "run_workflow", "default_inputs", "InputError"]


class InputError(TaskError):
    """A workflow input is missing or cannot be read."""


@dataclass(frozen=True, slots=True)
class RunHints:
    """Pocket's run-start hints (see ``Client.start_run``). ``max_concurrency`` 0 means: take
    the widest stage of the workflow's HDAG (the framework knows its own parallelism)."""

    max_concurrency: int = 0
    capacity_bytes: int = 0
    latency_sensitive: bool = True


def _widest_stage(graph: hdag.HDAG) -> int:
    widths = Counter(f.stage for f in graph.functions.values())
    return max(widths.values(), default=1)


@dataclass
class RunReport:
    status: str
    run_id: str
    workflow: str
    policy: str
    wall_s: float
    outputs: dict[str, str]
    tasks: dict[str, dict[str, Any]]
    objects: dict[str, dict[str, Any]]
    memory: dict[str, Any]
    failed_task: str | None = None
    error: str | None = None
    billing: dict[str, Any] = field(default_factory=dict)
    persisted: dict[str, str] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "workflow": self.workflow, "policy": self.policy,
                "wall_s": round(self.wall_s, 3), "outputs": self.outputs, "persisted": self.persisted,
                "failed_task": self.failed_task, "error": self.error, "tasks": self.tasks, "objects": self.objects,
                "memory": self.memory, "plan": self.plan, "billing": self.billing}


def default_inputs(wds_path: Path) -> dict[str, Any]:
    """``default_inputs()`` of the ``inputs.py`` module next to the WDS file, if there is one."""
    mod_path = wds_path.parent / "inputs.py"
    if not mod_path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"funcsion_inputs_{abs(hash(mod_path))}", mod_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, "default_inputs", None)
    return dict(fn()) if callable(fn) else {}


def _load_inputs(h: hdag.HDAG, wds_path: Path, given: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(h.inputs))
    if unknown:
        raise InputError(f"--input names {', '.join(map(repr, unknown))}, which the workflow does not read "
                         f"as input; its inputs are {', '.join(h.inputs) or 'none'}")
    values: dict[str, Any] = {}
    for name, path in given.items():
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(f"--input {name}={path}: cannot read the file: {exc.strerror or exc}") from None
        try:
            values[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            values[name] = data
    missing = [n for n in h.inputs if n not in values]
    if missing:
        defaults = default_inputs(wds_path)
        for n in missing:
            if n in defaults:
                values[n] = defaults[n]
    missing = [n for n in h.inputs if n not in values]
    if missing:
        raise InputError(f"no value for workflow input(s) {', '.join(map(repr, missing))}; pass "
                         f"--input NAME=PATH for each (or give inputs.py a default_inputs())")
    return values


def run_workflow(wds_path: str | Path, *, config: Config, stack: Stack | None = None,
                 client: Client | None = None, inputs: Mapping[str, str] | None = None,
                 params: Mapping[str, int] | None = None, policy: str | None = None,
                 options: ExecutorOptions | None = None, hints: RunHints | None = None) -> RunReport:
    """Run a workflow once. Give an in-process ``stack`` or a driver ``client`` of a running one."""
    path = Path(wds_path)
    limits = config.wds_limits()
    text = wds.read_text(path, limits)  # read once: what is validated is what is registered
    workflow = wds.loads(text, source=str(path), params=params, limits=limits)
    graph = hdag.build(workflow)
    values = _load_inputs(graph, path, inputs or {})
    if client is None:
        if stack is None:
            raise ValueError("run_workflow needs a stack or a client")
        client = stack.client()
        own_client = True
    else:
        own_client = False
    hints = hints or RunHints()
    try:
        key = client.register_workflow(text, dict(params or {}), str(path))
        run = client.start_run(key, policy=policy or config.policy, ttl_s=config.run_ttl_s,
                               max_concurrency=hints.max_concurrency or _widest_stage(graph),
                               capacity_bytes=hints.capacity_bytes, latency_sensitive=hints.latency_sensitive)
        t0 = time.time()
        run.put_many(values)
        executor = LocalExecutor(graph, client.endpoints, code_dir=path.parent, options=options,
                                 log_dir=str(Path(config.state_dir).resolve() / "logs"))
        try:
            result = executor.run(run.run_id, run.token)
        finally:
            executor.close()
        outputs: dict[str, str] = {}
        if result.succeeded:
            for name in graph.outputs:
                outputs[name] = run.save_output(name)
        statuses = {s.object_name: s for s in run.list()}
        persisted = {n: run.persisted_location(n) for n, s in statuses.items() if s.persist}
        summary = run.end_run("succeeded" if result.succeeded else "failed")
        wall = time.time() - t0
        leaked = _leaked(run, stack, summary)
        run.close()
        return RunReport(
            status="succeeded" if result.succeeded else "failed", run_id=run.run_id, workflow=key,
            policy=str(summary.get("policy", policy or config.policy)), wall_s=wall, outputs=outputs,
            tasks=_tasks(graph, result.tasks, statuses, t0), objects=_objects(statuses, t0),
            memory={"peak_bytes": int(summary.get("peak_allocated_bytes", 0)),
                    "peak_live_bytes": int(summary.get("peak_live_bytes", 0)),
                    "mb_s": round(float(summary.get("allocated_mb_s", 0.0)), 6),
                    "live_mb_s": round(float(summary.get("live_mb_s", 0.0)), 6),
                    "leaked_bytes": leaked},
            failed_task=result.failed_task, error=result.error, billing=result.billing, persisted=persisted,
            plan=run.plan)
    finally:
        if own_client:
            client.close()


def _leaked(run: Client, stack: Stack | None, summary: Mapping[str, Any]) -> int:
    """Bytes the run still holds after it ended: in the allocator, and in the daemon."""
    held = int(summary.get("live_bytes", 0)) + int(summary.get("allocated_bytes", 0))
    if stack is not None:
        deadline = time.time() + 5
        prefix = f"{run.run_id}/"
        stack.drain(timeout_s=Stack.ORACLE_GRACE_S + 5)
        while True:
            stack.pump_once()
            in_daemon = sum(o.size for o in stack.store.daemon.table.all() if o.key.startswith(prefix))
            if not in_daemon or time.time() > deadline:
                break
            time.sleep(0.02)
        held += in_daemon
    return held


def _rel(t: float, t0: float) -> float | None:
    return round(t - t0, 4) if t else None


def _tasks(graph: hdag.HDAG, tasks: Mapping[str, Any], st: Mapping[str, Any], t0: float) -> dict[str, Any]:
    out = {}
    for name, rec in tasks.items():
        last = graph.functions[name].last_output
        committed = st[last].readable_at if last and last in st else 0.0
        out[name] = {"state": rec.state, "attempts": rec.attempts,
                     "duration_s": round(rec.duration_s, 4) if rec.duration_s is not None else None,
                     "started_at": _rel(rec.started_at or 0, t0), "finished_at": _rel(rec.finished_at or 0, t0),
                     "committed_at": _rel(committed, t0), "errors": rec.errors}
    return out


def _objects(st: Mapping[str, Any], t0: float) -> dict[str, Any]:
    return {n: {"size": s.size, "state": s.state, "producer": s.producer or None,
                "written_at": _rel(s.readable_at, t0), "freed_at": _rel(s.freed_at, t0),
                "reads": list(s.committed_by), "declared_reads": s.declared_reads,
                "freed_reason": s.freed_reason or None}
            for n, s in st.items()}
