"""``funcsion bench elasticity``: a replayed workload whose working set shifts (phases of
their own objects, up past one function group's memory and back: ``sdk.local._elastic``) on
an embedded stack of small storage functions. Each phase writes its objects, reads each a few
times and frees them. Measured: the storage functions holding data over time (sampled over
the daemon's STAT op: ``functions_peak``, ``functions_mean``), the memory hit ratio, and the
cost account of the replay (``storage_functions.cost``: storage functions, warm-ups, COS) per
hour at the replay's rate, beside a static warm pool (INFINICACHE-style) and always-on
ElastiCache memory for the same workload. The phases are paced so that the replay's GETs
average the rate of the trace SION's cost comparison replays (``--gets-per-hour``, 3,654;
0 replays them back to back, and then always-on memory is the cheaper: Lambda memory costs
more per GB-hour while it serves, and back to back it serves all the time). The daemon runs SION's sliding-window GC
(``--gc-interval-s``; rounds, degraded and released functions are reported).

Then bursts: a broadcast (an object the workflow declares with ``--burst`` readers, so its
PUT carries that read count) is written and read by ``--burst`` concurrent clients at once,
``--burst-rounds`` times with cache functions and without, interleaved, a new object each
time: ``burst_get_p99_us`` (with; nearest-rank p99 of every GET of every round) and
``burst_get_p99_us_no_cache``; ``burst_first_p99_us`` is the first burst with cache functions,
``burst_later_p99_us`` and ``burst_later_p99_us_no_cache`` the rounds after the first of each
mode. With cache functions the daemon loads the broadcast's copies into them when it reaches
COS (``cache_prefetch_readers``); ``--no-prefetch`` leaves them to open as the burst queues
(SION's cache functions alone). Function bandwidth is modelled (``--function-mbps``,
default 50: INFINICACHE's measured figure for a 128 MB Lambda) for downloads and GET replies;
without it a 2-core machine cannot show what spreading a burst over functions buys.
``--json`` prints one JSON object last."""

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
#: the average GET rate of the trace SION's cost comparison replays (the first 50 hours of the
#: IBM container registry's Dallas datacenter, SION Sec. 6.1.1)
IBM_GETS_PER_HOUR = 3654.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--shape", default="4,16,64,16,4",
                   help="objects in each phase's working set, comma-separated (default 4,16,64,16,4)")
    p.add_argument("--object-mb", type=float, default=4.0, help="size of each object in MiB (default 4)")
    p.add_argument("--reads", type=int, default=2, help="reads of each object in its phase (default 2)")
    p.add_argument("--function-mb", type=int, default=128,
                   help="storage-function memory in MB: small, so the working set outgrows one group (default 128)")
    p.add_argument("--gets-per-hour", type=float, default=IBM_GETS_PER_HOUR,
                   help="pace the phases so that the replay's GETs average this rate (default 3654: the IBM "
                        "container registry trace SION replays, Sec. 6.1.1; 0 = back to back)")
    p.add_argument("--gap-s", type=float, default=0.0,
                   help="idle seconds between phases at least (default 0)")
    p.add_argument("--sample-ms", type=float, default=50.0, help="how often to sample the pool (default 50 ms)")
    p.add_argument("--function-mbps", type=float, default=50.0,
                   help="modelled network bandwidth of one storage function, MB/s (default 50; 0 = unlimited)")
    p.add_argument("--gc-interval-s", type=float, default=1.0,
                   help="GC round interval of the daemon's sliding window (default 1 s for this short replay)")
    p.add_argument("--gc-active", type=int, default=2, help="GC intervals a bucket stays active (default 2)")
    p.add_argument("--gc-degraded", type=int, default=4, help="GC intervals it then stays degraded (default 4)")
    p.add_argument("--burst", type=int, default=64, help="concurrent GETs of one object in a burst (default 64; 0 = none)")
    p.add_argument("--burst-rounds", type=int, default=3, help="bursts with and without cache functions (default 3)")
    p.add_argument("--cache-copies", type=int, default=4, help="cache functions per chunk at most (default 4)")
    p.add_argument("--cache-depth", type=int, default=2,
                   help="requests in flight at which a function's queue is full (default 2)")
    p.add_argument("--no-prefetch", action="store_true",
                   help="do not load a broadcast's copies into cache functions before its burst (they open as "
                        "the burst queues)")


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

        self.store = StoreClient(parse_addr(endpoints.daemon), endpoints.store_token, tls_ca=endpoints.tls_ca)
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
    from sdk.local._elastic import served_reads, shifting_phases, step_stats
    from sdk.local._run import _store_stats
    from sdk.local._stack import Stack

    if args.object_mb <= 0 or args.reads < 1 or args.sample_ms <= 0 or args.gap_s < 0 or args.gets_per_hour < 0:
        raise InvalidRequest("--object-mb and --sample-ms must be > 0, --reads >= 1, --gap-s and --gets-per-hour >= 0")
    if args.function_mbps < 0 or args.gc_interval_s < 0 or args.gc_active < 1 or args.gc_degraded < 0 \
            or args.burst < 0 or args.burst_rounds < 1 or args.cache_copies < 1 or args.cache_depth < 1:
        raise InvalidRequest("--function-mbps and --gc-interval-s must be >= 0, --gc-active >= 1, --gc-degraded "
                             ">= 0, --burst >= 0, --burst-rounds, --cache-copies and --cache-depth >= 1")
    phases = shifting_phases(_shape(args.shape), int(args.object_mb * MiB), args.reads)
    cfg = Config.load(state_dir=tempfile.mkdtemp(prefix="funcsion-elastic-"), env={},
                      function_memory_mb=args.function_mb)
    wds = _workflow(args)
    objects: dict[str, dict[str, Any]] = {}
    reads = 0
    live = peak_live = 0
    rows = []
    daemon = {"function_memory_mb": args.function_mb, "max_functions": 48,
              "function_bandwidth_mbps": args.function_mbps, "function_send_mbps": args.function_mbps,
              "gc_interval_s": args.gc_interval_s, "gc_active": args.gc_active, "gc_degraded": args.gc_degraded,
              "cache_copies": args.cache_copies, "cache_queue_depth": args.cache_depth}
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon=daemon) as stack, \
            stack.client() as driver:
        run = driver.start_run(driver.register_workflow(json.dumps(wds)), max_concurrency=1)
        # the stack's own start warms its first group (cold starts): let that end before the replay's
        # window opens, so that the window holds the replay's invocations only (a static pool is warm
        # before its workload too)
        _settle(stack.platform, 60.0)
        stat_before = _store_stats(stack.endpoints) or {}
        snap_before = StoreSnapshot(stack, stat_before)
        t0 = time.time()
        with _PoolSampler(stack.endpoints, args.sample_ms / 1000.0) as sampler:
            for ph in phases:
                if ph.index:
                    _pace(t0, reads, args)  # the trace's idle time between phases: nothing to wait for
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
            _pace(t0, reads, args, gap=False)  # the trace's time after the last phase's GETs
        t1 = time.time()
        # the replay's invocations seal their insertion logs as they return: wait for that, so
        # that their COS PUTs are in their records (their billed time still counts up to t1)
        settle_s = _settle(stack.platform, 30.0)
        stat_after = _store_stats(stack.endpoints) or {}
        cost = run_cost(t0=t0, t1=t1, billing={}, before=snap_before, after=StoreSnapshot(stack, stat_after),
                        platform=stack.platform, objects=objects, peak_live_bytes=peak_live,
                        function_memory_mb=args.function_mb)
        burst = _bursts(stack, run, args) if args.burst else None
        gc = dict(stack.store.daemon.stats().get("gc") or {})
        counters = dict(stack.store.daemon.counters)
        run.end_run("succeeded")
        run.close()
    peak, mean = step_stats(sampler.samples, t1)
    doc = {"phases": rows, "object_mib": args.object_mb, "function_mb": args.function_mb, "gap_s": args.gap_s,
           "gets_per_hour": args.gets_per_hour,
           "reads": reads,
           "wall_s": round(t1 - t0, 3), "settle_s": round(settle_s, 3),
           # each GET counted once where it was served: function memory and cache functions are
           # hits (hit_ratio), the daemon's persistent buffer is not (buffer_hit_ratio beside it)
           **served_reads(stat_before, stat_after, reads),
           "functions_peak": peak, "functions_mean": round(mean, 3),
           "cost_usd_per_hour": cost["per_hour"]["storage_usd"],
           "static_cost_usd_per_hour": cost["static_pool"]["usd_per_hour"],
           "always_on_cost_usd_per_hour": cost["always_on"]["usd_per_hour"],
           "overhead": cost["overhead"], "function_mbps": args.function_mbps,
           **_cos_per_object(cost, len(objects)),
           "gc": {"interval_s": args.gc_interval_s, "active": args.gc_active, "degraded": args.gc_degraded,
                  "rounds": gc.get("rounds", 0), "released_functions": counters.get("gc_released_functions", 0),
                  "emptied_functions": counters.get("gc_emptied_functions", 0),
                  "compacted_chunks": counters.get("compacted_chunks", 0)},
           **(burst or {}), "cost": cost}
    _print(doc)
    if args.json:
        print(json.dumps(doc))
    return 0


def _settle(platform: Any, timeout_s: float) -> float:
    """Wait until no storage-function instance is starting and no invocation is running (each
    returns ``idle_s`` after its last request, sealing its log), at most ``timeout_s``; the
    seconds it took."""
    t = time.monotonic()
    while any(i.state in ("starting", "busy") for i in platform.instances()) and time.monotonic() - t < timeout_s:
        time.sleep(0.05)  # polling the platform's instance table: there is no event to wait on
    return time.monotonic() - t


def _cos_per_object(cost: dict[str, Any], objects: int) -> dict[str, Any]:
    """COS requests of the replay per object written, all of them and the storage functions'
    own (their insertion-log seals): what the workload's data needs beside what the log adds."""
    cr = cost["lines"]["cos_requests"]
    fn = int(cr.get("function_puts", 0)) + int(cr.get("function_gets", 0))
    n = max(1, objects)
    return {"cos_requests": int(cr["puts"]) + int(cr["gets"]), "cos_requests_functions": fn,
            "cos_requests_per_object": round((int(cr["puts"]) + int(cr["gets"])) / n, 3),
            "cos_requests_functions_per_object": round(fn / n, 3)}


def _pace(t0: float, reads: int, args: argparse.Namespace, *, gap: bool = True) -> None:
    """Wait until the replay's ``reads`` GETs so far average ``--gets-per-hour`` since ``t0``
    (and at least ``--gap-s`` when ``gap``)."""
    wait = args.gap_s if gap else 0.0
    if args.gets_per_hour:
        wait = max(wait, t0 + reads * 3600.0 / args.gets_per_hour - time.time())
    if wait > 0:
        time.sleep(wait)


def _workflow(args: argparse.Namespace) -> dict[str, Any]:
    """The replay's workflow: the replay itself (its objects are ad hoc), and the bursts'
    broadcasts, inputs that ``--burst`` reader tasks declare (their read count is ``--burst``).
    The readers never run: the bench's clients read in their place."""
    spec: dict[str, Any] = {"s": {"stage_id": 0, "functions": [
        {"start": True, "name": "replay", "input": ["trace"], "output": [], "next": []}]}}
    params: dict[str, int] = {}
    if args.burst:
        # two broadcasts a round, and as many spares for one the GC window sent to COS (_broadcast)
        params = {"readers": args.burst, "broadcasts": 4 * args.burst_rounds}
        spec["r"] = {"stage_id": 1, "functions": [
            {"start": True, "replicas": "readers", "name": "reader_{i:03d}", "input": ["hot_{0..broadcasts:02d}"],
             "output": [], "next": []}]}
    return {"app": "bench-elasticity", "workflow_id": 1, "category": "bench", "params": params, "spec": spec}


def _bursts(stack: Any, run: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``--burst-rounds`` rounds of one burst without cache functions then one with, each of
    a broadcast written just before it; the latencies of every GET, pooled per mode, and
    where each mode's GETs were served (``burst_served``: function memory, cache functions,
    the daemon's buffer, COS)."""
    from sdk.local._elastic import SERVED, p99

    from dataclasses import replace

    d = stack.store.daemon
    # the bursts' invocations stay up 30 s idle (read at each invocation), so that back-to-back
    # bursts find the functions invoked, as warm Lambdas answer within milliseconds; without it
    # 50 local processes reconnecting at once on 2 cores is what a burst measures. 30 s outlasts
    # the bursts: the prewarmed invocations that no burst touched return all at once when their
    # idle time is up, and ~30 processes returning on 2 cores slowed the burst they met 1.5x
    d.config = replace(d.config, idle_s=30.0, cache_prefetch_readers=0 if args.no_prefetch else
                       d.config.cache_prefetch_readers)
    # the pool's functions have instances (as SION's warmed pool does): a cache function's first
    # GET pays a warm invocation, not a process start of the local platform
    d.wait_warm(d.prewarm(d.config.max_functions), 60)
    lat: dict[str, list[float]] = {"no_cache": [], "cache": []}
    later: dict[str, list[float]] = {"no_cache": [], "cache": []}  # the rounds after the first
    rounds: dict[str, list[int]] = {"no_cache": [], "cache": []}  # each round's p99 (us)
    served: dict[str, dict[str, int]] = {m: dict.fromkeys(SERVED, 0) for m in ("no_cache", "cache")}
    first = 0.0
    clients = _Clients(stack.endpoints, args.burst, min(args.burst, 8))
    hot = iter(range(4 * args.burst_rounds))
    try:
        for r in range(args.burst_rounds):
            for mode in ("no_cache", "cache"):
                d.cache_functions.on = mode == "cache"
                name = _broadcast(stack, run, hot, int(args.object_mb * MiB))  # its readers start
                d.wait_uploads(60)  # a cache function loads from COS
                before = dict(d.counters)
                got = clients.burst(f"{run.run_id}/{name}")
                after = dict(d.counters)
                for w in SERVED:             # where the burst's GETs were served, each once
                    key = f"gets_from_{w}"
                    served[mode][w] += int(after.get(key, 0)) - int(before.get(key, 0))
                run.delete(name)  # its readers are done (their commits would free it): its copies go too
                lat[mode] += got
                rounds[mode].append(round(p99(got) * 1e6))
                if r:
                    later[mode] += got
                elif mode == "cache":
                    first = p99(got)
    finally:
        clients.close()
        d.cache_functions.on = True
    return {"burst": args.burst, "burst_rounds": args.burst_rounds, "cache_copies": args.cache_copies,
            "cache_depth": args.cache_depth, "prefetch": not args.no_prefetch,
            "burst_get_p99_us": round(p99(lat["cache"]) * 1e6), "burst_get_p99_us_no_cache":
            round(p99(lat["no_cache"]) * 1e6), "burst_first_p99_us": round(first * 1e6),
            "burst_later_p99_us": round(p99(later["cache"]) * 1e6),
            "burst_later_p99_us_no_cache": round(p99(later["no_cache"]) * 1e6), "burst_round_p99_us": rounds,
            "burst_served": served,
            "burst_get_p50_us": round(sorted(lat["cache"])[len(lat["cache"]) // 2] * 1e6),
            "burst_get_p50_us_no_cache": round(sorted(lat["no_cache"])[len(lat["no_cache"]) // 2] * 1e6),
            "cache": {**d.cache_functions.router.stats(), "cache_loads": d.counters.get("cache_loads", 0),
                      "cache_prefetches": d.counters.get("cache_prefetches", 0)}}


def _broadcast(stack: Any, run: Any, hot: Any, size: int, timeout_s: float = 60.0) -> str:
    """Write the next broadcast where the burst reads it, in function memory: the metadata
    server places new data only outside the GC window's degraded buckets, so with the small
    pool all degraded (the window runs at ``--gc-interval-s``) it goes to the COS tier, which
    the burst's raw daemon GETs do not read; then it is deleted, and once the window has
    released those functions a fresh broadcast is written. Its name."""
    d = stack.store.daemon
    deadline = time.monotonic() + timeout_s
    while True:
        name = f"hot_{next(hot):02d}"
        run.put(name, os.urandom(size), codec="bytes")
        with stack.handler.lock:
            tier = stack.handler.state.runs[run.run_id].objects[name].placement.tier
        if tier == "memory":
            return name
        run.delete(name)
        while "degraded" in (d.function_buckets() or {}).values():
            if time.monotonic() > deadline:
                raise InvalidRequest(f"broadcast {name} went to the COS tier: every storage function stayed in a "
                                     f"degraded GC bucket for {timeout_s:g} s; give the pool more functions or a "
                                     "longer --gc-interval-s")
            time.sleep(0.05)


class _Clients:
    """The burst's clients: ``procs`` processes of ``n / procs`` threads, each thread with its
    own connection (as 64 tasks would have), so that their receiving and decoding is not
    serialised behind this process's interpreter lock with the daemon's. A burst starts at
    one wall-clock moment in every process; each GET is timed from it."""

    def __init__(self, endpoints: Any, n: int, procs: int) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        per = [n // procs + (1 if k < n % procs else 0) for k in range(procs)]
        self.pipes = []
        self.procs = []
        for k in [k for k in per if k]:
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_burst_worker, args=(endpoints.daemon, endpoints.store_token, k, theirs),
                            daemon=True, name="bench-burst")
            p.start()
            self.pipes.append(mine)
            self.procs.append(p)
        for c in self.pipes:
            if c.recv() != "ready":
                raise InvalidRequest("a burst client process did not start")

    def burst(self, key: str, lead_s: float = 0.3) -> list[float]:
        at = time.time() + lead_s
        for c in self.pipes:
            c.send((at, key))
        out: list[float] = []
        for c in self.pipes:
            got = c.recv()
            if isinstance(got, str):
                raise InvalidRequest(f"the burst failed: {got}")
            out += got
        return out

    def close(self) -> None:
        for c in self.pipes:
            c.send(None)
        for p in self.procs:
            p.join(10)


def _burst_worker(daemon: str, token: str, n: int, conn: Any) -> None:
    """One client process: ``n`` connections; per message (a start time and a key) one GET each."""
    from sdk._client import parse_addr
    from sdk._store_client import StoreClient

    clients = [StoreClient(parse_addr(daemon), token) for _ in range(n)]
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        at, key = msg
        out: list[float] = []
        errors: list[str] = []

        def one(c: Any, at: float = at, key: str = key, out: list[float] = out, errors: list[str] = errors) -> None:
            time.sleep(max(0.0, at - time.time()))
            try:
                c.get(key)
                out.append(time.time() - at)
            except BaseException as exc:  # noqa: BLE001 - sent back as text
                errors.append(repr(exc))

        threads = [threading.Thread(target=one, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        conn.send(errors[0] if errors else out)
    for c in clients:
        c.close()


def _print(doc: dict[str, Any]) -> None:
    from storage_functions.cost import format_cost

    print(f"{'phase':>5} {'objects':>7} {'MiB':>7} {'s':>7}")
    for r in doc["phases"]:
        print(f"{r['phase']:>5} {r['objects']:>7} {r['mib']:>7.0f} {r['seconds']:>7.2f}")
    print(f"{doc['reads']} reads in {doc['wall_s']:.1f} s, hit ratio {doc['hit_ratio']:.1%} (from function memory "
          f"{doc['function_read_ratio']:.1%}, from cache functions {doc['cache_read_ratio']:.1%}); not hits: from "
          f"the daemon's buffer {doc['buffer_hit_ratio']:.1%}, from COS {doc['cos_read_ratio']:.1%}; storage functions "
          f"holding data: peak {doc['functions_peak']}, mean {doc['functions_mean']:.1f} "
          f"({doc['function_mb']} MB each)")
    print(f"storage per hour at this rate: funcsion ${doc['cost_usd_per_hour']:.4f}, static warm pool "
          f"${doc['static_cost_usd_per_hour']:.4f}, always-on ${doc['always_on_cost_usd_per_hour']:.4f}")
    print(f"COS requests: {doc['cos_requests']} for {sum(r['objects'] for r in doc['phases'])} objects "
          f"({doc['cos_requests_per_object']} per object), {doc['cos_requests_functions']} of them the storage "
          f"functions' insertion-log seals ({doc['cos_requests_functions_per_object']} per object)")
    g = doc["gc"]
    print(f"GC window: {g['rounds']} rounds of {g['interval_s']} s (M={g['active']}, N={g['degraded']}); "
          f"{g['released_functions']} functions released ({g['emptied_functions']} emptied by frees), "
          f"{g['compacted_chunks']} chunks compacted")
    if "burst" in doc:
        print(f"burst of {doc['burst']} GETs x {doc['burst_rounds']} (functions at {doc['function_mbps']} MB/s): "
              f"p99 {doc['burst_get_p99_us'] / 1000:.1f} ms with cache functions (first burst "
              f"{doc['burst_first_p99_us'] / 1000:.1f} ms), {doc['burst_get_p99_us_no_cache'] / 1000:.1f} ms "
              f"without; {doc['cache']['cache_copies']} copies")
        if doc["burst_rounds"] > 1:
            print(f"  rounds after the first: p99 "
                  f"{doc['burst_later_p99_us'] / 1000:.1f} ms with, {doc['burst_later_p99_us_no_cache'] / 1000:.1f} ms "
                  f"without")
    print("\n".join(format_cost(doc["cost"])))
