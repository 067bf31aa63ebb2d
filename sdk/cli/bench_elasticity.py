"""``funcsion bench elasticity``: a replayed workload whose working set shifts (phases of
their own objects, up past one function group's memory and back: ``sdk.local._elastic``) on
an embedded stack of small storage functions. Each phase writes its objects, reads each a few
times and frees them. Measured: the storage functions holding data over time (sampled over
the daemon's STAT op: ``functions_peak``, ``functions_mean``), the memory hit ratio, and the
cost account of the replay (``storage_functions.cost``: storage functions, warm-ups, COS) per
hour at the replay's rate, beside a static warm pool (INFINICACHE-style) and always-on
ElastiCache memory for the same workload. ``--json`` prints one JSON object last.

Not here (they need the daemon's GC buckets and cache functions): sliding-window release and
``burst_get_p99_us``."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from typing import Any

from funcsion_rpc.errors import InvalidRequest

__all__ = ["HELP", "add_arguments", "run"]

HELP = "a shifting working set: functions holding data over time, hit ratio, cost per hour against a static pool"
MiB = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--shape", default="4,16,64,16,4",
                   help="objects in each phase's working set, comma-separated (default 4,16,64,16,4)")
    p.add_argument("--object-mb", type=float, default=4.0, help="size of each object in MiB (default 4)")
    p.add_argument("--reads", type=int, default=2, help="reads of each object in its phase (default 2)")
    p.add_argument("--function-mb", type=int, default=128,
                   help="storage-function memory in MB: small, so the working set outgrows one group (default 128)")
    p.add_argument("--gap-s", type=float, default=0.0,
                   help="idle seconds between phases, as in a sparser trace (default 0)")
    p.add_argument("--sample-ms", type=float, default=50.0, help="how often to sample the pool (default 50 ms)")


def _shape(text: str) -> list[int]:
    try:
        shape = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        shape = []
    if not shape or min(shape) < 1:
        raise InvalidRequest(f"--shape {text!r} must list phases of at least one object, e.g. 4,16,64,16,4")
    return shape


class _PoolSampler:
    """Samples, over the daemon's STAT op, how many storage functions hold chunks."""

    def __init__(self, endpoints: Any, every_s: float) -> None:
        from sdk._client import parse_addr
        from sdk._store_client import StoreClient

        self.store = StoreClient(parse_addr(endpoints.daemon), endpoints.store_token)
        self.every_s = every_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-pool-sampler")

    def sample(self) -> None:
        funcs = self.store.stats().get("functions", [])
        self.samples.append((time.time(), sum(1 for f in funcs if int(f.get("chunks", 0)) > 0)))

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def __enter__(self) -> _PoolSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.store.close()


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._cost import StoreSnapshot, run_cost
    from sdk.local._elastic import hit_ratio, shifting_phases, step_stats
    from sdk.local._run import _store_stats
    from sdk.local._stack import Stack

    if args.object_mb <= 0 or args.reads < 1 or args.sample_ms <= 0 or args.gap_s < 0:
        raise InvalidRequest("--object-mb and --sample-ms must be > 0, --reads >= 1, --gap-s >= 0")
    phases = shifting_phases(_shape(args.shape), int(args.object_mb * MiB), args.reads)
    cfg = Config.load(state_dir=tempfile.mkdtemp(prefix="funcsion-elastic-"), env={},
                      function_memory_mb=args.function_mb)
    wds = {"app": "bench-elasticity", "workflow_id": 1, "category": "bench",
           "spec": {"s": {"stage_id": 0, "functions": [
               {"start": True, "name": "replay", "input": ["trace"], "output": [], "next": []}]}}}
    objects: dict[str, dict[str, Any]] = {}
    reads = 0
    live = peak_live = 0
    rows = []
    with Stack(cfg, metadata_port=0, daemon_port=0,
               daemon={"function_memory_mb": args.function_mb, "max_functions": 48}) as stack, \
            stack.client() as driver:
        run = driver.start_run(driver.register_workflow(json.dumps(wds)), max_concurrency=1)
        stat_before = _store_stats(stack.endpoints) or {}
        snap_before = StoreSnapshot(stack, stat_before)
        t0 = time.time()
        with _PoolSampler(stack.endpoints, args.sample_ms / 1000.0) as sampler:
            for ph in phases:
                if ph.index and args.gap_s:
                    time.sleep(args.gap_s)  # the trace's idle time between phases: nothing to wait for
                p0 = time.time()
                for name in ph.names:
                    run.put(name, os.urandom(ph.object_bytes), codec="bytes", adhoc=True)
                    objects[name] = {"size": ph.object_bytes, "written_at": time.time() - t0, "freed_at": None}
                    live += ph.object_bytes
                peak_live = max(peak_live, live)
                sampler.sample()
                for _ in range(ph.reads):
                    for name in ph.names:
                        run.get(name)
                        reads += 1
                for name in ph.names:
                    run.delete(name)
                    objects[name]["freed_at"] = time.time() - t0
                    live -= ph.object_bytes
                rows.append({"phase": ph.index, "objects": len(ph.names), "mib": ph.bytes / MiB,
                             "seconds": time.time() - p0})
        t1 = time.time()
        stat_after = _store_stats(stack.endpoints) or {}
        cost = run_cost(t0=t0, t1=t1, billing={}, before=snap_before, after=StoreSnapshot(stack, stat_after),
                        platform=stack.platform, objects=objects, peak_live_bytes=peak_live,
                        function_memory_mb=args.function_mb)
        run.end_run("succeeded")
        run.close()
    peak, mean = step_stats(sampler.samples, t1)
    doc = {"phases": rows, "object_mib": args.object_mb, "function_mb": args.function_mb, "gap_s": args.gap_s,
           "reads": reads,
           "wall_s": round(t1 - t0, 3), "hit_ratio": round(hit_ratio(stat_before, stat_after, reads), 4),
           "functions_peak": peak, "functions_mean": round(mean, 3),
           "cost_usd_per_hour": cost["per_hour"]["storage_usd"],
           "static_cost_usd_per_hour": cost["static_pool"]["usd_per_hour"],
           "always_on_cost_usd_per_hour": cost["always_on"]["usd_per_hour"],
           "overhead": cost["overhead"], "cost": cost}
    _print(doc)
    if args.json:
        print(json.dumps(doc))
    return 0


def _print(doc: dict[str, Any]) -> None:
    from storage_functions.cost import format_cost

    print(f"{'phase':>5} {'objects':>7} {'MiB':>7} {'s':>7}")
    for r in doc["phases"]:
        print(f"{r['phase']:>5} {r['objects']:>7} {r['mib']:>7.0f} {r['seconds']:>7.2f}")
    print(f"{doc['reads']} reads in {doc['wall_s']:.1f} s, hit ratio {doc['hit_ratio']:.1%}; storage functions "
          f"holding data: peak {doc['functions_peak']}, mean {doc['functions_mean']:.1f} "
          f"({doc['function_mb']} MB each)")
    print(f"storage per hour at this rate: funcsion ${doc['cost_usd_per_hour']:.4f}, static warm pool "
          f"${doc['static_cost_usd_per_hour']:.4f}, always-on ${doc['always_on_cost_usd_per_hour']:.4f}")
    print("\n".join(format_cost(doc["cost"])))
