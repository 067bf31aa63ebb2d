"""What lifetime grouping saves in storage functions, for ``funcsion bench lifetime``'s
``grouping`` keys (issue 32 item 3).

Grouping can save whole storage functions, not pages: a function whose blocks are all
free leaves the pool and stops being billed and warmed. So each run is measured by its
functions: a function is *held* from the first put placed on it until the last object
on it is freed (the union of ``[written_at, freed_at]`` of the objects with an extent on
it: the allocator frees a block when its last entry goes and reports the function idle
when its last block does, when the server emits ``ReleaseFunction``). Per workflow and
policy:

- ``function_gb_s``: the seconds each function was held x its memory (``function_memory_mb``);
- ``functions_released``: how often a function left the pool *during* the run, before
  the run's last commit (what the end of a run frees every policy frees alike);
- ``usd``: ``function_gb_s`` at Lambda's GB-second price (a storage function is billed
  while it holds data: it stays invoked, and warmed, until released).

The headline figures place every measured run's trace again under each of the three
policies (``replay``: the allocator is pure, so the same sizes, times and predictions go
through it with each policy's pool keys) and average over the traces: on a loaded machine
one run's timing differs from the next's by more than the policies do (the same policy's
function GB-s varied 2-4x between runs). ``live`` beside them is what each policy's own
runs measured on the stack (from the metadata server's record of the functions each freed
object lay on) with ``report_storage_usd``, the run report's ``cost.storage_usd`` (the
storage functions' billed invocations and COS).

``grouping_saving`` is ``1 - min(funcstore, funcstore:expiry) / funcstore:nogroup`` of
``function_gb_s`` on the ``features`` example, the one whose stages mix lifetimes. Each
predictor is measured alone: ``model`` (the served models, the heuristic where a
category has none) and ``lookup`` (the median measured lifetime per feature vector of
a training run of the same workflow, on the same stack, before the measured runs).

``grouping_bound`` (per predictor, workflow: function GB-s) is ``function_bound`` of the
same traces: the least any placement could hold them in, even one moving data between
functions; ``grouping_bound_saving`` is ``1 - grouping_bound / funcstore:nogroup`` on
``features``, the most grouping could save there.

The storage functions are sized so that a run spans several of them
(``FUNCTION_MEMORY_MB``, of which ``DATA_MB`` hold blocks): at the default 1 GiB a run of the examples fits on one
function and no policy can release any during it. Not covered: the model accuracy
figures (``bench_lifetime``).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DATA_MB", "FUNCTION_MEMORY_MB", "GROUPING_POLICIES", "LookupPredictor", "bench_keys", "bound_saving",
           "function_bound", "grouping", "grouping_stack", "occupancy", "print_grouping", "replay", "run_functions",
           "saving"]

#: storage-function memory (Lambda's least) and the part of it that holds data in the measure:
#: 8 MiB, 1/128 of a 1 GiB function's, so the examples' runs (up to ~40 MB live) span several
#: functions as runs 128 times larger would span 1 GiB functions
FUNCTION_MEMORY_MB = 128
DATA_MB = 8
GROUPING_POLICIES = ("funcstore", "funcstore:expiry", "funcstore:nogroup")
#: the workflow whose stages mix lifetimes: where ``grouping_saving`` is measured
SAVING_WORKFLOW = "features"


def occupancy(spans: Iterable[tuple[Iterable[str], float, float]], end: float) -> tuple[dict[str, float], int]:
    """``spans``: (functions an object lies on, written_at, freed_at). Returns the seconds
    each function was held (the union of its objects' spans) and how many times a
    function became free strictly before ``end``."""
    per: dict[str, list[tuple[float, float]]] = {}
    for fns, start, stop in spans:
        for fn in set(fns):
            per.setdefault(fn, []).append((start, max(start, stop)))
    held: dict[str, float] = {}
    released = 0
    for fn, ivs in per.items():
        ivs.sort()
        total, (lo, hi) = 0.0, ivs[0]
        for a, b in ivs[1:]:
            if a > hi:                       # the function was empty between hi and a
                total += hi - lo
                released += hi < end
                lo, hi = a, b
            else:
                hi = max(hi, b)
        total += hi - lo
        released += hi < end
        held[fn] = total
    return held, released


def run_functions(run: Any, function_memory_mb: int) -> dict[str, float]:
    """One finished run's figures from its metadata record (``RunRecord``)."""
    from storage_functions.pricing import LAMBDA_GB_SECOND_USD

    spans = list(run.function_spans)
    # the run's last commit: what its end frees after it (the outputs) every policy frees alike
    stops = [stop for _, _, stop in spans if run.ended is None or stop < run.ended]
    end = max(stops, default=0.0)
    held, released = occupancy(spans, end)
    gb_s = sum(held.values()) * function_memory_mb / 1024.0
    return {"function_gb_s": gb_s, "functions_released": released, "functions_used": len(held),
            "usd": gb_s * LAMBDA_GB_SECOND_USD}


def replay(objects: Mapping[str, Mapping[str, Any]], predicted: Mapping[str, float], policy: str,
           blocks_per_function: int, block_size: int, data_chunks: int, parity_chunks: int,
           group: int) -> dict[str, float]:
    """Place one run's trace again (its objects' sizes and ``written_at``/``freed_at`` from the
    run report, ``predicted`` lifetimes from its record) through the allocator with the pool
    keys ``policy`` gives them, on functions of ``blocks_per_function`` blocks (``group`` at
    first, a group more whenever one is short): every policy measured on the same timing,
    which on a loaded machine differs from run to run more than the policies do."""
    from metadata_server import Allocator, group_key, parse_policy

    pol = parse_policy(policy)
    alloc = Allocator(block_size, data_chunks, parity_chunks)
    names: list[str] = []

    def grow() -> None:
        for _ in range(group):
            names.append(f"f{len(names)}")
            alloc.register(names[-1], blocks_per_function)

    grow()
    events = []
    for name, o in objects.items():
        if o.get("tier") == "memory" and o.get("size") and o.get("freed_at") is not None:
            events += [(float(o["written_at"]), 1, name), (float(o["freed_at"]), 0, name)]
    events.sort()
    placed: dict[str, tuple[Any, float]] = {}
    spans: list[tuple[tuple[str, ...], float, float]] = []
    for t, kind, name in events:
        if kind:
            key = group_key(pol, predicted.get(name, 0.0), t, name)
            p = alloc.allocate(int(objects[name]["size"]), "run", key)
            while p is None:
                grow()
                p = alloc.allocate(int(objects[name]["size"]), "run", key)
            placed[name] = (p, t)
        elif name in placed:
            p, start = placed.pop(name)
            alloc.free(p)
            spans.append((tuple(e.function for e in p.extents), start, t))
    ends = [float(o["freed_at"]) for o in objects.values() if o.get("freed_reason") == "committed"]
    held, released = occupancy(spans, max(ends, default=0.0))
    return {"function_s": sum(held.values()), "functions_released": released, "functions_used": len(held)}


def function_bound(objects: Mapping[str, Mapping[str, Any]], function_bytes: int, block_size: int,
                   group: int) -> float:
    """The least function-seconds any placement could hold one run's trace in, even one
    that moved data between functions at will: at each moment the functions its live
    memory-tier bytes fill (``ceil(live / function_bytes)``), at least ``group`` while a
    coded object (over ``block_size``) lives. What grouping can save is at most
    ``1 - function_bound / nogroup``; a placement that never moves data saves less."""
    live = [(float(o["written_at"]), float(o["freed_at"]), int(o["size"])) for o in objects.values()
            if o.get("tier") == "memory" and o.get("size") and o.get("freed_at") is not None]
    edges = sorted({t for w, f, _ in live for t in (w, f)})
    total = 0.0
    for a, b in zip(edges, edges[1:]):
        here = [size for w, f, size in live if w <= a < f]
        if here:
            need = -(-sum(here) // function_bytes)
            total += (max(need, group) if max(here) > block_size else need) * (b - a)
    return total


@dataclass
class LookupPredictor:
    """The median measured lifetime per HDAG feature vector (seconds), from the runs it was
    shown (``learn``); ``fallback`` for a vector it has not seen."""

    fallback: Any
    table: dict[Any, list[float]] = field(default_factory=dict)
    learnt: int = 0

    def learn(self, run: Any) -> None:
        for name, (lifetime_s, _size) in run.measured.items():
            obj = run.graph.objects.get(name)
            if obj is not None and obj.features is not None:
                self.table.setdefault(obj.features, []).append(float(lifetime_s))
        self.learnt += 1

    def predict(self, obj: Any) -> float:
        seen = self.table.get(obj.features) if obj.features is not None else None
        return statistics.median(seen) if seen else float(self.fallback.predict(obj))

    def revision(self, category: str) -> str:
        """Changes with what it learnt, so the server predicts a workflow again."""
        return f"lookup:{self.learnt}:{len(self.table)}"


def grouping_stack(state_dir: str, function_memory_mb: int = FUNCTION_MEMORY_MB, data_mb: int = DATA_MB) -> Any:
    """An embedded stack (not started: use it as a context manager) whose storage functions
    have ``function_memory_mb`` of which ``data_mb`` hold blocks."""
    from sdk._config import Config
    from sdk.local._stack import Stack

    cfg = Config.load(state_dir=state_dir, env={}, function_memory_mb=function_memory_mb)
    return Stack(cfg, metadata_port=0, daemon_port=0,
                 daemon={"runtime_overhead_mb": function_memory_mb - data_mb, "max_functions": 96})


def grouping(predictors: Mapping[str, Any], names: Sequence[str], repeat: int,
             function_memory_mb: int = FUNCTION_MEMORY_MB, data_mb: int = DATA_MB) -> dict[str, Any]:
    """Run every example ``repeat`` times under each grouping policy with each predictor
    (``"lookup"``: a ``LookupPredictor`` trained on one run of each example first) on one
    embedded stack; means per run."""
    from funcsion_rpc.errors import InvalidRequest
    from sdk.local._collect import VARIANTS, Variant, collect_runs
    from storage_functions.pricing import LAMBDA_GB_SECOND_USD

    stack = grouping_stack(tempfile.mkdtemp(prefix="funcsion-bench-grouping-"), function_memory_mb, data_mb)
    sums: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    report_usd: dict[str, dict[str, dict[str, float]]] = {}
    live: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    bounds: dict[str, dict[str, float]] = {}
    block_size = stack.config.block_size
    blocks = data_mb * (1 << 20) // block_size
    ec = (stack.config.ec_data, stack.config.ec_parity, stack.config.ec_data + stack.config.ec_parity)
    with stack:
        state = stack.handler.state

        def one(n: str, policy: str) -> Any:
            (d,) = collect_runs(stack, stack.config, [Variant(n, dict(VARIANTS[n][0]))], policy=policy)
            if d["status"] != "succeeded":
                raise InvalidRequest(f"{n} under {policy} failed: {d.get('error')}")
            return d, state.runs[d["run_id"]]

        for which, predictor in predictors.items():
            if isinstance(predictor, LookupPredictor):
                state.predictor = predictor.fallback
                for n in names:                      # the training runs
                    predictor.learn(one(n, "funcstore")[1])
            state.predictor = predictor
            for _ in range(repeat):                  # interleaved: drift hits every policy alike
                for policy in GROUPING_POLICIES:
                    for n in names:
                        d, run = one(n, policy)
                        fig = run_functions(run, function_memory_mb)
                        acc = live.setdefault(which, {}).setdefault(n, {}).setdefault(policy, {})
                        for k, v in fig.items():
                            acc[k] = acc.get(k, 0.0) + v / repeat
                        for again in GROUPING_POLICIES:      # this trace under every policy
                            r = replay(d["objects"], run.predicted, again, blocks, block_size, ec[0], ec[1], ec[2])
                            gb_s = r["function_s"] * function_memory_mb / 1024.0
                            acc = sums.setdefault(which, {}).setdefault(n, {}).setdefault(again, {})
                            per_trace = 1.0 / (repeat * len(GROUPING_POLICIES))
                            for k, v in (("function_gb_s", gb_s), ("functions_released", r["functions_released"]),
                                         ("functions_used", r["functions_used"]),
                                         ("usd", gb_s * LAMBDA_GB_SECOND_USD)):
                                acc[k] = acc.get(k, 0.0) + v * per_trace
                        bound = function_bound(d["objects"], data_mb << 20, block_size, ec[2])
                        per_run = bounds.setdefault(which, {})
                        per_run[n] = per_run.get(n, 0.0) + bound * function_memory_mb / 1024.0 / (
                            repeat * len(GROUPING_POLICIES))
                        usd = report_usd.setdefault(which, {}).setdefault(n, {})
                        usd[policy] = usd.get(policy, 0.0) + float(d["cost"]["storage_usd"]) / repeat
    def rounded(f: Mapping[str, float]) -> dict[str, float]:
        return {"function_gb_s": round(f["function_gb_s"], 6), "functions_released": round(f["functions_released"], 2),
                "functions_used": round(f["functions_used"], 2), "usd": round(f["usd"], 9)}

    out: dict[str, Any] = {}
    for which, per in sums.items():
        out[which] = {n: {p: {**rounded(f), "live": {**rounded(live[which][n][p]),
                                                     "report_storage_usd": round(report_usd[which][n][p], 9)}}
                          for p, f in pols.items()} for n, pols in per.items()}
    return {"function_memory_mb": function_memory_mb, "function_data_mb": data_mb,
            "block_size": stack.config.block_size, "repeat": repeat,
            "by_predictor": out,
            "bound": {w: {n: round(v, 6) for n, v in per.items()} for w, per in bounds.items()}}


def saving(per_workflow: Mapping[str, Mapping[str, Mapping[str, float]]],
           workflow: str = SAVING_WORKFLOW) -> float | None:
    """``1 - min(funcstore, funcstore:expiry) / funcstore:nogroup`` of function GB-s."""
    pols = per_workflow.get(workflow)
    if not pols or not pols["funcstore:nogroup"]["function_gb_s"]:
        return None
    best = min(pols["funcstore"]["function_gb_s"], pols["funcstore:expiry"]["function_gb_s"])
    return round(1.0 - best / pols["funcstore:nogroup"]["function_gb_s"], 4)


def bench_keys(model: Any, names: Sequence[str], repeat: int) -> dict[str, Any]:
    """``bench lifetime``'s keys: ``grouping`` and ``grouping_saving`` with the served model's
    predictions, the same with the lookup's under ``grouping_by_predictor`` and
    ``grouping_saving_by_predictor``, and the setting (``grouping_setting``)."""
    from metadata_server import HeuristicPredictor

    g = grouping({"model": model, "lookup": LookupPredictor(HeuristicPredictor())}, names, repeat)
    by = g.pop("by_predictor")
    bound = g.pop("bound")
    return {"grouping": by["model"], "grouping_saving": saving(by["model"]), "grouping_by_predictor": by,
            "grouping_saving_by_predictor": {w: saving(per) for w, per in by.items()},
            "grouping_bound": bound,
            "grouping_bound_saving": {w: bound_saving(by[w], bound[w]) for w in by}, "grouping_setting": g}


def bound_saving(per_workflow: Mapping[str, Mapping[str, Mapping[str, float]]], bound: Mapping[str, float],
                 workflow: str = SAVING_WORKFLOW) -> float | None:
    """``1 - function_bound / funcstore:nogroup`` of function GB-s: the most any placement
    could save on ``workflow``'s traces (``function_bound``)."""
    pols = per_workflow.get(workflow)
    if not pols or workflow not in bound or not pols["funcstore:nogroup"]["function_gb_s"]:
        return None
    return round(1.0 - bound[workflow] / pols["funcstore:nogroup"]["function_gb_s"], 4)


def print_grouping(r: Mapping[str, Any]) -> None:
    g = r["grouping_setting"]
    print(f"grouping (storage functions of {g['function_memory_mb']} MB holding {g['function_data_mb']} MB, mean of "
          f"{g['repeat']} runs): function GB-s / functions released during the run / USD")
    for which, per in r["grouping_by_predictor"].items():
        for n, pols in per.items():
            row = ", ".join(f"{p} {f['function_gb_s']:.4f} / {f['functions_released']:.1f} / ${f['usd']:.3g}"
                            for p, f in pols.items())
            print(f"  {which:<9} {n:<11} {row}")
        s = saving(per)
        b = r.get("grouping_bound_saving", {}).get(which)
        print(f"  {which:<9} grouping_saving ({SAVING_WORKFLOW}): {'n/a' if s is None else f'{s:.3f}'}; "
              f"at most {'n/a' if b is None else f'{b:.3f}'} by any placement (grouping_bound_saving)")
