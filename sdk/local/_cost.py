"""What a run's cost account (``storage_functions.cost``) is made of, gathered from
what was measured, never modelled:

- the task Lambdas' bills: the executor's local platform (``ExecutionResult.billing``);
- storage-function invocations: the stack's local platform records (start, billed
  duration, memory, and what each invocation reported about itself: warm-up or not,
  its own COS requests), plus the ones still running at the run's end, up to then; a
  warm-up invocation that served requests counts as I/O (its billed time was serving);
- COS requests: the daemon's COS adapter counters (an in-process stack), else the
  daemon's own counters over its STAT op (buffer uploads as PUTs, COS fallbacks and
  recovery reads as GETs);
- recovery: the daemon's counters (instances lost, chunks recovered, COS reads);
- COS storage: each object's bytes for the time it was held (written to freed, or the
  run's end), an upper bound (objects freed before their upload never reach COS).

The daemon and its functions are shared: a concurrent run's requests count in each
run that overlaps them (as in the report's ``recovery``); invocations are shared by
time (``window_usage``). ``sources`` in the account says where each number came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from storage_functions.cost import CostInputs, Invocation, StorageUsage, cost_account, window_usage

__all__ = ["StoreSnapshot", "run_cost", "platform_invocations", "cos_byte_seconds"]


class StoreSnapshot:
    """The counters a cost account needs at one moment: the daemon's STAT (or None) and,
    for a store in this process (a ``Stack``'s ``LocalStore``, or a ``LocalStore``), its COS
    adapter's counters."""

    def __init__(self, stack: Any, stat: Mapping[str, Any] | None) -> None:
        self.stat = dict(stat) if stat is not None else None
        cos = getattr(getattr(stack, "store", stack), "cos", None) if stack is not None else None
        stats = getattr(cos, "stats", None)
        self.cos = stats.as_dict() if stats is not None and hasattr(stats, "as_dict") else None


def platform_invocations(platform: Any, now: float) -> list[Invocation]:
    """Every storage-function invocation the platform recorded, and the ones running now
    (billed up to ``now``, wall clock)."""
    specs = platform.functions()
    out = []
    for r in platform.records():
        spec = specs.get(r.function_name)
        mem = spec.memory_mb if spec is not None else 0
        m = r.metrics
        out.append(Invocation(r.function_name, r.started_at, (r.init_ms + r.duration_ms) / 1000.0, r.billed_ms, mem,
                              # a warm-up that went on to serve requests billed the serving: I/O
                              warmup=bool(m.get("warmup", 0)) and not int(m.get("served", 0)),
                              cos_puts=int(m.get("cos_puts", 0)),
                              cos_gets=int(m.get("cos_gets", 0)), cos_lists=int(m.get("cos_lists", 0))))
    for i in platform.instances():
        if i.state == "busy" and i.last_invoked_at is not None and i.last_invoked_at <= now:
            run_s = now - i.last_invoked_at
            out.append(Invocation(i.function_name, i.last_invoked_at, run_s, max(1, math.ceil(run_s * 1000)),
                                  i.memory_mb, in_flight=True))
    return out


def cos_byte_seconds(objects: Mapping[str, Any], wall_s: float) -> float:
    """Bytes x seconds the run's objects were held (report rows: ``size``, ``written_at``,
    ``freed_at``; an object never freed counts to the run's end)."""
    total = 0.0
    for o in objects.values():
        w = o.get("written_at")
        if w is None:
            continue
        f = o.get("freed_at")
        total += int(o.get("size") or 0) * max(0.0, (wall_s if f is None else float(f)) - float(w))
    return total


def _delta(after: Mapping[str, Any] | None, before: Mapping[str, Any] | None, *names: str) -> int:
    if after is None or before is None:
        return 0
    restarted = int(after.get("daemon_restarts", 0)) > int(before.get("daemon_restarts", 0))
    base = {} if restarted else before  # a restarted daemon began its counters again
    return sum(max(0, int(after.get(n, 0)) - int(base.get(n, 0))) for n in names)


def _fn_invocations(after: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> tuple[int, int]:
    """(invocations, functions invoked) between two STATs, from the daemon's per-function counts."""
    if after is None or before is None:
        return 0, 0
    was = {f["name"]: int(f.get("invocations", 0)) for f in before.get("functions", [])}
    d = [int(f.get("invocations", 0)) - was.get(f["name"], 0) for f in after.get("functions", [])]
    return sum(max(0, x) for x in d), sum(1 for x in d if x > 0)


def run_cost(*, t0: float, t1: float, billing: Mapping[str, Any], before: StoreSnapshot | None,
             after: StoreSnapshot | None, platform: Any, objects: Mapping[str, Any], peak_live_bytes: int,
             function_memory_mb: int) -> dict[str, Any]:
    """The run's cost account: ``t0``..``t1`` its wall-clock span; ``billing`` the task bills
    (its ``source``, when it has one, says where they came from: an AWS run's); ``platform``
    the stack's local platform in this process, or None."""
    wall = max(0.0, t1 - t0)
    fn_bills = billing.get("functions", {}) if billing else {}
    sources = {"tasks": str(billing.get("source") or "the executor's local platform (billed invocations)")
               if billing else "not measured"}
    sb = before.stat if before is not None else None
    sa = after.stat if after is not None else None
    usage: StorageUsage | None = None
    functions = 0
    io_daemon, fn_daemon = _fn_invocations(sa, sb)
    if platform is not None:
        usage = window_usage(platform_invocations(platform, t1), t0, t1)
        functions = len(usage.functions)
        sources["storage_functions"] = "the stack's local platform records (and invocations running at the end)"
    elif sa is not None:
        functions = fn_daemon
        sources["storage_functions"] = "the daemon's per-function invocation counts (STAT); no billed duration"
    else:
        sources["storage_functions"] = "not measured (the daemon could not be asked)"
    if before is not None and after is not None and before.cos is not None and after.cos is not None:
        puts, gets, lists, deletes = (max(0, int(after.cos.get(k, 0)) - int(before.cos.get(k, 0)))
                                      for k in ("puts", "gets", "lists", "deletes"))
        sources["cos"] = "the daemon's COS adapter counters, plus the storage functions' own"
    else:
        puts = _delta(sa, sb, "uploads")
        gets = _delta(sa, sb, "cos_fallbacks", "recovery_cos_reads")
        lists = deletes = 0
        sources["cos"] = ("the daemon's counters over STAT (buffer uploads, COS reads)" if sa is not None
                          else "not measured (the daemon could not be asked)")
    sources["cos_storage"] = "object sizes x the time each was held (written..freed), an upper bound"
    sources["recovery"] = "the daemon's counters over STAT"
    inputs = CostInputs(
        wall_s=wall, task_invocations=int(billing.get("invocations", 0)) if billing else 0,
        task_gb_s=float(billing.get("gb_seconds", 0.0)) if billing else 0.0,
        task_billed_ms=float(sum(int(f.get("billed_ms", 0)) for f in fn_bills.values())),
        storage=usage, storage_io_invocations=io_daemon, cos_puts=puts, cos_gets=gets, cos_lists=lists,
        cos_deletes=deletes, cos_byte_s=cos_byte_seconds(objects, wall),
        recovery_cos_gets=_delta(sa, sb, "recovery_cos_reads"), functions_lost=_delta(sa, sb, "lost_instances"),
        chunks_recovered=_delta(sa, sb, "chunks_recovered"), peak_live_bytes=peak_live_bytes,
        pings=_delta(sa, sb, "pings"), pings_failed=_delta(sa, sb, "pings_failed"),
        functions=functions, function_memory_mb=function_memory_mb, sources=sources)
    return cost_account(inputs)
