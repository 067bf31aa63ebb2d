"""``funcsion bench hdag``: how long parsing, HDAG building and lifetime-feature
extraction take on a wide synthetic workflow (default 2,000 functions: a
splitter, N mappers, R reducers over strided mapper outputs, a merger).

The features are the part FuncStore's Alg. 2 makes exponential without
memoization; this measures ours as built (``hdag._features._Longest``)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import wds

__all__ = ["HELP", "add_arguments", "run", "synthetic_wds"]

HELP = "time WDS parsing, HDAG building and feature extraction on a wide workflow"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--functions", type=int, default=2000, help="approximate number of functions (default 2000)")
    p.add_argument("--reducers", type=int, default=20, help="reducers in the synthetic workflow (default 20)")
    p.add_argument("--repeat", type=int, default=5, help="repetitions; the median is reported (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def synthetic_wds(mappers: int, reducers: int) -> str:
    """A MapReduce-shaped WDS with templates: mappers scatter, reducers aggregate."""
    doc: dict[str, Any] = {
        "app": "bench", "workflow_id": 1, "category": "bench",
        "params": {"mappers": mappers, "reducers": reducers},
        "spec": {
            "split": {"stage_id": 0, "functions": [
                {"start": True, "name": "splitter", "input": ["raw"], "output": ["chunk_{0..mappers}"],
                 "next": ["map_{0..mappers}"]}]},
            "map": {"stage_id": 1, "functions": [
                {"start": False, "replicas": "mappers", "name": "map_{i}", "input": ["chunk_{i}"],
                 "output": ["part_{i}_{0..reducers}"], "next": ["reduce_{0..reducers}"]}]},
            "reduce": {"stage_id": 2, "functions": [
                {"start": False, "replicas": "reducers", "name": "reduce_{i}",
                 "input": ["part_{0..mappers}_{i}"], "output": ["out_{i}"], "next": ["merge"]}]},
            "merge": {"stage_id": 3, "functions": [
                {"start": False, "name": "merge", "input": ["out_{0..reducers}"], "output": ["final"], "next": []}]},
        },
    }
    return json.dumps(doc)


def _median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run(args: argparse.Namespace) -> int:
    import hdag  # networkx: the `local` extra, not needed for --help
    from hdag._features import extract_features
    from hdag._graph import feature_inputs

    if args.functions < 4 or args.reducers < 1 or args.repeat < 1:
        args._parser.error("--functions must be >= 4, --reducers and --repeat >= 1")
    from sdk._config import Config

    mappers = max(1, args.functions - args.reducers - 2)
    text = synthetic_wds(mappers, args.reducers)
    limits = Config.load().wds_limits()  # --functions past wds_max_functions needs FUNCSION_WDS_MAX_FUNCTIONS
    workflow = wds.loads(text, source="<synthetic>", limits=limits)
    graph = hdag.build(workflow)
    kwargs = feature_inputs(workflow)
    result = {
        "functions": len(graph.functions),
        "objects": len(graph.objects),
        "flow_edges": sum(o.read_count for o in graph.objects.values()),
        "parse_ms": round(_median_ms(lambda: wds.loads(text, source="<synthetic>", limits=limits), args.repeat), 2),
        "build_ms": round(_median_ms(lambda: hdag.build(workflow), args.repeat), 2),
        "features_ms": round(_median_ms(lambda: extract_features(**kwargs), args.repeat), 2),
    }
    print(f"synthetic workflow: {result['functions']} functions, {result['objects']} objects, "
          f"{result['flow_edges']} (object, reader) pairs")
    print(f"  parse + validate + expand : {result['parse_ms']:8.2f} ms")
    print(f"  HDAG build (incl. features): {result['build_ms']:8.2f} ms")
    print(f"  lifetime features alone    : {result['features_ms']:8.2f} ms")
    if args.json:
        print(json.dumps(result))
    return 0
