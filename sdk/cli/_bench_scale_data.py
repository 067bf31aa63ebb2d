"""The data path of ``funcsion bench scale``: N standalone daemon processes
(``funcsion serve daemon``; each places chunks itself on its own storage functions, a
group of d+p on the local platform), driven by C load-generator processes.

Each load generator has one thread per daemon, so every daemon always has C requests
to serve whatever the keys hash to; a thread's keys are the ones the rendezvous hash
(``funcsion_rpc.routing.owner`` over the daemon list) gives its daemon: names are
tried in order until one routes there, as a client spreading its keys would find.
Every configuration stores the same objects (the same bytes from the same seed, the
same count per daemon: weak scaling). Phases, each started by all processes at a
barrier: PUT ``k`` large objects per thread; GET them round and round for ``seconds``
(into a reused buffer; the first pass checked against what was PUT); PUT 4 KiB
objects for ``seconds``; GET those for ``seconds``. Before each GET phase the daemons'
write-behind uploads are waited for, so GETs read function memory, not the buffer.

With ``host_mbps`` each daemon process holds its GETs and PUTs to a modelled NIC
(``--host-bandwidth-mbps``, ``storage_functions.throttle.HostLink``).

Not here: the metadata path (``_bench_scale_meta``), the CLI (``bench_scale``).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from funcsion_rpc.routing import owner

from ._bench_scale_procs import PhaseResult, Served, aggregate, self_cpu_s, serve, stop, tree_cpu_s

__all__ = ["DataShape", "PHASES", "run_daemons", "routed_keys"]

PHASES = ("put_large", "get_large", "put_small", "get_small")
TOKEN = "bench-scale-token"


@dataclass(frozen=True, slots=True)
class DataShape:
    """What every configuration runs: ``clients`` load generators, ``k`` objects of
    ``large`` bytes per (client, daemon), 4 KiB (``small``) objects, ``seconds`` per
    timed phase, code ``d``+``p``."""

    clients: int = 4
    k: int = 1
    large: int = 100 << 20
    small: int = 4096
    seconds: float = 3.0
    d: int = 10
    p: int = 2
    max_small: int = 20_000


def routed_keys(prefix: str, daemon: int, daemons: int, count: int) -> list[str]:
    """The first ``count`` names ``prefix-T`` (T = 0, 1, ...) that route to ``daemon``."""
    out: list[str] = []
    t = 0
    while len(out) < count:
        name = f"{prefix}-{t}"
        if owner(name, daemons) == daemon:
            out.append(name)
        t += 1
    return out


def _thread_phase(phase: str, client: Any, keys: list[str], small_keys: list[str], written: list[int],
                  payload: bytes, tiny: bytes, buf: bytearray, seconds: float, out: list[tuple[int, int, float, float]]
                  ) -> None:
    units = nbytes = 0
    t0 = time.monotonic()
    end = t0 + seconds
    if phase == "put_large":
        for key in keys:
            client.put(key, payload)
            units, nbytes = units + 1, nbytes + len(payload)
    elif phase == "get_large":
        first = True
        while first or time.monotonic() < end:
            for key in keys:
                n = client.get_into(key, buf)
                if first and (n != len(payload) or buf != payload):
                    raise RuntimeError(f"bench scale: GET {key!r} returned other bytes than its PUT")
                units, nbytes = units + 1, nbytes + n
            first = False
    elif phase == "put_small":
        while units < len(small_keys) and (units == 0 or time.monotonic() < end):
            client.put(small_keys[units], tiny)
            units, nbytes = units + 1, nbytes + len(tiny)
        written[0] = units
    else:  # get_small
        n_written = max(1, written[0])
        while units == 0 or time.monotonic() < end:
            key = small_keys[units % n_written]
            got = client.get(key)
            if units < n_written and got != tiny:
                raise RuntimeError(f"bench scale: GET {key!r} returned other bytes than its PUT")
            units, nbytes = units + 1, nbytes + len(got)
    out.append((units, nbytes, t0, time.monotonic()))


def _worker(c: int, addrs: list[tuple[str, int]], shape: DataShape, barrier: Any, q: Any) -> None:
    """One load generator (a forked process): a thread per daemon, phase by phase."""
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient

    try:
        n = len(addrs)
        rng = random.Random(c)  # the same bytes in every configuration
        payload, tiny = rng.randbytes(shape.large), rng.randbytes(shape.small)
        keys = [routed_keys(f"scale-c{c}-L", i, n, shape.k) for i in range(n)]
        small = [routed_keys(f"scale-c{c}-s", i, n, shape.max_small) for i in range(n)]
        written = [[0] for _ in range(n)]
        clients = [StoreClient(a, TOKEN, codec=Codec(shape.d, shape.p)) for a in addrs]
        bufs = [bytearray(shape.large) for _ in range(n)]
        for cl in clients:
            cl.stats()  # connected before the clock starts
        for phase in PHASES:
            barrier.wait()
            cpu0 = self_cpu_s()
            out: list[tuple[int, int, float, float]] = []
            threads = [threading.Thread(target=_thread_phase, args=(phase, clients[i], keys[i], small[i], written[i],
                                                                    payload, tiny, bufs[i], shape.seconds, out))
                       for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if len(out) != n:
                raise RuntimeError(f"bench scale: a load-generator thread failed in phase {phase}")
            q.put((phase, PhaseResult(sum(o[0] for o in out), sum(o[1] for o in out), min(o[2] for o in out),
                                      max(o[3] for o in out), self_cpu_s() - cpu0)))
            barrier.wait()
        for cl in clients:
            cl.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which stops the run
        q.put(("error", f"load generator {c}: {type(exc).__name__}: {exc}"))
        barrier.abort()


def _wait_uploads(addrs: list[tuple[str, int]], timeout_s: float = 300.0) -> None:
    """Until no daemon has a version waiting for its COS upload."""
    from sdk._store_client import StoreClient

    deadline = time.monotonic() + timeout_s
    for a in addrs:
        with StoreClient(a, TOKEN) as c:
            while c.stats().get("pending_uploads", 0) and time.monotonic() < deadline:
                time.sleep(0.05)


def run_daemons(n: int, shape: DataShape, host_mbps: float) -> dict[str, Any]:
    """One configuration: ``n`` daemon processes (each capped at ``host_mbps``, 0: not),
    ``shape.clients`` load generators; per phase the aggregate figures and CPU."""
    group = shape.d + shape.p
    per_function_mib = shape.clients * shape.k * shape.large * group // shape.d // group >> 20
    memory_mb = max(1024, 2 * per_function_mib + 512)
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-scale-") as tmp:
        daemons: list[Served] = []
        workers: list[Any] = []
        try:
            daemons = serve([(["serve", "daemon", "--port", "0", "--token", TOKEN, "--root", f"{tmp}/d{i}",
                               "--max-functions", str(group), "--group-size", str(group),
                               "--function-memory-mb", str(memory_mb), "--idle-s", "120",
                               "--host-bandwidth-mbps", str(host_mbps)], f"daemon {i}") for i in range(n)])
            addrs = []
            for s in daemons:
                host, _, port = str(s.info["address"]).rpartition(":")
                addrs.append((host, int(port)))
            _warm(addrs, shape)
            barrier = ctx.Barrier(shape.clients + 1, timeout=600)
            q = ctx.Queue()
            workers = [ctx.Process(target=_worker, args=(c, addrs, shape, barrier, q), daemon=True)
                       for c in range(shape.clients)]
            for w in workers:
                w.start()
            pids = [s.proc.pid for s in daemons]
            result: dict[str, Any] = {}
            waited = _link_waited(addrs)
            for phase in PHASES:
                if phase.startswith("get"):
                    _wait_uploads(addrs)
                try:
                    barrier.wait()
                    cpu0, t0 = tree_cpu_s(pids), time.monotonic()
                    barrier.wait()
                except threading.BrokenBarrierError:
                    raise RuntimeError(_errors(q) or f"bench scale: a load generator stopped in phase {phase}") from None
                cpu1, t1 = tree_cpu_s(pids), time.monotonic()
                got = [q.get(timeout=60) for _ in workers]
                errors = [g[1] for g in got if g[0] == "error"]
                if errors:
                    raise RuntimeError("; ".join(map(str, errors)))
                agg = aggregate([g[1] for g in got])
                agg["daemon_cpu_cores"] = (cpu1 - cpu0) / max(t1 - t0, 1e-9)
                before, waited = waited, _link_waited(addrs)
                # requests held by the modelled NICs, per daemon and second: near 0, the cap did not bind
                agg["link_held_share"] = (waited - before) / n / max(agg["seconds"], 1e-9)
                result[phase] = agg
            for w in workers:
                w.join(60)
            return result
        finally:
            for w in workers:
                if w.is_alive():
                    w.terminate()
                    w.join(10)
            stop(daemons)


def _link_waited(addrs: list[tuple[str, int]]) -> float:
    """Seconds the daemons' modelled NICs have held requests so far, all daemons together."""
    from sdk._store_client import StoreClient

    total = 0.0
    for a in addrs:
        with StoreClient(a, TOKEN) as c:
            total += float(c.stats().get("host_link", {}).get("waited_s", 0.0))
    return total


def _errors(q: Any) -> str:
    """What the load generators reported before they stopped."""
    out: list[str] = []
    while True:
        try:
            got = q.get(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: nothing more
            return "; ".join(out)
        if got[0] == "error":
            out.append(str(got[1]))


def _warm(addrs: list[tuple[str, int]], shape: DataShape) -> None:
    """Start every daemon's functions (cold starts are not what is measured)."""
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient

    data = random.Random(-1).randbytes(max(shape.d * 65536, 1 << 20) + 1)
    for a in addrs:
        with StoreClient(a, TOKEN, codec=Codec(shape.d, shape.p)) as c:
            c.put("scale-warm", data)
            if c.get("scale-warm") != data:
                raise RuntimeError(f"bench scale: the daemon at {a[0]}:{a[1]} returned other bytes than its PUT")
            c.free(["scale-warm"])
