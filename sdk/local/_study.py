"""The utilization study's figures (FuncStore Sec. V-C), pure: jiffy's lease from observed
object lifetimes, memory-time reductions and funcstore's distance to the oracle split into
its factors (``decompose``), Pocket's reservation, storage cost at AWS prices,
the budget's job count and the jobs the live admission controller is given, and the
allocated-memory series of several runs summed over time. The runs themselves are made by
``sdk.cli.bench_utilization``; nothing here does I/O.

How each policy's memory-time is counted (physical: what the storage functions held, the
daemon's ledger): ``funcstore`` the grains held over the run (``memory_grain``; released once
the last declared reader has the bytes, the object itself freed at the last reader's commit), ``jiffy`` the whole blocks held (on the baselines' stack, whose
functions hold whole blocks as Jiffy's block store does; allocated at write, freed after the
lease with no access); ``oracle``
the bytes held, write to last read; ``pocket`` its *reservation*: Pocket sizes a job's
capacity from its hints and holds it from the job's start to its end (FuncStore Fig. 12a:
"the amount of resources requested in advance by Pocket is the peak value"), so it is the
job's measured physical peak (one object per block, nothing freed before the end) times the
run's wall time (``reserved_mb_s``).

One unit for all (``in_units``): every policy by the grain and every policy by the whole
block (the ledger counts both from the same entries), and the paper's block model (pocket
and jiffy by the block, funcstore by the grain) labelled as such; the oracle in each is the
*trace oracle* of funcstore's own runs (``trace_oracle_mb_s``: every object's bytes from the
end of its write to its last read, no rounding), which no store can beat, so ``over_oracle``
is never negative; the live oracle run stays as a second figure."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from storage_functions.local._pricing import (
    PRICE_PER_GB_SECOND_USD,
    PRICE_PER_REQUEST_USD,
)
from storage_functions.pricing import S3_GET_USD, S3_PUT_USD

__all__ = [
    "POLICIES",
    "S3_GET_USD",
    "admission_jobs",
    "decompose",
    "decompose_trace",
    "in_units",
    "shares",
    "S3_PUT_USD",
    "lease_ms",
    "max_jobs",
    "median_run",
    "reductions",
    "reserved_mb_s",
    "reserved_series",
    "storage_cost",
    "store_deltas",
    "summed_series",
    "trace_oracle_mb_s",
]

#: the study's policies, jiffy's lease filled in once funcstore's lifetimes are known
POLICIES = ("funcstore", "pocket", "jiffy", "oracle")
MB = 1 << 20


def lease_ms(reports: Iterable[Mapping[str, Any]]) -> int:
    """Jiffy's lease as FuncStore sets it: the longest lifetime (written..freed) of any
    object in the given run reports (dicts), in whole milliseconds, at least 1."""
    longest = 0.0
    for r in reports:
        for o in r["objects"].values():
            if o.get("written_at") is not None and o.get("freed_at") is not None:
                longest = max(longest, o["freed_at"] - o["written_at"])
    return max(1, round(longest * 1000))


def median_run(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Of several reports of one workflow under one policy, the one with the median physical
    MB-s (the lower middle of an even count), with every run's MB-s under ``mb_s_runs``."""
    if not reports:
        raise ValueError("median_run needs at least one report")
    ranked = sorted(reports, key=lambda d: float(d["memory"]["mb_s"]))
    return {**ranked[(len(ranked) - 1) // 2], "mb_s_runs": [float(d["memory"]["mb_s"]) for d in reports]}


def reductions(mb_s: Mapping[str, float]) -> dict[str, float | None]:
    """funcstore's memory-time against the others: 1 - funcstore/pocket, 1 - funcstore/jiffy
    and funcstore/oracle - 1 (None where the other figure is 0)."""
    f = mb_s["funcstore"]

    def ratio(other: str) -> float | None:
        v = mb_s.get(other, 0.0)
        return f / v if v else None

    p, j, o = ratio("pocket"), ratio("jiffy"), ratio("oracle")
    return {"reduction_vs_pocket": None if p is None else round(1 - p, 4),
            "reduction_vs_jiffy": None if j is None else round(1 - j, 4),
            "over_oracle": None if o is None else round(o - 1, 4)}


def _held_mb_s(report: Mapping[str, Any]) -> float:
    """Bytes x seconds of a report's objects in function memory, written to freed (MiB-s):
    the logical bytes held, no parity, no block rounding."""
    total = 0.0
    for o in report["objects"].values():
        if o.get("tier") == "memory" and o.get("written_at") is not None and o.get("freed_at") is not None:
            total += float(o["size"]) * max(float(o["freed_at"]) - float(o["written_at"]), 0.0)
    return total / MB


def decompose(funcstore: Sequence[Mapping[str, Any]], oracle: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """funcstore's memory-time over the oracle's, as the product of two physical factors:
    ``blocks`` (blocks held / bytes held by the storage functions, funcstore's rounding and
    fragmentation) times ``held`` (funcstore's bytes held / the oracle's, both physical:
    parity, the last reader's fetch, which the memory outlasts, and the runs' own timing), so ``blocks * held - 1 == over_oracle``; ``held_objects`` is the
    ``held`` factor from the reports' object tables (logical bytes, written to freed).
    ``funcstore`` and ``oracle``: the run reports (dicts) summed over, e.g. one per workflow."""
    f_alloc = sum(float(d["memory"]["mb_s"]) for d in funcstore)
    f_live = sum(float(d["memory"]["live_mb_s"]) for d in funcstore)
    o_live = sum(float(d["memory"]["mb_s"]) for d in oracle)      # the oracle's MB-s are its bytes held
    f_obj, o_obj = sum(_held_mb_s(d) for d in funcstore), sum(_held_mb_s(d) for d in oracle)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 4) if b else None

    return {"blocks": ratio(f_alloc, f_live), "held": ratio(f_live, o_live), "held_objects": ratio(f_obj, o_obj),
            "over_oracle": None if not o_live else round(f_alloc / o_live - 1, 4)}


def trace_oracle_mb_s(reports: Iterable[Mapping[str, Any]]) -> float:
    """The oracle from runs' own traces (MiB-s): every object in function memory, its bytes from
    the end of its write to its last read, no rounding (the report's ``trace_oracle_mb_s``,
    which the metadata server records), summed over the given reports."""
    return sum(float(d["memory"].get("trace_oracle_mb_s", 0.0)) for d in reports)


def decompose_trace(funcstore: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """funcstore's memory-time over the oracle of its own runs' traces, as two factors:
    ``blocks`` (grains held / bytes held by the storage functions: rounding and
    fragmentation) times ``held`` (bytes held / the trace oracle: the parity chunks of coded
    objects, which the oracle's logical bytes leave out, the last reader's fetch, which the
    memory outlasts since the oracle ends at the read's start, and the store's latencies), so
    ``blocks * held - 1 == over_oracle``."""
    f_alloc = sum(float(d["memory"]["mb_s"]) for d in funcstore)
    f_live = sum(float(d["memory"]["live_mb_s"]) for d in funcstore)
    trace = trace_oracle_mb_s(funcstore)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 4) if b else None

    return {"blocks": ratio(f_alloc, f_live), "held": ratio(f_live, trace),
            "over_oracle": None if not trace else round(f_alloc / trace - 1, 4)}


#: what each unit's column charges
UNITS = {"grain": "every policy by the grains its storage functions held (the stack's memory_grain); "
                  "oracle: the trace oracle of funcstore's own runs",
         "block": "every policy by the whole blocks its entries lay on; oracle: the trace oracle",
         "paper_block_model": "the paper's block model: pocket and jiffy by the whole block (one object per "
                              "block, Pocket's peak reserved for the run), funcstore by the grain; oracle: "
                              "the trace oracle"}


def in_units(alone: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every policy in one unit, side by side: ``alone`` maps funcstore, pocket and jiffy to
    their run reports (one per workflow, the same workflows). Per unit (``UNITS``): the MB-s
    of each policy, the oracle being the trace oracle of funcstore's runs (so ``over_oracle``
    cannot be negative: no store holds an object for less than from its write to its last
    read), and funcstore's ``reductions``."""
    def total(pol: str, key: str) -> float:
        return round(sum(float(d["memory"].get(key, d["memory"]["mb_s"])) for d in alone[pol]), 6)

    trace = round(trace_oracle_mb_s(alone["funcstore"]), 6)
    grain = {pol: total(pol, "mb_s") for pol in ("funcstore", "pocket", "jiffy")}
    block = {pol: total(pol, "block_mb_s") for pol in ("funcstore", "pocket", "jiffy")}
    paper = {"funcstore": grain["funcstore"], "pocket": block["pocket"], "jiffy": block["jiffy"]}
    out: dict[str, dict[str, Any]] = {}
    for unit, mb_s in (("grain", grain), ("block", block), ("paper_block_model", paper)):
        col = {**mb_s, "oracle": trace}
        out[unit] = {"mb_s": col, **reductions(col), "charged_as": UNITS[unit]}
    return out


def shares(per_workflow: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float | None]]:
    """Each workflow's share of each policy's MB-s: ``per_workflow`` policy -> workflow ->
    MB-s; None where the policy's total is 0."""
    out: dict[str, dict[str, float | None]] = {}
    for pol, by_wf in per_workflow.items():
        tot = sum(by_wf.values())
        out[pol] = {n: round(v / tot, 4) if tot else None for n, v in by_wf.items()}
    return out


def storage_cost(mb_s: float, invocations: int, cos_puts: int, cos_gets: int) -> dict[str, float]:
    """AWS cost of keeping the data: Lambda GB-s of the memory held, the storage functions'
    invocations, S3 PUTs and GETs (USD)."""
    fn = mb_s / 1024 * PRICE_PER_GB_SECOND_USD
    inv = invocations * PRICE_PER_REQUEST_USD
    cos = cos_puts * S3_PUT_USD + cos_gets * S3_GET_USD
    return {"function_gb_s": round(mb_s / 1024, 6), "function_usd": fn, "invocations": invocations,
            "invocation_usd": inv, "cos_puts": cos_puts, "cos_gets": cos_gets, "cos_usd": cos,
            "total_usd": fn + inv + cos}


def store_deltas(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    """What the storage daemon did between two ``stats()``: storage-function invocations,
    COS PUTs (buffer uploads) and COS GETs (reads that fell back to COS)."""
    def inv(s: Mapping[str, Any]) -> int:
        return sum(int(f.get("invocations", 0)) for f in s.get("functions", []))
    return {"invocations": inv(after) - inv(before),
            "cos_puts": int(after.get("uploads", 0)) - int(before.get("uploads", 0)),
            "cos_gets": int(after.get("cos_fallbacks", 0)) - int(before.get("cos_fallbacks", 0))}


def max_jobs(peaks: Sequence[int], budget_bytes: int) -> int:
    """How many jobs a budget admits (FuncStore Fig. 11b): jobs arrive in turn, cycling over
    the workflows' measured peaks, and are admitted while the sum of admitted peaks fits."""
    if not peaks or min(peaks) <= 0:
        return 0
    n, used = 0, 0
    while used + peaks[n % len(peaks)] <= budget_bytes:
        used += peaks[n % len(peaks)]
        n += 1
    return n


def reserved_mb_s(peak_bytes: int, wall_s: float) -> float:
    """Pocket's memory-time: the job's peak reserved for its whole run (MB-s, MiB)."""
    return round(peak_bytes / MB * max(wall_s, 0.0), 6)


def reserved_series(peak_bytes: int, wall_s: float) -> list[list[float]]:
    """Pocket's reservation as a memory series (``[time, allocated, live]`` steps)."""
    return [[0.0, peak_bytes, peak_bytes], [round(max(wall_s, 0.0), 4), 0, 0]]


def admission_jobs(peaks: Sequence[tuple[str, int]], budget_bytes: int, cap: int = 0) -> list[tuple[str, int]]:
    """The jobs given to the live admission controller: the workflows in turn (name, expected
    peak) until their expected peaks add up past the budget (so at least one job must wait),
    at most ``cap`` jobs when ``cap`` is positive (0: no cap); none when a peak is not
    positive or ``cap`` is negative."""
    if not peaks or min(p for _, p in peaks) <= 0 or cap < 0:
        return []
    out: list[tuple[str, int]] = []
    total = 0
    while total <= budget_bytes and (not cap or len(out) < cap):
        job = peaks[len(out) % len(peaks)]
        out.append(job)
        total += job[1]
    return out


def summed_series(series: Sequence[Sequence[Sequence[float]]], column: int = 1) -> list[tuple[float, int]]:
    """Several runs' memory series (``[time, allocated, live]`` steps, one list per run)
    summed into one step series over the union of their times; ``column`` 1 is allocated
    bytes, 2 live bytes. A run counts 0 before its first step and after its last."""
    times = sorted({float(p[0]) for s in series for p in s})
    out: list[tuple[float, int]] = []
    for t in times:
        total = 0
        for s in series:
            if not s or t > float(s[-1][0]):
                continue
            i = bisect.bisect_right([float(p[0]) for p in s], t) - 1
            if i >= 0:
                total += int(s[i][column])
        out.append((t, total))
    return out
