"""``funcsion bench run``: what a run costs beyond its handlers, on one embedded
stack, next to its peers measured in the same run.

- ``cold_start_ms``: p50 of a task worker's cold start (a new instance of a task
  function deployed as the executor deploys it, until its handler is loaded:
  ``LocalPlatform.prewarm`` after killing the last one), ``--cold`` times;
  ``cold_start_spawn_ms`` the same with the fork server off (a fresh interpreter
  per worker, what every worker was before); ``fork_server_start_ms`` the fork
  server's own start, paid once per run.
- ``import_sdk_ms``: p50 of ``python -c "import sdk"`` in a fresh process with
  this environment (``import_sdk_cached_ms``: with the workers' bytecode cache).
- ``warm_overhead_ms``: p50 over the warm attempts of a no-op workflow of 4
  stages x 16 tasks of each attempt's time as the executor sees it (invoke to
  result) minus the handler body's own time: dispatch plus the ``@sdk.task``
  wrapper (its metadata calls included). ``noop_wall_s`` is the run's wall time,
  ``noop_cold_attempts`` how many attempts found no warm worker.
- ``shuffle_per_object_ms``: a 64 x 64 shuffle of 4 KiB objects (each mapper one
  ``put_many`` of 64, each reducer one ``get_many`` of 64): the tasks' time in
  those calls, summed, per object (one PUT and one GET of each);
  ``redis_set_get_ms``: p50 of a 4 KiB SET + GET pair from one client to a
  redis-server this bench starts (absent: null, and ``redis`` says why).
- ``shuffle_uploads``, ``shuffle_uploads_skipped``, ``uploads_skipped_share``,
  ``cos_requests_saved``: the daemon's write-behind over the shuffle (until its
  queue is idle after the run): versions uploaded to COS, versions freed before
  their upload was due (never uploaded), their share, and the COS requests that
  saved (a PUT and the DELETE the free would need, each); ``parity_upload_delay_s``
  the delay coded versions wait (``DaemonConfig``).
- ``coded_*``: the same for an 8 x 8 shuffle of 2 MiB objects (``--coded-mib``; each is
  erasure-coded, so the parity delay applies): ``coded_shuffle_per_object_ms``,
  ``coded_shuffle_uploads``, ``coded_shuffle_uploads_skipped``,
  ``coded_uploads_skipped_share``, ``coded_cos_requests_saved``.

``--json`` prints one JSON object as the last line, with the ratios to the
targets (``cold_vs_import`` <= 0.5, ``warm_overhead_ms`` <= 5,
``shuffle_vs_redis`` <= 5).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from funcsion_rpc.errors import InvalidRequest

from . import _bench_run_code as code

__all__ = ["HELP", "add_arguments", "run"]

HELP = "measure task start-up, per-invocation overhead and a 64x64 shuffle next to Redis and `import sdk`"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--cold", type=int, default=20, help="cold starts to measure (default 20)")
    p.add_argument("--imports", type=int, default=5, help="fresh `import sdk` processes to time (default 5)")
    p.add_argument("--pairs", type=int, default=2000, help="Redis SET+GET pairs to time (default 2000)")
    p.add_argument("--upload-delay-s", type=float, default=None,
                   help="the daemon's write-behind delay for every version (DaemonConfig.upload_delay_s; "
                        "default: its default, 0 = SION: uncoded versions go up at once)")
    p.add_argument("--coded-mib", type=float, default=2.0,
                   help="object size of the coded shuffle (8x8), MiB; above one block, so coded (default 2; 0: skip)")
    p.add_argument("--parity-upload-delay-s", type=float, default=None,
                   help="the delay for coded versions (DaemonConfig.parity_upload_delay_s; default: its default)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2x4 no-op tasks, an 8x8 shuffle, few samples (not a measurement)")


def _p50(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 2)


def _import_sdk(n: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import sdk"], env=env, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _cold_starts(n: int, *, fork_server: bool) -> tuple[list[float], float]:
    """(cold start seconds, fork server start seconds) of the no-op task worker."""
    from sdk.local._executor import TASK_PRELOAD
    from storage_functions.local import LocalPlatform, PlatformConfig

    with tempfile.TemporaryDirectory(prefix="funcsion-bench-cold-") as d:
        code.write_noop(Path(d))
        with LocalPlatform(PlatformConfig(fork_server=fork_server)) as p:
            p.deploy("bench-cold", "handlers:noop", memory_mb=512, code_paths=[d], preload=TASK_PRELOAD)
            first = p.prewarm("bench-cold")  # the fork server starts (once per run), the bytecode is written
            out = []
            for _ in range(n):
                p.kill("bench-cold")
                out.append(p.prewarm("bench-cold"))
    return out, first


def _run(wds: Path, stack: Any, inputs: dict[str, str]) -> Any:
    from sdk.local._executor import ExecutorOptions
    from sdk.local._run import run_workflow

    report = run_workflow(wds, config=stack.config, stack=stack, inputs=inputs,
                          options=ExecutorOptions(progress=False))
    if report.status != "succeeded":
        raise InvalidRequest(f"the bench workflow {wds.name} did not succeed: {report.error}")
    return report


def _noop(stack: Any, d: Path, stages: int, width: int) -> dict[str, Any]:
    wds = code.write_noop(d, stages, width)
    _run(wds, stack, {})  # warm-up: the stack's first run
    (d / "timings.jsonl").unlink()
    report = _run(wds, stack, {})
    body = {str(t["task"]): float(t["body_s"]) for t in code.read_timings(d)}
    overheads, cold = [], 0
    for name, task in report.tasks.items():
        for a in task["tries"]:
            if a["cold"]:
                cold += 1
            elif a["finished_at"] is not None:
                overheads.append(a["finished_at"] - a["started_at"] - body.get(name, 0.0))
    return {"warm_overhead_ms": _ms(_p50(overheads)), "noop_wall_s": round(report.wall_s, 3),
            "noop_cold_attempts": cold, "noop_attempts": sum(len(t["tries"]) for t in report.tasks.values())}


def _upload_stats(stack: Any) -> dict[str, Any] | None:
    daemon = getattr(stack.store, "daemon", None)
    if daemon is None:  # the daemon runs in a child process
        return None
    daemon.wait_uploads(60)
    st: dict[str, Any] = daemon.buffer.stats()
    return st


def _shuffle(stack: Any, d: Path, mappers: int, reducers: int, size: int = code.OBJECT_BYTES) -> dict[str, Any]:
    wds = code.write_shuffle(d, mappers, reducers, size)
    before = _upload_stats(stack)
    report = _run(wds, stack, {"src": str(d / "src.txt")})
    after = _upload_stats(stack)
    ups: dict[str, Any] = {}
    if before is not None and after is not None:
        up, skip = (after[k] - before[k] for k in ("uploads", "uploads_skipped"))
        ups = {"shuffle_uploads": up, "shuffle_uploads_skipped": skip,
               "uploads_skipped_share": round(skip / (up + skip), 4) if up + skip else 0.0,
               "cos_requests_saved": after["cos_requests_saved"] - before["cos_requests_saved"],
               "upload_delay_s": after["upload_delay_s"], "parity_upload_delay_s": after["parity_upload_delay_s"]}
    timings = code.read_timings(d)
    put = sum(float(t.get("put_s", 0.0)) for t in timings)
    get = sum(float(t.get("get_s", 0.0)) for t in timings)
    n = mappers * reducers
    return {"shuffle_per_object_ms": round((put + get) / n * 1000.0, 3),
            "shuffle_put_per_object_ms": round(put / n * 1000.0, 3),
            "shuffle_get_per_object_ms": round(get / n * 1000.0, 3), "shuffle_wall_s": round(report.wall_s, 3),
            **ups}


_CODED_KEYS = ("shuffle_per_object_ms", "shuffle_uploads", "shuffle_uploads_skipped", "uploads_skipped_share",
               "cos_requests_saved")


def _redis(pairs: int) -> tuple[str, float | None]:
    from .bench_store import start_redis

    started = start_redis(code.OBJECT_BYTES * 4)
    if isinstance(started, str):
        return started, None
    client, proc, note = started
    try:
        data = os.urandom(code.OBJECT_BYTES)
        times = []
        for i in range(pairs):
            t = time.perf_counter()
            client.set(f"k{i % 64}", data)
            client.get(f"k{i % 64}")
            times.append(time.perf_counter() - t)
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return note, statistics.median(times)


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._stack import Stack
    from storage_functions.local import PlatformConfig

    if args.cold < 1 or args.imports < 1 or args.pairs < 1:
        raise InvalidRequest("--cold, --imports and --pairs must be at least 1")
    if not 0 <= args.coded_mib <= 64:
        raise InvalidRequest(f"--coded-mib must be in 0..64, got {args.coded_mib}")
    if args.quick:
        args.cold, args.imports, args.pairs = 3, 1, 50
    stages, width = (2, 4) if args.quick else (code.STAGES, code.WIDTH)
    mappers = reducers = 8 if args.quick else code.MAPPERS
    doc: dict[str, Any] = {"noop": f"{stages}x{width}", "shuffle": f"{mappers}x{reducers}x{code.OBJECT_BYTES}B"}
    env = dict(os.environ)
    doc["import_sdk_ms"] = _ms(_import_sdk(args.imports, env))
    cached = dict(env, PYTHONPYCACHEPREFIX=str(PlatformConfig().resolve().bytecode_dir))
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    _import_sdk(1, cached)  # writes the cache
    doc["import_sdk_cached_ms"] = _ms(_import_sdk(args.imports, cached))
    cold, first = _cold_starts(args.cold, fork_server=True)
    doc["cold_start_ms"], doc["fork_server_start_ms"] = _ms(_p50(cold)), _ms(first)
    spawn, _ = _cold_starts(max(3, args.cold // 4), fork_server=False)
    doc["cold_start_spawn_ms"] = _ms(_p50(spawn))
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-run-") as tmp:
        cfg = Config.load(state_dir=str(Path(tmp) / "state"), env={})
        overrides = {k: v for k, v in (("upload_delay_s", args.upload_delay_s),
                                       ("parity_upload_delay_s", args.parity_upload_delay_s)) if v is not None}
        if any(v < 0 for v in overrides.values()):
            raise InvalidRequest("--upload-delay-s and --parity-upload-delay-s must be >= 0")
        with Stack(cfg, metadata_port=0, daemon_port=0, daemon=overrides) as stack:
            doc.update(_noop(stack, Path(tmp) / "noop", stages, width))
            doc.update(_shuffle(stack, Path(tmp) / "shuffle", mappers, reducers))
            if args.coded_mib > 0:
                side = 4 if args.quick else 8
                size = int(args.coded_mib * (1 << 20))
                coded = _shuffle(stack, Path(tmp) / "coded", side, side, size)
                doc["coded_shuffle"] = f"{side}x{side}x{size}B"
                doc.update({"coded_" + k: v for k, v in coded.items() if k in _CODED_KEYS})
    doc["redis"], pair = _redis(args.pairs)
    doc["redis_set_get_ms"] = _ms(pair)
    doc["cold_vs_import"] = round(doc["cold_start_ms"] / doc["import_sdk_ms"], 3)
    doc["shuffle_vs_redis"] = (round(doc["shuffle_per_object_ms"] / doc["redis_set_get_ms"], 2)
                               if doc["redis_set_get_ms"] else None)
    _print(doc)
    if args.json:
        print(json.dumps(doc))
    return 0


def _print(doc: dict[str, Any]) -> None:
    print(f"cold start of a task worker: p50 {doc['cold_start_ms']} ms (fork server; a fresh interpreter: "
          f"{doc['cold_start_spawn_ms']} ms; the fork server's own start: {doc['fork_server_start_ms']} ms)")
    print(f"python -c 'import sdk': {doc['import_sdk_ms']} ms ({doc['import_sdk_cached_ms']} ms with the bytecode "
          f"cache); cold start / import: {doc['cold_vs_import']} (target <= 0.5)")
    print(f"no-op workflow {doc['noop']}: {doc['noop_wall_s']} s, warm overhead p50 "
          f"{doc['warm_overhead_ms']} ms per invocation (target <= 5), {doc['noop_cold_attempts']} of "
          f"{doc['noop_attempts']} attempts cold")
    print(f"shuffle {doc['shuffle']}: {doc['shuffle_per_object_ms']} ms per "
          f"object (put {doc['shuffle_put_per_object_ms']}, get {doc['shuffle_get_per_object_ms']}), "
          f"{doc['shuffle_wall_s']} s; Redis SET+GET {doc['redis_set_get_ms']} ms ({doc['redis']}); "
          f"ratio {doc['shuffle_vs_redis']} (target <= 5)")
    if "shuffle_uploads" in doc:
        print(f"write-behind over the shuffle: {doc['shuffle_uploads']} uploads, {doc['shuffle_uploads_skipped']} "
              f"skipped ({doc['uploads_skipped_share']:.0%}), {doc['cos_requests_saved']} COS requests saved")
    if "coded_shuffle_uploads" in doc:
        print(f"coded shuffle {doc['coded_shuffle']}: {doc['coded_shuffle_per_object_ms']} ms per object; "
              f"{doc['coded_shuffle_uploads']} uploads, {doc['coded_shuffle_uploads_skipped']} skipped "
              f"({doc['coded_uploads_skipped_share']:.0%}), {doc['coded_cos_requests_saved']} COS requests saved")
