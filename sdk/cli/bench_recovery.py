"""``funcsion bench recovery``: how fast a storage function gets its memory back after its
instance is reclaimed (SION Sec. 5.5, 6.4), and what GETs see meanwhile. On the local platform
with the per-instance bandwidth model on (``--bandwidth-mbps``, printed), COS as a local
directory and as moto's S3 server. Prints a table; ``--json`` prints one JSON object as the
last line (docs/benchmarks/recovery.md)::

    {"bandwidth_mbps": 50, "size_mib": 1024, "chunk_mib": 4,
     "cos": {"local": {"recover_1gib_s", "recover_1gib_parallel_s", "group_size",
                       "parallel_s": {"4": s, "8": s, "16": s}, "speedup",
                       "errors", "p99_before_us", "p99_during_us", "gets", "kills"},
             "s3": {...}}}

``recover_1gib_s``: from the kill until the storage function alone holds every chunk again
(it downloads them from COS itself). ``recover_1gib_parallel_s``: the best group size's time
from the kill until every lost chunk is servable again (from a recovery function's copy or the
storage function); the storage function keeps recovering behind it. The latency part GETs
objects coded over a group of functions for ``--latency-s`` seconds, then as long again while
an instance holding chunks is killed every ``--kill-every-s`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from typing import Any

from ._moto import MotoS3

HELP = "measure recovery of a storage function (alone and by recovery groups) and GET latency under kills"

MiB = 1 << 20

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mib", type=int, default=1024, help="bytes the storage function holds (default 1024)")
    p.add_argument("--chunk-mib", type=int, default=4, help="size of each chunk it holds (default 4)")
    p.add_argument("--groups", default="4,8,16", help="recovery group sizes to try (default 4,8,16)")
    p.add_argument("--bandwidth-mbps", type=float, default=50.0,
                   help="modelled network bandwidth of one function instance (default 50, INFINICACHE's low end)")
    p.add_argument("--cos", default="local,s3", help="COS backends: local, s3 (moto's server) (default both)")
    p.add_argument("--latency-s", type=float, default=10.0, help="seconds of GETs before, and during, kills")
    p.add_argument("--kill-every-s", type=float, default=2.0, help="kill an instance this often (default 2)")
    p.add_argument("--get-interval-ms", type=float, default=20.0,
                   help="start a GET this often, as SION's latency test does (default 20; 0 = back to back, "
                        "which on a small machine measures the CPU the GETs and the recovery share)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _reattach(daemon: Any, platform: Any, name: str) -> None:
    """Kill ``name``'s instance and make a new one answer (a STAT invokes it): the loss is found."""
    lost = daemon.counters["lost_functions"]
    platform.kill(name)
    deadline = time.monotonic() + 60
    while daemon.counters["lost_functions"] == lost and time.monotonic() < deadline:
        try:
            daemon.function_memory(name, timeout_s=5)
        except Exception:  # noqa: BLE001 - the old connection is going away; ask the next instance
            pass
    if daemon.counters["lost_functions"] == lost:
        raise RuntimeError(f"no new instance of {name} answered within 60 s")


def _recovery(cos_url: str, args: argparse.Namespace, groups: list[int]) -> dict[str, Any]:
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient
    from storage_functions.daemon import LocalStore

    chunk = args.chunk_mib * MiB
    n = max(1, args.size_mib // args.chunk_mib)
    biggest = max(groups) if groups else 1
    # the victim holds size_mib under its hardcap; a member of the smallest group caches its share
    # in the rest (SION keeps part of each function's memory for recovery)
    share = int(n * 1.3 / max(1, min(groups) if groups else 1) + 1) * chunk  # hashing is not even
    cap = max(int(n * chunk / 0.8), int(share / 0.2)) + 2 * chunk
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as root, \
            LocalStore(root, cos_url=cos_url, function_memory_mb=max(256, cap // MiB + 64), max_functions=biggest + 2,
                       group_size=1, idle_s=120.0, recovery_keep_s=0.5, parallel_recovery_threshold=0,
                       parallel_recovery_min_mb=0,
                       recovery_group_size=0, function_bandwidth_mbps=args.bandwidth_mbps,
                       max_object_bytes=2 * chunk, invoke_timeout_s=60.0) as st, \
            StoreClient(st.address, st.token, codec=Codec(threshold=2 * chunk)) as c:
        d = st.daemon
        data = os.urandom(chunk - 64)
        blocks = -(-chunk // d.config.block_size)
        for i in range(n):  # one uncoded slice each, all on sion-0: n chunks of chunk_mib
            c.put(f"fill-{i}", data, alloc=[("sion-0", i * blocks, 0, blocks * d.config.block_size)])
        if not d.wait_uploads(1800):
            raise RuntimeError("the fill did not reach COS within 30 minutes")
        d.prewarm(biggest + 2)  # recovery functions come from the warm pool (SION Sec. 5.5.2)
        d.wait_warm(biggest + 2, 120)
        out: dict[str, Any] = {"chunks": n}

        def trial(group: int) -> float:
            d.config.recovery_group_size = group
            t0 = time.monotonic()
            _reattach(d, st.platform, "sion-0")
            if group:
                if not d.recovery.wait_servable(0, 600):
                    raise RuntimeError(f"group of {group}: not servable within 600 s")
            elif not d.recovery.wait_idle(1800):
                raise RuntimeError("recovery alone did not finish within 1800 s")
            took = time.monotonic() - t0
            d.recovery.wait_idle(1800)
            deadline = time.monotonic() + 60
            while d.recovery.stats()["routes"] and time.monotonic() < deadline:  # copies released
                time.sleep(0.05)
            return took

        before = d.counters.get("chunks_recovered", 0)
        out["recover_1gib_s"] = round(trial(0), 3)
        if d.counters.get("chunks_recovered", 0) - before != n:
            raise RuntimeError(f"recovery alone restored {d.counters.get('chunks_recovered', 0) - before} of {n}")
        par = {g: trial(g) for g in groups}
        if par:
            best = min(par, key=lambda g: par[g])
            out.update(recover_1gib_parallel_s=round(par[best], 3), group_size=best,
                       parallel_s={str(g): round(t, 3) for g, t in par.items()},
                       speedup=round(out["recover_1gib_s"] / max(par[best], 1e-9), 2))
        if bytes(c.get("fill-0")) != data:
            raise RuntimeError("fill-0 reads back wrong after recovery")
        return out


def _latency(cos_url: str, args: argparse.Namespace, *, group: bool = False) -> dict[str, Any]:
    from sdk._store_client import StoreClient
    from storage_functions.daemon import DaemonConfig, LocalStore

    objs = 96
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as root, \
            LocalStore(root, cos_url=cos_url, function_memory_mb=512, max_functions=28, group_size=12,
                       idle_s=120.0, function_bandwidth_mbps=args.bandwidth_mbps, parallel_recovery_threshold=8,
                       parallel_recovery_min_mb=0 if group else DaemonConfig.parallel_recovery_min_mb,
                       recovery_group_size=4, recovery_keep_s=5.0) as st, \
            StoreClient(st.address, st.token) as c:
        d = st.daemon
        bs = d.config.block_size
        values = {}
        for i in range(objs):  # 10+2-coded 2 MiB objects, chunk i of each on function i, block by object
            values[f"o{i}"] = os.urandom(2 * MiB)
            c.put(f"o{i}", values[f"o{i}"], alloc=[(f"sion-{k}", i, 0, bs) for k in range(12)])
        d.wait_uploads(600)
        d.prewarm(d.config.max_functions)  # the pool is warm (SION's active GC-bucket): groups need no cold start
        d.wait_warm(d.config.max_functions, 120)
        for k in list(values)[:12]:
            c.get(k)  # warm connections
        rng = random.Random(7)
        lat: dict[str, list[float]] = {"before": [], "during": []}
        errors = [0]
        phase = ["before"]
        stop = threading.Event()

        interval = max(0.0, args.get_interval_ms) / 1000.0

        def reader() -> None:
            keys = list(values)
            due = time.monotonic()
            while not stop.is_set():
                due += interval
                k = rng.choice(keys)
                t = time.perf_counter()
                try:
                    ok = bytes(c.get(k)) == values[k]
                except Exception:  # noqa: BLE001 - any failure a handler would see counts
                    ok = False
                lat[phase[0]].append((time.perf_counter() - t) * 1e6)
                if not ok:
                    errors[0] += 1
                if interval and stop.wait(max(0.0, due - time.monotonic())):
                    return
                due = max(due, time.monotonic() - interval)  # an overrun is not made up with a burst

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        time.sleep(args.latency_s)  # the measurement window itself
        phase[0] = "during"
        kills = 0
        end = time.monotonic() + args.latency_s
        while time.monotonic() < end:
            victim = f"sion-{rng.randrange(12)}"
            threading.Thread(target=_reattach, args=(d, st.platform, victim), daemon=True).start()
            kills += 1
            stop.wait(args.kill_every_s)
        stop.set()
        t.join(60)
        d.recovery.wait_idle(300)
        return {"errors": errors[0], "p99_before_us": round(_pct(lat["before"], 0.99), 1),
                "p99_during_us": round(_pct(lat["during"], 0.99), 1),
                "p50_before_us": round(_pct(lat["before"], 0.5), 1),
                "p50_during_us": round(_pct(lat["during"], 0.5), 1),
                "gets": len(lat["before"]) + len(lat["during"]), "kills": kills,
                "chunks_recovered": d.counters.get("chunks_recovered", 0),
                "parallel_recoveries": d.counters.get("parallel_recoveries", 0),
                "cos_fallbacks": d.counters.get("cos_fallbacks", 0), "rerouted_gets": d.counters.get("rerouted_gets", 0),
                "missing_chunks": d.counters.get("missing_chunks", 0),
                "slowest_during_ms": [round(x / 1000, 1) for x in sorted(lat["during"])[-8:]]}


def run(args: argparse.Namespace) -> int:
    groups = [int(g) for g in str(args.groups).split(",") if g.strip()]
    backends = [b.strip() for b in str(args.cos).split(",") if b.strip()]
    bad = [b for b in backends if b not in ("local", "s3")] + [str(g) for g in groups if g < 1]
    if bad or args.size_mib < 1 or args.chunk_mib < 1 or args.size_mib < args.chunk_mib:
        sys.stderr.write(f"funcsion bench recovery: bad --cos/--groups/--size-mib/--chunk-mib ({', '.join(bad) or 'sizes'}); "
                         "e.g. --cos local,s3 --groups 4,8,16 --size-mib 1024 --chunk-mib 4\n")
        return 2
    doc: dict[str, Any] = {"bandwidth_mbps": args.bandwidth_mbps, "size_mib": args.size_mib,
                           "chunk_mib": args.chunk_mib, "cos": {}}
    moto = MotoS3() if "s3" in backends else None
    try:
        for b in backends:
            with tempfile.TemporaryDirectory(prefix="bench-cos-") as cdir:
                url = (lambda: f"file://{cdir}") if b == "local" else moto.url  # type: ignore[union-attr]
                row = _recovery(url(), args, groups)
                row.update(_latency(url(), args))
                # the same with a recovery group forced for every loss (SION Sec. 5.5.2 as in its
                # latency test): the copies double the COS reads of a loss this small
                g = _latency(url(), args, group=True)
                row.update({f"{k}_group": g[k] for k in ("errors", "p99_before_us", "p99_during_us",
                                                          "parallel_recoveries", "rerouted_gets")})
                doc["cos"][b] = row
                _print_row(b, row)
    finally:
        if moto is not None:
            moto.stop()
    if args.json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


def _print_row(backend: str, r: dict[str, Any]) -> None:
    sys.stdout.write(
        f"{backend:>5}: recover alone {r['recover_1gib_s']:.2f} s; parallel "
        f"{r.get('recover_1gib_parallel_s', float('nan')):.2f} s (group {r.get('group_size')}, "
        f"x{r.get('speedup', 0):.1f}; {r.get('parallel_s')}); GETs {r['gets']}, errors {r['errors']}, "
        f"p99 {r['p99_before_us'] / 1000:.1f} ms before, {r['p99_during_us'] / 1000:.1f} ms during "
        f"{r['kills']} kills (with a recovery group forced: errors {r.get('errors_group')}, "
        f"{r.get('p99_during_us_group', 0) / 1000:.1f} ms during)\n")
    sys.stdout.flush()
