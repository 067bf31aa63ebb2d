"""``funcsion bench placement``: busy-aware placement under the metadata server's placement
(SION Fig. 5 ``TestAndPlace``'s queue test, issue 33 item 2). An embedded stack of two
function groups; ``--writers`` clients PUT ``--each`` coded objects of ``--object-mb`` MiB
each, all at once, three times: with no straggler (``idle``), with one storage function
whose inbound bandwidth alone is throttled to ``--slow-mbps`` (the daemon's
``recv_mbps_overrides``) while the daemon reports its queues to the metadata server
(``busy_aware``), and the same straggler with the reports off (``blind``: the allocator
places as before). Measured: PUT latency p50/p99 (nearest rank, microseconds) of each case,
the objects whose chunk 0 (whose stride starts at the straggler) went to it, and how often
the metadata server marked a function busy. The straggler is a model (a bandwidth throttle
in the local platform's function), not a slow Lambda. ``--json`` prints one JSON object
last."""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from typing import Any

__all__ = ["HELP", "add_arguments", "run"]

HELP = "PUT p99 with one slow storage function, with and without busy-aware placement"
MiB = 1 << 20
_WDS = {"app": "bench-placement", "workflow_id": 1, "category": "bench",
        "spec": {"s": {"stage_id": 0, "functions": [
            {"start": True, "name": "w", "input": ["x"], "output": [], "next": []}]}}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--writers", type=int, default=6, help="concurrent writers (default 6)")
    p.add_argument("--each", type=int, default=10, help="objects each writer PUTs (default 10)")
    p.add_argument("--object-mb", type=float, default=2.0, help="object size in MiB (default 2: coded, 10+2 chunks)")
    p.add_argument("--slow-mbps", type=float, default=2.0,
                   help="the straggler's modelled inbound bandwidth in MB/s (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _p(sorted_us: list[int], q: int) -> int:
    """Nearest-rank percentile ``q`` of ``sorted_us``."""
    if not sorted_us:
        return 0
    return sorted_us[min(len(sorted_us) - 1, max(0, -(-len(sorted_us) * q // 100) - 1))]


def _case(slow: str, mbps: float, report: bool, args: argparse.Namespace) -> dict[str, Any]:
    from sdk._client import Client
    from sdk._config import Config
    from sdk.local._stack import Stack

    daemon: dict[str, Any] = {"report_loads": report}
    if slow:
        daemon["recv_mbps_overrides"] = {slow: mbps}
    size = int(args.object_mb * MiB)
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-placement-") as tmp:
        cfg = Config.load(state_dir=tmp, env={})
        with Stack(cfg, metadata_port=0, daemon_port=0, daemon=daemon) as stack, stack.client() as driver:
            d = stack.store.daemon
            run = driver.start_run(driver.register_workflow(json.dumps(_WDS)), max_concurrency=24)
            deadline = time.monotonic() + 60
            while len(driver.metadata.stats()["functions"]) < 24 and time.monotonic() < deadline:
                time.sleep(0.05)
            d.prewarm(24)
            d.wait_warm(24, 60)
            blob = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            lat: list[int] = []
            errors: list[BaseException] = []
            lock = threading.Lock()

            def writer(t: int) -> None:
                try:
                    with Client(stack.endpoints, run_id=run.run_id, token=run.token) as c:
                        for k in range(args.each):
                            t0 = time.perf_counter_ns()
                            c.put(f"o{t}-{k}", blob, codec="bytes", adhoc=True)
                            with lock:
                                lat.append((time.perf_counter_ns() - t0) // 1000)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=writer, args=(t,)) for t in range(args.writers)]
            t0 = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - t0
            if errors:
                raise errors[0]
            names = [f"o{t}-{k}" for t in range(args.writers) for k in range(args.each)]
            first = [next(e.function_name for e in run.lookup(n).placement.extents if e.chunk == 0) for n in names]
            counters = driver.metadata.stats()["counters"]
            run.end_run("succeeded")
            run.close()
    lat.sort()
    return {"put_p50_us": _p(lat, 50), "put_p99_us": _p(lat, 99), "puts": len(lat), "wall_s": round(wall, 3),
            "chunk0_on_straggler": sum(fn == "sion-0" for fn in first) if slow else 0,
            "busy_marks": int(counters.get("busy_marks", 0))}


def run(args: argparse.Namespace) -> int:
    if args.writers < 1 or args.each < 1 or args.object_mb <= 1 or args.slow_mbps <= 0:
        raise SystemExit("funcsion bench placement: --writers and --each must be >= 1, --object-mb > 1 (a coded "
                         "object: more than one 1 MiB block) and --slow-mbps > 0")
    out: dict[str, Any] = {"writers": args.writers, "each": args.each, "object_mb": args.object_mb,
                           "slow_mbps": args.slow_mbps, "straggler": "sion-0"}
    for name, slow, report in (("idle", "", True), ("busy_aware", "sion-0", True), ("blind", "sion-0", False)):
        out[name] = _case(slow, args.slow_mbps, report, args)
        r = out[name]
        print(f"{name:>10}: PUT p50 {r['put_p50_us'] / 1000:8.1f} ms  p99 {r['put_p99_us'] / 1000:8.1f} ms  "
              f"chunk 0 on the straggler {r['chunk0_on_straggler']:3d}/{r['puts']}  busy marks {r['busy_marks']}")
    out["p99_busy_aware_over_idle"] = round(out["busy_aware"]["put_p99_us"] / max(1, out["idle"]["put_p99_us"]), 2)
    out["p99_blind_over_idle"] = round(out["blind"]["put_p99_us"] / max(1, out["idle"]["put_p99_us"]), 2)
    print(f"p99 against no straggler: busy-aware {out['p99_busy_aware_over_idle']}x, "
          f"blind {out['p99_blind_over_idle']}x (the straggler is a bandwidth throttle, a model)")
    if args.json:
        print(json.dumps(out))
    return 0
