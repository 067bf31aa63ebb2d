"""``funcsion bench store``: the whole store (StoreClient -> daemon -> storage
functions on the local platform) against Redis on loopback, S3 (moto's
server) and a raw loopback socket copy, in one run. Prints a table;
``--json`` prints one JSON object as the last line (docs/benchmarks/store.md)::

    {"sizes": {"4096": {"put_p50_us", "put_p99_us", "get_p50_us", "get_p99_us",
                        "put_mbps", "get_mbps", "redis_get_p50_us", "redis_put_p50_us",
                        "redis_get_mbps", "s3_get_p50_us", "s3_put_p50_us", "raw_p50_us",
                        "raw_mbps", "get_into_p50_us", "get_into_mbps" (into a reused
                        buffer, as the raw copy receives), and the ratios "get_vs_redis",
                        "put_vs_redis" (p50 over Redis's), "get_vs_raw", "get_into_vs_raw",
                        "put_vs_raw" (MB/s over the raw socket's)}, ...},
     "ec": {"65536": {"encode_us" (pyeclib), "encode_inplace_us" (the PUT's encoder),
                      "decode_us", "raw_xfer_us"}, ...},
     (per size also "put_cpu_us": CPU time (us) of this process -- client, daemon and its
      write-behind upload -- per PUT, and "put_functions_cpu_us": the storage functions'
      processes' per PUT; "get_into_cpu_us", "get_into_functions_cpu_us" the same per
      get_into; steadier than the latencies on a loaded machine)
     "redis": "found at /usr/bin/redis-server" | "absent: ...",
     "write_behind": {"uploads", "uploads_skipped", "uploads_skipped_share", "cos_requests_saved", ...},
     "small_behind_large_p99_us", "small_idle_p99_us", "small_behind_large_ratio" (busy p99 over idle p99),
     "small_behind_large": {"idle_p50_us", "busy_p50_us", "large_bytes", "small_gets", "large_gets",
                            "function_send_mbps", "code", "shared_function"}, ...}

``small_behind_large_*`` (SION's two request queues: a function serves small requests on a
connection and a thread of their own): 4 KiB GETs of an object on a function, first with
the store idle, then while that same function (and the rest of its group) sends a 100 MiB
object to another client over and over; each function's sends modelled at
``--large-send-mbps`` (75 MB/s, SION's sustained per-function figure; 0 = loopback speed).
A ratio near 1 says a small request does not queue behind a large one; on a loaded
machine the client decoding 100 MiB competes for the same cores.

``--tls`` measures the cost of TLS instead (``storage_functions.tls``): the store
alone, plaintext and then TLS (certificates from ``funcsion certs``' code; SDK,
daemon and storage functions all over TLS) in the same run, at 4 KiB and 100 MiB
(or ``--sizes``); ``--json``'s object is then::

    {"plain": {"put_4k_p50_us", "get_4k_p50_us", "put_100m_mbps", "get_100m_mbps", ...},
     "tls": {the same keys}, "tls_over_plain": {the same keys: TLS's figure over plaintext's},
     "sizes": {"4096": {"plain": {...}, "tls": {...}}, ...}, "code": "10+2", "iters": N}

(per size label ``4k``/``100m``: ``put_<l>_p50_us``, ``get_<l>_p50_us``, ``put_<l>_mbps``,
``get_<l>_mbps``, ``put_<l>_cpu_us``: this process's CPU per PUT). A latency ratio above 1
and a throughput ratio below 1 are what TLS costs.

``--durable-puts`` measures what ``DaemonConfig.durable_puts`` costs (a PUT answered only
once its version is in COS, what a stack that must survive losing the daemon's host runs
with): the store alone, write-behind and then durable, in the same run, at 4 KiB, 1 MiB and
100 MiB (or ``--sizes``), COS being the local directory (a COS PUT to S3 costs more: its
latency is added to every durable PUT); ``--json``'s object is then ``{"plain": {...},
"durable": {...}, "durable_over_plain": {...}, "sizes": {...}, "code", "iters"}`` with the
keys of ``--tls``'s.

``write_behind`` is the daemon's buffer over the whole run (``PersistentBuffer.stats``):
every benchmark object is read back after its upload, so none is skipped here; the
share of uploads a workflow skips is in ``funcsion bench run``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable

HELP = "measure PUT/GET latency and throughput of the store next to Redis, S3 (moto) and a raw socket"

MiB = 1 << 20
DEFAULT_SIZES = [4096, 65536, MiB, 10 * MiB, 100 * MiB]

__all__ = ["HELP", "add_arguments", "run", "start_redis"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                   help="comma-separated object sizes in bytes (default 4 KiB..100 MiB)")
    p.add_argument("--iters", type=int, default=200,
                   help="iterations for objects up to 1 MiB (default 200; a third of it up to 16 MiB, a sixth "
                        "and at most 12 above: more 100 MiB PUTs would measure the disk under the buffer files)")
    p.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    p.add_argument("--no-redis", action="store_true", help="skip the Redis column")
    p.add_argument("--no-s3", action="store_true", help="skip the S3 (moto) column")
    p.add_argument("--d", type=int, default=10, help="data chunks (default 10)")
    p.add_argument("--p", type=int, default=2, help="parity chunks (default 2)")
    p.add_argument("--tls", action="store_true",
                   help="measure the store with TLS against plaintext in one run (4 KiB and 100 MiB unless --sizes)")
    p.add_argument("--durable-puts", action="store_true",
                   help="measure what answering a PUT only once it is in COS costs (DaemonConfig.durable_puts, "
                        "what survives losing the daemon's host) against write-behind (4 KiB, 1 MiB, 100 MiB "
                        "unless --sizes)")
    p.add_argument("--large-send-mbps", type=float, default=75.0,
                   help="each function's modelled send bandwidth while it serves the 100 MiB object of the "
                        "small-behind-large measurement (default 75, SION's figure; 0 = unlimited)")
    p.add_argument("--large-bytes", type=int, default=100 * MiB,
                   help="the large object of the small-behind-large measurement (default 100 MiB)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")


def _iters(size: int, base: int) -> int:
    if size <= MiB:
        return base
    if size <= 16 * MiB:
        return max(3, base // 3)
    return max(3, min(12, base // 6))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _summ(prefix: str, size: int, put: list[float] | None, get: list[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    if put:
        out[f"{prefix}put_p50_us"] = round(_pct(put, 0.5) * 1e6, 1)
        out[f"{prefix}put_p99_us"] = round(_pct(put, 0.99) * 1e6, 1)
        out[f"{prefix}put_mbps"] = round(size / statistics.median(put) / 1e6, 1)
    if get:
        out[f"{prefix}get_p50_us"] = round(_pct(get, 0.5) * 1e6, 1)
        out[f"{prefix}get_p99_us"] = round(_pct(get, 0.99) * 1e6, 1)
        out[f"{prefix}get_mbps"] = round(size / statistics.median(get) / 1e6, 1)
    return out


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


# -- the store ------------------------------------------------------------------
def _bench_store(sizes: list[int], base: int, d: int, p: int,
                 write_behind: dict[str, Any] | None = None, certs: dict[str, Any] | None = None,
                 daemon: dict[str, Any] | None = None) -> dict[int, dict[str, float]]:
    """The store's figures per size; ``certs`` (``make_certs``' paths): everything over TLS;
    ``daemon``: ``DaemonConfig`` fields to set (``durable_puts``)."""
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient
    from storage_functions.daemon import LocalStore

    settings: dict[str, Any] = {"tls_cert": str(certs["server.pem"]), "tls_key": str(certs["server.key"]),
                "tls_ca": str(certs["ca.pem"])} if certs else {}
    settings.update(daemon or {})
    ca = certs["ca.pem"].read_text() if certs else ""
    res: dict[int, dict[str, float]] = {}
    with LocalStore(function_memory_mb=2048, max_object_bytes=max(sizes) * 2, idle_s=60.0,
                    max_functions=max(48, 4 * (d + p)), group_size=d + p, **settings) as st, \
            StoreClient(st.address, st.token, codec=Codec(d, p), tls_ca=ca) as c:
        for size in sizes:
            n = _iters(size, base)
            data = os.urandom(size)
            c.put(f"warm-{size}", data)
            c.get(f"warm-{size}")
            st.daemon.wait_uploads(120)
            assert c.get(f"warm-{size}") == data
            cpu, fcpu = time.process_time(), _functions_cpu(st)
            puts = [_timed(lambda i: c.put(f"b-{size}-{i}", data), i) for i in range(n)]
            st.daemon.wait_uploads(300)  # GETs from function memory, not the buffer
            cpu = time.process_time() - cpu  # this process: client, daemon and its write-behind
            fcpu = _functions_cpu(st) - fcpu
            gets = [_timed(lambda i: c.get(f"b-{size}-{i % n}"), i) for i in range(n)]
            res[size] = _summ("", size, puts, gets)
            res[size]["put_cpu_us"] = round(cpu / n * 1e6, 1)
            res[size]["put_functions_cpu_us"] = round(fcpu / n * 1e6, 1)
            buf = bytearray(size)  # reused, like the raw socket's: no page faults, no copy out
            cpu, fcpu = time.process_time(), _functions_cpu(st)
            into = [_timed(lambda i: c.get_into(f"b-{size}-{i % n}", buf), i) for i in range(n)]
            cpu, fcpu = time.process_time() - cpu, _functions_cpu(st) - fcpu
            assert buf == data
            res[size].update({"get_into_p50_us": round(_pct(into, 0.5) * 1e6, 1),
                              "get_into_mbps": round(size / statistics.median(into) / 1e6, 1),
                              "get_into_cpu_us": round(cpu / n * 1e6, 1),
                              "get_into_functions_cpu_us": round(fcpu / n * 1e6, 1)})
            c.free([f"b-{size}-{i}" for i in range(n)] + [f"warm-{size}"])
        st.daemon.wait_uploads(60)
        if write_behind is not None:
            write_behind.update(st.daemon.buffer.stats())
    return res


_LARGE_READER = """
import sys, threading
from sdk._erasure import Codec
from sdk._store_client import StoreClient
host, port, token, d, p = sys.argv[1:]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
n = 0
with StoreClient((host, int(port)), token, codec=Codec(int(d), int(p))) as c:
    while not stop.is_set():
        with c.get_stream("large") as stream:
            for i, _ in enumerate(stream):
                if n == 0 and i == 0:
                    print("busy", flush=True)
        n += 1
print(n, flush=True)
"""


def _bench_small_behind_large(n: int, d: int, p: int, large: int, send_mbps: float) -> dict[str, Any]:
    """4 KiB GET p99 on a function idle, then while it sends ``large`` bytes (module docstring)."""
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient
    from storage_functions.daemon import LocalStore

    small_data, large_data = os.urandom(4096), os.urandom(large)
    with LocalStore(function_memory_mb=2048, max_object_bytes=2 * large, idle_s=60.0, max_functions=d + p,
                    group_size=d + p, function_send_mbps=send_mbps) as st, \
            StoreClient(st.address, st.token, codec=Codec(d, p)) as c:
        c.put("small", small_data)
        c.put("large", large_data)
        st.daemon.wait_uploads(300)
        holders = []
        for key in ("small", "large"):
            obj = st.daemon.table.latest(key)
            holders.append({pl[0] for s in (obj.stripes if obj else []) for pl in s.places if pl})
        assert c.get("small") == small_data
        idle = [_timed(c.get, "small") for _ in range(n)]
        # the large reader is another process (a task elsewhere), so that this process's
        # GIL is shared by the daemon and the small reader only, as on a deployment
        bulk_proc = subprocess.Popen([sys.executable, "-c", _LARGE_READER, st.address[0], str(st.address[1]),
                                      st.token, str(d), str(p)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert bulk_proc.stdout is not None and bulk_proc.stdin is not None
        bulk_proc.stdout.readline()  # "busy": the first large transfer is under way
        during = [_timed(c.get, "small") for _ in range(n)]
        bulk_proc.stdin.close()  # stop after the transfer in flight
        large_gets = [int(bulk_proc.stdout.readline() or 0)]
        bulk_proc.wait(300)
    # rounded first, so the ratio is the one the two printed figures give
    idle_p99, busy_p99 = round(_pct(idle, 0.99) * 1e6, 1), round(_pct(during, 0.99) * 1e6, 1)
    return {"small_behind_large_p99_us": busy_p99, "small_idle_p99_us": idle_p99,
            "small_behind_large_ratio": round(busy_p99 / idle_p99, 3),
            "small_behind_large": {"idle_p50_us": round(_pct(idle, 0.5) * 1e6, 1),
                                   "busy_p50_us": round(_pct(during, 0.5) * 1e6, 1), "large_bytes": large, "small_gets": n, "large_gets": large_gets[0],
                                   "function_send_mbps": send_mbps, "code": f"{d}+{p}",
                                   "shared_function": bool(holders[0] & holders[1])}}


def _functions_cpu(st: Any) -> float:
    """CPU seconds (user + system) the storage functions' processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for info in st.platform.instances():
        try:
            with open(f"/proc/{info.pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


# -- Redis ----------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(max_bulk_bytes: int) -> str | tuple[Any, subprocess.Popen[bytes], str]:
    """A redis-server on a free loopback port (no persistence) and a connected redis-py
    client: (client, process, "found at <path>"); or why not, as a string."""
    exe = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
    if exe is None:
        return "absent: redis-server not on PATH (apt-get install redis-server)"
    try:
        import redis
    except ImportError:
        return "absent: redis-py not installed (pip install redis)"
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--proto-max-bulk-len", str(max(max_bulk_bytes, 1 << 20))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            r.ping()
            return r, proc, f"found at {exe}"
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.terminate()
                proc.wait(10)
                return f"absent: redis-server at {exe} did not answer on port {port}"
            time.sleep(0.05)


def _bench_redis(sizes: list[int], base: int) -> tuple[str, dict[int, dict[str, float]]]:
    started = start_redis(max(sizes) * 2)
    if isinstance(started, str):
        return started, {}
    r, proc, note = started
    res: dict[int, dict[str, float]] = {}
    try:
        for size in sizes:
            n = _iters(size, base)
            data = os.urandom(size)
            puts = [_timed(lambda i: r.set(f"b-{i}", data), i) for i in range(n)]
            gets = [_timed(lambda i: r.get(f"b-{i}"), i) for i in range(n)]
            res[size] = _summ("redis_", size, puts, gets)
            r.flushall()
        r.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return note, res


# -- S3 through moto's server ---------------------------------------------------------
def _bench_s3(sizes: list[int], base: int) -> tuple[str, dict[int, dict[str, float]]]:
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        return f"absent: {exc}", {}
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    res: dict[int, dict[str, float]] = {}
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
        s3.create_bucket(Bucket="bench")
        for size in sizes:
            n = max(3, _iters(size, base) // 2)
            data = os.urandom(size)
            puts = [_timed(lambda i: s3.put_object(Bucket="bench", Key=f"b-{i}", Body=data), i) for i in range(n)]
            gets = [_timed(lambda i: s3.get_object(Bucket="bench", Key=f"b-{i}")["Body"].read(), i) for i in range(n)]
            res[size] = _summ("s3_", size, puts, gets)
            for i in range(n):
                s3.delete_object(Bucket="bench", Key=f"b-{i}")
        s3.close()
    finally:
        server.stop()
    return "moto ThreadedMotoServer on loopback", res


# -- raw socket -------------------------------------------------------------------
def _bench_raw(sizes: list[int], base: int) -> dict[int, dict[str, float]]:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    payload = os.urandom(max(sizes))

    def serve() -> None:
        conn, _ = ls.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                head = conn.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                (n,) = struct.unpack("!Q", head)
                conn.sendall(memoryview(payload)[:n])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    res: dict[int, dict[str, float]] = {}
    with socket.create_connection(ls.getsockname()) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for size in sizes:
            buf = bytearray(size)
            view = memoryview(buf)

            def once() -> None:
                c.sendall(struct.pack("!Q", size))
                got = 0
                while got < size:
                    got += c.recv_into(view[got:], size - got)

            once()
            times = [_timed(once) for _ in range(_iters(size, base))]
            res[size] = {"raw_p50_us": round(_pct(times, 0.5) * 1e6, 1),
                         "raw_mbps": round(size / statistics.median(times) / 1e6, 1)}
    ls.close()
    t.join(5)
    return res


# -- EC threshold -------------------------------------------------------------------
def _bench_ec(raw: dict[int, dict[str, float]], d: int, p: int) -> dict[str, dict[str, float]]:
    from pyeclib.ec_iface import ECDriver

    from sdk._erasure import Codec

    drv = ECDriver(k=d, m=p, ec_type="isa_l_rs_vand")
    mbps = max((v["raw_mbps"] for v in raw.values()), default=1000.0)
    out: dict[str, dict[str, float]] = {}
    for size in (16 * 1024, 65536, 256 * 1024, MiB, 4 * MiB):
        data = os.urandom(size)
        enc = min(_timed(drv.encode, data) for _ in range(5))
        codec = Codec(d, p, threshold=0, stripe_size=size)  # what a PUT runs: in place where it can (``_isal``)
        inplace = min(_timed(lambda: list(codec.stripe_pieces(data))) for _ in range(5))
        frags = drv.encode(data)
        dec = min(_timed(drv.decode, frags[p:]) for _ in range(5))
        out[str(size)] = {"encode_us": round(enc * 1e6, 1), "encode_inplace_us": round(inplace * 1e6, 1),
                          "decode_us": round(dec * 1e6, 1), "raw_xfer_us": round(size / (mbps * 1e6) * 1e6, 1)}
    return out


def _label(size: int) -> str:
    return f"{size // MiB}m" if size >= MiB and size % MiB == 0 else (
        f"{size // 1024}k" if size % 1024 == 0 else str(size))


def _bench_tls(args: argparse.Namespace, sizes: list[int], base: int) -> dict[str, Any]:
    """Plaintext, then TLS, in one run (see the module docstring)."""
    import tempfile

    from .certs_cmd import make_certs

    with tempfile.TemporaryDirectory(prefix="funcsion-bench-tls-") as tmp:
        certs = make_certs(tmp, ["127.0.0.1"])
        runs = {"plain": _bench_store(sizes, base, args.d, args.p),
                "tls": _bench_store(sizes, base, args.d, args.p, certs=certs)}
    return _compare(args, sizes, base, runs, "tls")


def _bench_durable(args: argparse.Namespace, sizes: list[int], base: int) -> dict[str, Any]:
    """Write-behind, then durable PUTs, in one run (see the module docstring)."""
    runs = {"plain": _bench_store(sizes, base, args.d, args.p),
            "durable": _bench_store(sizes, base, args.d, args.p, daemon={"durable_puts": True})}
    return _compare(args, sizes, base, runs, "durable")


def _compare(args: argparse.Namespace, sizes: list[int], base: int, runs: dict[str, dict[int, dict[str, float]]],
             mode: str) -> dict[str, Any]:
    """``runs["plain"]`` next to ``runs[mode]``: the document and table of ``--tls``/``--durable-puts``."""
    keys = ("put_p50_us", "get_p50_us", "put_mbps", "get_mbps", "put_cpu_us")
    ratio = f"{mode}_over_plain"
    doc: dict[str, Any] = {"plain": {}, mode: {}, ratio: {}, "sizes": {}, "code": f"{args.d}+{args.p}",
                           "iters": base}
    for size in sizes:
        doc["sizes"][str(size)] = {m: runs[m][size] for m in runs}
        for k in keys:
            op, _, what = k.partition("_")
            name = f"{op}_{_label(size)}_{what}"
            for m in runs:
                doc[m][name] = runs[m][size][k]
            if doc["plain"][name]:
                doc[ratio][name] = round(doc[mode][name] / doc["plain"][name], 3)
    rows = [["", *doc["plain"]]] + [[m, *map(str, doc[m].values())] for m in ("plain", mode)] + \
        [[f"{mode}/plain", *[str(doc[ratio].get(k, "-")) for k in doc["plain"]]]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("  ".join(x.rjust(w) for x, w in zip(r, widths)) + "\n")
    sys.stdout.write(f"code {doc['code']}, {base} iterations per size up to 1 MiB (fewer above); one loaded machine\n")
    return doc


def run(args: argparse.Namespace) -> int:
    if args.tls and args.durable_puts:
        raise SystemExit("funcsion bench store: --tls and --durable-puts each compare against plaintext "
                         "write-behind; give one of them")
    if args.tls and args.sizes == ",".join(map(str, DEFAULT_SIZES)):
        args.sizes = f"4096,{100 * MiB}"
    if args.durable_puts and args.sizes == ",".join(map(str, DEFAULT_SIZES)):
        args.sizes = f"4096,{MiB},{100 * MiB}"
    sizes = [int(s) for s in str(args.sizes).split(",") if s]
    base = 5 if args.quick else max(3, int(args.iters))
    if args.durable_puts:
        costs = _bench_durable(args, sizes, base)
        if args.json:
            sys.stdout.write(json.dumps(costs, separators=(",", ":")) + "\n")
        return 0
    if args.tls:
        costs = _bench_tls(args, sizes, base)
        if args.json:
            sys.stdout.write(json.dumps(costs, separators=(",", ":")) + "\n")
        return 0
    raw = _bench_raw(sizes, base)
    write_behind: dict[str, Any] = {}
    store = _bench_store(sizes, base, args.d, args.p, write_behind)
    redis_note, red = ("skipped (--no-redis)", {}) if args.no_redis else _bench_redis(sizes, base)
    s3_note, s3 = ("skipped (--no-s3)", {}) if args.no_s3 else _bench_s3(sizes, base)
    ec = _bench_ec(raw, args.d, args.p)
    doc: dict[str, Any] = {"sizes": {}, "ec": ec, "redis": redis_note, "s3": s3_note,
                           "code": f"{args.d}+{args.p}", "iters": base, "write_behind": write_behind}
    doc.update(_bench_small_behind_large(max(base, 20), args.d, args.p, args.large_bytes, args.large_send_mbps))
    for size in sizes:
        row: dict[str, float] = {}
        for part in (store, red, s3, raw):
            row.update(part.get(size, {}))
        row.update(_ratios(row))
        doc["sizes"][str(size)] = row
    _print_table(doc, sizes)
    if args.json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


_RATIOS = {"get_vs_redis": ("get_p50_us", "redis_get_p50_us"), "put_vs_redis": ("put_p50_us", "redis_put_p50_us"),
           "get_vs_raw": ("get_mbps", "raw_mbps"), "get_into_vs_raw": ("get_into_mbps", "raw_mbps"),
           "put_vs_raw": ("put_mbps", "raw_mbps")}


def _ratios(row: dict[str, float]) -> dict[str, float]:
    """The issue's ratios from one row: latency over Redis's, MB/s over the raw socket's."""
    return {k: round(row[a] / row[b], 3) for k, (a, b) in _RATIOS.items() if row.get(a) and row.get(b)}


def _fmt_size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // 1024} KiB"


def _print_table(doc: dict[str, Any], sizes: list[int]) -> None:
    cols = [("GET p50 us", "get_p50_us"), ("GET p99", "get_p99_us"), ("PUT p50", "put_p50_us"),
            ("PUT p99", "put_p99_us"), ("GET MB/s", "get_mbps"), ("into MB/s", "get_into_mbps"),
            ("PUT MB/s", "put_mbps"),
            ("redis GET p50", "redis_get_p50_us"), ("redis GET MB/s", "redis_get_mbps"),
            ("s3 GET p50", "s3_get_p50_us"), ("raw MB/s", "raw_mbps"), ("GET/redis", "get_vs_redis"),
            ("PUT/redis", "put_vs_redis"), ("into/raw", "get_into_vs_raw")]
    rows = [["size", *[c for c, _ in cols]]]
    for size in sizes:
        r = doc["sizes"][str(size)]
        rows.append([_fmt_size(size), *[str(r.get(k, "-")) for _, k in cols]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("  ".join(x.rjust(w) for x, w in zip(r, widths)) + "\n")
    sys.stdout.write(f"redis: {doc['redis']}; s3: {doc['s3']}; code {doc['code']}\n")
    sys.stdout.write("EC cost (us) vs raw transfer: " + ", ".join(
        f"{_fmt_size(int(k))}: enc {v['encode_us']} in place {v['encode_inplace_us']} "
        f"dec {v['decode_us']} xfer {v['raw_xfer_us']}"
        for k, v in doc["ec"].items()) + "\n")
    sbl = doc["small_behind_large"]
    sys.stdout.write(f"4 KiB GET p99 (us) on a function idle {doc['small_idle_p99_us']}, while it sends "
                     f"{_fmt_size(sbl['large_bytes'])} {doc['small_behind_large_p99_us']} "
                     f"({doc['small_behind_large_ratio']}x; functions send at "
                     f"{sbl['function_send_mbps'] or 'unlimited'} MB/s, {sbl['large_gets']} large GETs)\n")
