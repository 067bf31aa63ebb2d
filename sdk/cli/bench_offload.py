"""``funcsion bench offload``: what ``@sdk.offload`` costs per Task state, against what a
state machine does without it, on the same payloads in one run:

- under Step Functions' 256 KiB state limit (4 KiB, 64 KiB, 200 KiB): against passing the
  payload inline, in the state;
- over it (1 MiB, 5 MiB, 20 MiB): against an S3 claim check through moto's S3 server over
  HTTP (its own process, ``sdk.cli._moto``): the writer puts the payload with boto3 and
  passes the key, the reader gets it, the driver deletes it.

Two measurements per payload and way (handlers: ``sdk.cli._bench_offload_handlers``):

- ``boundary``: at the handler boundary, in this process (the daemon and the storage functions
  run in a process of their own, the metadata server here), a writer state then its reader
  state called directly: the decorator's cost (store and reference on the writer, resolve,
  commit and free on the reader), the claim check's put and get, and for every way the JSON
  encoding and decoding of what the state carries (what Lambda's runtime does to a result and
  an event; inline, that is the payload itself);
- ``e2e``: end to end per state: the writer and then the reader invoked as Lambdas of the
  local platform (warm instances, each a process of its own; the result crosses the invoke
  boundary as JSON), timed from the invoke to its result. Step Functions' own transit
  between the states is not in it (moto's interpreter would measure moto).

Each offload iteration is an execution of its own: a run of the two-state machine's plan
(the writer's value has one declared reader) started before and ended after the timed part.
The offload threshold is ``--threshold`` (default 1 KiB, the least: every payload here is
offloaded, the 4 KiB one too; at the default 64 KiB a 4 KiB value would stay inline).
Prints a table; ``--json`` prints one JSON object as the last line::

    {"sizes": {"4096": {"peer": "inline" | "s3", "iters": N,
                        "offload_boundary_p50_us", "offload_boundary_p99_us",
                        "offload_write_p50_us", "offload_read_p50_us",
                        "peer_boundary_p50_us", "peer_boundary_p99_us", "peer_write_p50_us", "peer_read_p50_us",
                        "offload_e2e_p50_ms", "offload_e2e_p99_ms", "peer_e2e_p50_ms", "peer_e2e_p99_ms",
                        "offload_e2e_write_p50_ms", "offload_e2e_read_p50_ms", "peer_e2e_write_p50_ms",
                        "peer_e2e_read_p50_ms", "s3_delete_p50_us" (s3 only: the driver's delete, not in
                        the peer's figures),
                        "boundary_ratio", "e2e_ratio" (offload p50 over the peer's p50)}, ...},
     "threshold_bytes", "state_limit_bytes": 262144, "s3": "moto server ...", "code": "10+2"}

``boundary``/``e2e`` p50 and p99 are of the pair (writer + reader) per iteration; per state
is half of it. On a shared machine the figures move with the load; the ratios less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

HELP = ("measure @sdk.offload's per-state cost against passing payloads inline (under 256 KiB) and an S3 "
        "claim check through moto's S3 server (over it)")

KiB, MiB = 1024, 1 << 20
STATE_LIMIT = 256 * KiB
DEFAULT_SIZES = [4 * KiB, 64 * KiB, 200 * KiB, MiB, 5 * MiB, 20 * MiB]
_H = "sdk.cli._bench_offload_handlers"
_BUCKET = "bench-offload"
#: the two-state machine each offload iteration is an execution of (its plan: Produce read once by Consume)
DEFINITION: dict[str, Any] = {
    "StartAt": "Produce",
    "States": {
        "Produce": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                    "Parameters": {"FunctionName": "bench-offload_write",
                                   "Payload": {"funcsion.$": "$$", "size.$": "$.size"}},
                    "ResultSelector": {"data.$": "$.Payload"}, "ResultPath": "$.produced", "Next": "Consume"},
        "Consume": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                    "Parameters": {"FunctionName": "bench-offload_read",
                                   "Payload": {"funcsion.$": "$$", "data.$": "$.produced.data"}},
                    "End": True},
    },
}

__all__ = ["DEFAULT_SIZES", "DEFINITION", "HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="comma-separated payload sizes in bytes (default 4 KiB..20 MiB); under 256 KiB against "
                        "inline, over it against an S3 claim check")
    p.add_argument("--iters", type=int, default=30,
                   help="iterations per size up to 1 MiB (default 30; a third above, at least 3)")
    p.add_argument("--threshold", type=int, default=KiB, metavar="BYTES",
                   help="offload values larger than this (default 1024: every payload here is offloaded)")
    p.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _iters(size: int, base: int) -> int:
    return base if size <= MiB else max(3, base // 3)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _rt(value: Any) -> Any:
    """What crossing a state boundary does to a value: JSON out of one runtime, into the next."""
    return json.loads(json.dumps(value))


class _Runs:
    """Starts one run (an execution) of ``DEFINITION``'s plan per offload iteration and makes
    the context object Step Functions passes a state (``"funcsion.$": "$$"``)."""

    def __init__(self, client: Any) -> None:
        from sdk import asl_plan

        self.client = client
        self.plan = asl_plan.plan(DEFINITION)

    def start(self) -> Any:
        from sdk._offload_plan import start_run

        return start_run(self.client, DEFINITION, app="bench-offload")

    def context(self, run: Any, state: str) -> dict[str, Any]:
        from sdk._offload_plan import execution_input

        return {"Execution": {"Name": run.run_id, "Input": execution_input(run, {}, self.plan)},
                "State": {"Name": state}}


def _quietly(fn: Callable[[Any, Any], Any], sink: Any) -> Callable[[Any, Any], Any]:
    import contextlib

    def call(event: Any, context: Any) -> Any:
        with contextlib.redirect_stdout(sink):
            return fn(event, context)

    return call


def _boundary(size: int, n: int, way: str, runs: _Runs) -> dict[str, list[float]]:
    """Writer then reader, called in this process (see the module docstring)."""
    import importlib

    h = importlib.import_module(_H)
    quiet = open(os.devnull, "w")  # the decorator's one log line per state (a Lambda's log), not the table
    write = _quietly(getattr(h, f"{way}_write"), quiet)
    read = _quietly(getattr(h, f"{way}_read"), quiet)
    h.payload(size)
    out: dict[str, list[float]] = {"write": [], "read": [], "pair": []}
    for i in range(n + 1):  # the first is a warm-up
        run = runs.start() if way == "offload" else None
        wev: dict[str, Any] = {"size": size}
        if run is not None:
            wev["funcsion"] = runs.context(run, "Produce")
        t0 = time.perf_counter()
        produced = _rt(write(_rt(wev), None))
        t1 = time.perf_counter()
        rev: dict[str, Any] = {"data": produced}
        if run is not None:
            rev["funcsion"] = runs.context(run, "Consume")
        got = _rt(read(_rt(rev), None))
        t2 = time.perf_counter()
        if got != {"size": size, "intact": True}:
            raise RuntimeError(f"bench offload: the {way} reader of {size} bytes got {got!r}")
        if run is not None:
            left = [o.object_name for o in run.list() if o.state not in ("freed",) and o.size >= KiB]
            if left:
                raise RuntimeError(f"bench offload: {left} not freed at the reader's commit")
            run.end_run("succeeded")
            run.close()
        elif way == "s3":
            h._s3().delete_object(Bucket=_BUCKET, Key=produced["claim"]["key"])
        if i:
            out["write"].append(t1 - t0)
            out["read"].append(t2 - t1)
            out["pair"].append(t2 - t0)
    quiet.close()
    return out


def _s3_deletes(n: int) -> list[float]:
    """The driver's delete of a claim-check object, timed alone."""
    import importlib

    h = importlib.import_module(_H)
    s3 = h._s3()
    times = []
    for _ in range(n):
        key = f"delete-probe/{time.perf_counter_ns()}"
        s3.put_object(Bucket=_BUCKET, Key=key, Body=b"x")
        t = time.perf_counter()
        s3.delete_object(Bucket=_BUCKET, Key=key)
        times.append(time.perf_counter() - t)
    return times


def _e2e(size: int, n: int, way: str, runs: _Runs, invoke: Callable[[str, Any], Any]) -> dict[str, list[float]]:
    """Writer then reader invoked as Lambdas of the local platform (see the module docstring)."""
    import importlib

    h = importlib.import_module(_H)
    out: dict[str, list[float]] = {"write": [], "read": [], "pair": []}
    for i in range(n + 1):
        run = runs.start() if way == "offload" else None
        wev: dict[str, Any] = {"size": size}
        if run is not None:
            wev["funcsion"] = runs.context(run, "Produce")
        t0 = time.perf_counter()
        produced = invoke(f"bench-{way}_write", wev)
        t1 = time.perf_counter()
        rev: dict[str, Any] = {"data": produced}
        if run is not None:
            rev["funcsion"] = runs.context(run, "Consume")
        got = invoke(f"bench-{way}_read", rev)
        t2 = time.perf_counter()
        if got != {"size": size, "intact": True}:
            raise RuntimeError(f"bench offload: the {way} Lambda reading {size} bytes got {got!r}")
        if run is not None:
            run.end_run("succeeded")
            run.close()
        elif way == "s3":
            h._s3().delete_object(Bucket=_BUCKET, Key=produced["claim"]["key"])
        if i:
            out["write"].append(t1 - t0)
            out["read"].append(t2 - t1)
            out["pair"].append(t2 - t0)
    return out


def _row(size: int, peer: str, n: int, b: Mapping[str, Mapping[str, list[float]]],
         e: Mapping[str, Mapping[str, list[float]]]) -> dict[str, Any]:
    row: dict[str, Any] = {"peer": peer, "iters": n}
    for who, way in (("offload", "offload"), ("peer", peer)):
        row[f"{who}_boundary_p50_us"] = round(_pct(b[way]["pair"], 0.5) * 1e6, 1)
        row[f"{who}_boundary_p99_us"] = round(_pct(b[way]["pair"], 0.99) * 1e6, 1)
        row[f"{who}_write_p50_us"] = round(statistics.median(b[way]["write"]) * 1e6, 1)
        row[f"{who}_read_p50_us"] = round(statistics.median(b[way]["read"]) * 1e6, 1)
        row[f"{who}_e2e_p50_ms"] = round(_pct(e[way]["pair"], 0.5) * 1e3, 3)
        row[f"{who}_e2e_p99_ms"] = round(_pct(e[way]["pair"], 0.99) * 1e3, 3)
        row[f"{who}_e2e_write_p50_ms"] = round(statistics.median(e[way]["write"]) * 1e3, 3)
        row[f"{who}_e2e_read_p50_ms"] = round(statistics.median(e[way]["read"]) * 1e3, 3)
    # the ratios of the printed (rounded) figures
    row["boundary_ratio"] = round(row["offload_boundary_p50_us"] / row["peer_boundary_p50_us"], 3)
    row["e2e_ratio"] = round(row["offload_e2e_p50_ms"] / row["peer_e2e_p50_ms"], 3)
    return row


def _measure(sizes: list[int], base: int, threshold: int) -> dict[str, Any]:
    import logging

    from sdk._config import Config
    from sdk.local._stack import Stack
    from storage_functions.exceptions import InvocationFailed
    from storage_functions.local import LocalPlatform, PlatformConfig

    from ._moto import MotoS3

    logging.getLogger("botocore").setLevel(logging.WARNING)
    doc: dict[str, Any] = {"sizes": {}, "threshold_bytes": threshold, "state_limit_bytes": STATE_LIMIT}
    saved = {k: os.environ.get(k) for k in ("FUNCSION_OFFLOAD_THRESHOLD_BYTES", "BENCH_OFFLOAD_S3_ENDPOINT",
                                            "BENCH_OFFLOAD_S3_BUCKET")}
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-offload-") as tmp, MotoS3() as s3:
        import boto3

        boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").create_bucket(Bucket=_BUCKET)
        env = {"FUNCSION_OFFLOAD_THRESHOLD_BYTES": str(threshold), "BENCH_OFFLOAD_S3_ENDPOINT": s3.endpoint,
               "BENCH_OFFLOAD_S3_BUCKET": _BUCKET, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        os.environ.update(env)
        doc["s3"] = f"moto server (python -m moto.server) on loopback, {s3.endpoint}"
        platform = LocalPlatform(PlatformConfig(idle_reclaim_s=(600.0, 1200.0)))
        try:
            for way in ("offload", "inline", "s3"):
                for side in ("write", "read"):
                    platform.deploy(f"bench-{way}_{side}", f"{_H}:{way}_{side}", memory_mb=2048, timeout_s=300,
                                    env=env, code_paths=[])

            def invoke(name: str, event: Any) -> Any:
                try:
                    return platform.invoke(name, event)
                except InvocationFailed as exc:
                    raise RuntimeError(f"bench offload: Lambda {name} failed: {exc.error_type or exc.reason}: "
                                       f"{exc.error_message or exc}") from None

            # the daemon and its storage functions in a process of their own: the handler-boundary calls
            # below share this interpreter with the metadata server only, as a Lambda shares none
            with Stack(Config.load(state_dir=tmp), metadata_port=0, daemon_port=0, daemon_process=True) as stack, \
                    stack.client() as c:
                runs = _Runs(c)
                doc["code"] = f"{stack.config.ec_data}+{stack.config.ec_parity}"
                for size in sizes:
                    n = _iters(size, base)
                    peer = "inline" if size < STATE_LIMIT else "s3"
                    b = {w: _boundary(size, n, w, runs) for w in ("offload", peer)}
                    e = {w: _e2e(size, n, w, runs, invoke) for w in ("offload", peer)}
                    row = _row(size, peer, n, b, e)
                    if peer == "s3":
                        row["s3_delete_p50_us"] = round(statistics.median(_s3_deletes(n)) * 1e6, 1)
                    doc["sizes"][str(size)] = row
                    sys.stderr.write(f"bench offload: {_fmt(size)} done\n")
        finally:
            platform.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return doc


def _fmt(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def _print_table(doc: Mapping[str, Any]) -> None:
    cols = [("peer", "peer"), ("offload us p50", "offload_boundary_p50_us"), ("p99", "offload_boundary_p99_us"),
            ("peer us p50", "peer_boundary_p50_us"), ("p99", "peer_boundary_p99_us"), ("x", "boundary_ratio"),
            ("offload e2e ms p50", "offload_e2e_p50_ms"), ("p99", "offload_e2e_p99_ms"),
            ("peer e2e ms p50", "peer_e2e_p50_ms"), ("p99", "peer_e2e_p99_ms"), ("x", "e2e_ratio")]
    rows = [["payload", *[c for c, _ in cols]]]
    for size, r in doc["sizes"].items():
        rows.append([_fmt(int(size)), *[str(r.get(k, "-")) for _, k in cols]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("  ".join(x.rjust(w) for x, w in zip(r, widths)) + "\n")
    sys.stdout.write(f"writer + reader state per iteration; boundary: handlers called in this process, e2e: as "
                     f"Lambdas of the local platform; offload threshold {doc['threshold_bytes']} bytes; "
                     f"s3: {doc['s3']}; one loaded machine\n")


def run(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in str(args.sizes).split(",") if s]
    if not sizes or min(sizes) <= args.threshold:
        raise SystemExit(f"funcsion bench offload: every size must be larger than --threshold {args.threshold} "
                         "(else nothing is offloaded)")
    base = 3 if args.quick else max(3, int(args.iters))
    doc = _measure(sizes, base, int(args.threshold))
    _print_table(doc)
    if args.json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0
