"""The cost account of a run (or any stretch of time) at AWS's public prices
(``storage_functions.pricing``), from measured counts, beside what the same
workload would cost on a static pool of warm functions (INFINICACHE-style)
and on always-on memory (ElastiCache-style).

Lines, each with its counts and USD:

- ``tasks``: the task Lambdas' invocations and GB-s (the local platform's bills);
- ``storage_io``: storage-function invocations that served requests, their billed
  duration and GB-s (a SION function stays invoked while it serves, so its billed
  duration is the time it held a connection, not the data's lifetime); ``pings`` is the
  daemon's PINGs revalidating idle instances (free on Lambda: a frame inside an invocation
  already billed) and ``pings_failed`` those that found their instance gone, each a new
  invocation counted in ``invocations``;
- ``warmups``: warm-up invocations of storage functions (their own records say so);
- ``recovery``: COS reads made to refill lost function memory (storage-function
  instances lost, as ``functions_lost``, and chunks recovered are counted beside it;
  refilling invocations are I/O);
- ``cos_requests``: PUT/LIST and GET requests to COS (the daemon's adapter and the
  storage functions' own insertion-log PUTs, also counted apart as ``function_puts`` and
  ``function_gets``; DELETE is free);
- ``cos_storage``: GB-months of COS copies (bytes x seconds held).

``overhead`` is SION's (Sec. 6.1.1): warm-ups + recovery over the pay-per-access
part (I/O + COS), 26.69% in the paper. The baselines keep the measured serving,
COS and recovery, and change what memory costs when idle:

- ``static_pool``: the run's functions kept warm for its whole wall time, one
  warm-up each per ``warm_interval_s`` (INFINICACHE: 1 min) of ``warmup_ms``
  billed (the run's measured mean warm-up when it had any), instead of the
  run's own warm-ups;
- ``always_on``: the cheapest ElastiCache nodes whose memory, less the reserved
  quarter, holds the run's peak live bytes, for the wall time (per hour: the
  node price); no Lambda and no COS.

Per hour figures are the run's at its own rate (``usd x 3600 / wall_s``). ``format_cost``
shows them only for runs of at least ``MIN_RATE_WALL_S`` (10 s): below that a run's fixed
costs (its warm-ups, its first requests) scaled to an hour are noise (a 0.1 s run would
claim its one warm-up 36,000 times an hour); the account's JSON keeps them.
Pure: numbers in, dicts out; ``window_usage`` attributes invocation records
to a time window. Collecting the numbers is ``sdk.local._cost``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .pricing import (
    ELASTICACHE_NODES,
    ELASTICACHE_RESERVED_MEMORY,
    HOURS_PER_MONTH,
    LAMBDA_GB_SECOND_USD,
    LAMBDA_REQUEST_USD,
    PRICES_AS_OF,
    S3_GB_MONTH_USD,
    S3_GET_USD,
    S3_PUT_USD,
    CacheNode,
)

__all__ = ["Invocation", "StorageUsage", "CostInputs", "window_usage", "lambda_usd", "cache_nodes",
           "cost_account", "format_cost", "DEFAULT_WARMUP_MS", "INFINICACHE_WARM_INTERVAL_S", "MIN_RATE_WALL_S"]

#: The shortest run whose cost ``format_cost`` extrapolates to an hour (see the module docstring).
MIN_RATE_WALL_S = 10.0

#: INFINICACHE's warm-up interval (Sec. 4.3: every minute keeps instances alive for hours)
INFINICACHE_WARM_INTERVAL_S = 60.0
#: a warm-up's billed duration when the run had none to measure (INFINICACHE: "a few ms")
DEFAULT_WARMUP_MS = 10.0
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class Invocation:
    """One storage-function invocation as the platform measured it: its start (wall clock),
    how long it ran (init included), what was billed, at what memory, whether it was a
    warm-up, its own COS requests, and whether it is still running (``in_flight``: then
    ``duration_s`` is up to now and ``billed_ms`` its running figure)."""

    function: str
    started_at: float
    duration_s: float
    billed_ms: float
    memory_mb: int
    warmup: bool = False
    cos_puts: int = 0
    cos_gets: int = 0
    cos_lists: int = 0
    in_flight: bool = False


@dataclass(slots=True)
class StorageUsage:
    """Storage-function usage in a window."""

    io_invocations: int = 0
    io_billed_ms: float = 0.0
    io_gb_s: float = 0.0
    warmups: int = 0
    warmup_billed_ms: float = 0.0
    warmup_gb_s: float = 0.0
    cos_puts: int = 0
    cos_gets: int = 0
    cos_lists: int = 0
    functions: set[str] = field(default_factory=set)


def window_usage(invocations: Iterable[Invocation], t0: float, t1: float) -> StorageUsage:
    """The part of ``invocations`` that falls in ``[t0, t1]`` (wall clock): an invocation
    counts as one request in the window it started in, and its billed time (and GB-s) in
    proportion to how much of its run overlaps the window; its COS requests count with
    its start. Functions that shared memory with several runs are thus shared by time."""
    u = StorageUsage()
    for inv in invocations:
        end = inv.started_at + max(0.0, inv.duration_s)
        overlap = min(end, t1) - max(inv.started_at, t0)
        starts_inside = t0 <= inv.started_at <= t1
        if overlap <= 0 and not starts_inside:
            continue
        share = 1.0 if inv.duration_s <= 0 else max(0.0, overlap) / inv.duration_s
        ms = inv.billed_ms * min(1.0, share)
        gb_s = inv.memory_mb / 1024.0 * ms / 1000.0
        if inv.warmup:
            u.warmups += int(starts_inside)
            u.warmup_billed_ms += ms
            u.warmup_gb_s += gb_s
        else:
            u.io_invocations += int(starts_inside)
            u.io_billed_ms += ms
            u.io_gb_s += gb_s
        if starts_inside:
            u.cos_puts += inv.cos_puts
            u.cos_gets += inv.cos_gets
            u.cos_lists += inv.cos_lists
        u.functions.add(inv.function)
    return u


def lambda_usd(requests: float, gb_s: float) -> float:
    return requests * LAMBDA_REQUEST_USD + gb_s * LAMBDA_GB_SECOND_USD


def cache_nodes(data_bytes: int, nodes: tuple[CacheNode, ...] = ELASTICACHE_NODES) -> tuple[str, int, float]:
    """The cheapest always-on ElastiCache memory for ``data_bytes``: (node type, count, USD per
    hour). One node of the cheapest type whose usable memory (less the reserved quarter) holds
    the data, or else as many of the largest type as it takes; at least one node."""
    usable = {n.name: n.memory_gib * GiB * (1 - ELASTICACHE_RESERVED_MEMORY) for n in nodes}
    fitting = [n for n in nodes if usable[n.name] >= data_bytes]
    if fitting:
        best = min(fitting, key=lambda n: n.usd_per_hour)
        return best.name, 1, best.usd_per_hour
    big = max(nodes, key=lambda n: n.memory_gib)
    k = max(1, math.ceil(data_bytes / usable[big.name]))
    return big.name, k, k * big.usd_per_hour


@dataclass(slots=True)
class CostInputs:
    """What a run measured, and where each number came from (``sources``)."""

    wall_s: float
    task_invocations: int = 0
    task_gb_s: float = 0.0
    task_billed_ms: float = 0.0
    storage: StorageUsage | None = None  # None: the storage functions' platform could not be asked
    storage_io_invocations: int = 0  # the daemon's count, used when ``storage`` is None
    pings: int = 0  # the daemon's PINGs of idle instances (its ``pings`` counter)
    pings_failed: int = 0  # of them, those unanswered: the instance taken as gone and invoked anew
    cos_puts: int = 0
    cos_gets: int = 0
    cos_lists: int = 0
    cos_deletes: int = 0
    cos_byte_s: float = 0.0
    recovery_cos_gets: int = 0
    functions_lost: int = 0  # storage-function instances lost (the daemon's lost_instances)
    chunks_recovered: int = 0
    peak_live_bytes: int = 0
    functions: int = 0  # storage functions that served the run (the static pool keeps them warm)
    function_memory_mb: int = 0
    warm_interval_s: float = INFINICACHE_WARM_INTERVAL_S
    sources: dict[str, str] = field(default_factory=dict)


def _line(usd: float, **counts: Any) -> dict[str, Any]:
    return {**counts, "usd": usd}


def cost_account(m: CostInputs) -> dict[str, Any]:
    """The account (JSON-ready): ``lines`` per kind, ``total_usd``, ``storage_usd`` (all but the
    tasks), ``per_hour`` of each, the ``overhead`` ratio, and the two baselines."""
    s = m.storage
    io_n = s.io_invocations if s is not None else m.storage_io_invocations
    io_gb_s = s.io_gb_s if s is not None else 0.0
    warm_n = s.warmups if s is not None else 0
    warm_gb_s = s.warmup_gb_s if s is not None else 0.0
    fn_puts = (s.cos_puts + s.cos_lists) if s is not None else 0
    fn_gets = s.cos_gets if s is not None else 0
    puts = m.cos_puts + m.cos_lists + fn_puts
    gets = max(0, m.cos_gets - m.recovery_cos_gets) + fn_gets
    gb_months = m.cos_byte_s / GiB / 3600.0 / HOURS_PER_MONTH
    lines = {
        "tasks": _line(lambda_usd(m.task_invocations, m.task_gb_s), invocations=m.task_invocations,
                       billed_ms=round(m.task_billed_ms, 3), gb_s=round(m.task_gb_s, 6)),
        "storage_io": _line(lambda_usd(io_n, io_gb_s), invocations=io_n, pings=m.pings, pings_failed=m.pings_failed,
                            billed_ms=round(s.io_billed_ms, 3) if s is not None else None,
                            gb_s=round(io_gb_s, 6) if s is not None else None),
        "warmups": _line(lambda_usd(warm_n, warm_gb_s), invocations=warm_n,
                         billed_ms=round(s.warmup_billed_ms, 3) if s is not None else None,
                         gb_s=round(warm_gb_s, 6) if s is not None else None),
        "recovery": _line(m.recovery_cos_gets * S3_GET_USD, cos_gets=m.recovery_cos_gets,
                          functions_lost=m.functions_lost, chunks_recovered=m.chunks_recovered),
        "cos_requests": _line(puts * S3_PUT_USD + gets * S3_GET_USD, puts=puts, gets=gets,
                              deletes=m.cos_deletes, function_puts=fn_puts, function_gets=fn_gets),
        "cos_storage": _line(gb_months * S3_GB_MONTH_USD, gb_months=gb_months),
    }
    total = sum(v["usd"] for v in lines.values())
    storage = total - lines["tasks"]["usd"]
    rate = 3600.0 / m.wall_s if m.wall_s > 0 else 0.0
    pay_per_access = lines["storage_io"]["usd"] + lines["cos_requests"]["usd"] + lines["cos_storage"]["usd"]
    extra = lines["warmups"]["usd"] + lines["recovery"]["usd"]
    # the baselines: the same serving, COS and recovery; only idle memory costs differently
    warm_ms = (s.warmup_billed_ms / s.warmups) if s is not None and s.warmups else DEFAULT_WARMUP_MS
    per_warmup = lambda_usd(1, m.function_memory_mb / 1024.0 * warm_ms / 1000.0)
    static_warm_per_h = m.functions * 3600.0 / m.warm_interval_s * per_warmup
    static = storage - lines["warmups"]["usd"] + static_warm_per_h * m.wall_s / 3600.0
    node, count, node_usd_h = cache_nodes(m.peak_live_bytes)
    return {
        "prices_as_of": PRICES_AS_OF, "wall_s": round(m.wall_s, 3), "lines": lines,
        "total_usd": total, "storage_usd": storage,
        "per_hour": {"total_usd": total * rate, "storage_usd": storage * rate,
                     **{k: v["usd"] * rate for k, v in lines.items()}},
        "overhead": extra / pay_per_access if pay_per_access > 0 else None,
        "static_pool": {"functions": m.functions, "warm_interval_s": m.warm_interval_s,
                        "warmup_ms": round(warm_ms, 3), "usd": static,
                        "usd_per_hour": static * rate if rate else static_warm_per_h},
        "always_on": {"node": node, "nodes": count, "data_bytes": m.peak_live_bytes,
                      "usd": node_usd_h * m.wall_s / 3600.0, "usd_per_hour": node_usd_h},
        "sources": dict(m.sources),
    }


def _pings(io: Mapping[str, Any]) -> str:
    """The I/O line's PINGs, when there were any (an account without them: older JSON)."""
    n, failed = int(io.get("pings") or 0), int(io.get("pings_failed") or 0)
    if not n:
        return ""
    return f", {n} pings" + (f" ({failed} found the instance gone: invoked anew)" if failed else "")


def format_cost(acct: Mapping[str, Any]) -> list[str]:
    """The account as a few report lines."""
    ln = acct["lines"]
    ph = acct["per_hour"]

    def usd(x: float) -> str:
        return f"${x:.6f}"

    t, io, w, r, cr, cs = (ln[k] for k in ("tasks", "storage_io", "warmups", "recovery", "cos_requests",
                                            "cos_storage"))
    gb = "" if io.get("gb_s") is None else f", {io['gb_s']:.3f} GB-s"
    rated = float(acct.get("wall_s") or 0.0) >= MIN_RATE_WALL_S
    rate = (f"{usd(ph['total_usd'])}/h at its rate" if rated else
            f"no hourly rate from a run under {MIN_RATE_WALL_S:g} s")
    out = [f"  cost at AWS prices ({acct['prices_as_of']}): {usd(acct['total_usd'])} this run, {rate}",
           f"    tasks {t['invocations']} invocations, {t['gb_s']:.3f} GB-s: {usd(t['usd'])}",
           f"    storage functions: I/O {io['invocations']} invocations{gb}{_pings(io)}: {usd(io['usd'])}; "
           f"warm-ups {w['invocations']}: {usd(w['usd'])}; recovery {r['cos_gets']} COS reads "
           f"({r['functions_lost']} instances lost): {usd(r['usd'])}",
           f"    COS {cr['puts']} PUT/LIST, {cr['gets']} GET: {usd(cr['usd'])}; storage "
           f"{cs['gb_months']:.2e} GB-months: {usd(cs['usd'])}"]
    ov = acct.get("overhead")
    sp, ao = acct["static_pool"], acct["always_on"]
    notes = ([f"{usd(ph['storage_usd'])}/h"] if rated else []) + (
        [f"overhead over pay-per-access {ov:.1%}"] if ov is not None else [])
    pool = (f"static pool of {sp['functions']} warm functions {usd(sp['usd_per_hour'])}/h" if rated else
            f"static pool of {sp['functions']} warm functions {usd(sp['usd'])}")
    out.append(f"    storage {usd(acct['storage_usd'])}" + (f" ({', '.join(notes)})" if notes else "") + "; "
               f"{pool}; always-on {ao['nodes']}x {ao['node']} {usd(ao['usd_per_hour'])}/h")
    return out
