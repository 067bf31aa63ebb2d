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

from ._bench_scale_procs import PhaseResult, Served, aggregate, end_workers, self_cpu_s, serve, tree_cpu_s

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


#: a run's plan: (phase, index of the daemon set it drives), in order
Plan = list[tuple[str, int]]


def _worker(c: int, sets: list[list[tuple[str, int]]], plan: Plan, shape: DataShape, barrier: Any, q: Any) -> None:
    """One load generator (a forked process): for each step of ``plan``, a thread per
    daemon of the step's set."""
    from sdk._erasure import Codec
    from sdk._store_client import StoreClient

    try:
        rng = random.Random(c)  # the same bytes in every configuration
        payload, tiny = rng.randbytes(shape.large), rng.randbytes(shape.small)
        smalls = any(phase.endswith("_small") for phase, _ in plan)
        keys = [[routed_keys(f"scale-c{c}-L", i, len(a), shape.k) for i in range(len(a))] for a in sets]
        small = [[routed_keys(f"scale-c{c}-s", i, len(a), shape.max_small if smalls else 0) for i in range(len(a))]
                 for a in sets]
        written = [[[0] for _ in a] for a in sets]
        clients = [[StoreClient(x, TOKEN, codec=Codec(shape.d, shape.p)) for x in a] for a in sets]
        bufs = [[bytearray(shape.large) for _ in a] for a in sets]
        for cl in (cl for row in clients for cl in row):
            cl.stats()  # connected before the clock starts
        for phase, k in plan:
            n = len(sets[k])
            barrier.wait()
            cpu0 = self_cpu_s()
            out: list[tuple[int, int, float, float]] = []
            threads = [threading.Thread(target=_thread_phase, args=(
                phase, clients[k][i], keys[k][i], small[k][i], written[k][i], payload, tiny, bufs[k][i],
                shape.seconds, out)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if len(out) != n:
                raise RuntimeError(f"bench scale: a load-generator thread failed in phase {phase}")
            q.put((phase, PhaseResult(sum(o[0] for o in out), sum(o[1] for o in out), min(o[2] for o in out),
                                      max(o[3] for o in out), self_cpu_s() - cpu0)))
            barrier.wait()
        for cl in (cl for row in clients for cl in row):
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
    return {phase: agg for phase, _, agg in _run([n], [(phase, 0) for phase in PHASES], shape, host_mbps)}


def paired_gets(shape: DataShape, rounds: int) -> list[float]:
    """The 100 MiB GET MiB/s of 2 daemon processes over 1's, no cap, in ``rounds`` rounds that
    alternate the two sets (started together, the same objects PUT to both), so that load
    from elsewhere on the machine hits both alike: one ratio per round."""
    plan: Plan = [("put_large", 0), ("put_large", 1)] + [("get_large", k) for _ in range(rounds) for k in (0, 1)]
    got = [agg["mib_per_s"] for phase, _, agg in _run([1, 2], plan, shape, 0.0) if phase == "get_large"]
    return [two / one for one, two in zip(got[0::2], got[1::2]) if one > 0]


def _run(sizes: list[int], plan: Plan, shape: DataShape, host_mbps: float) -> list[tuple[str, int, dict[str, Any]]]:
    """Start a set of daemon processes per entry of ``sizes`` (each capped at ``host_mbps``, 0:
    not) and ``shape.clients`` load generators, and carry out ``plan``: per step the phase,
    its set and the aggregate figures and CPU."""
    group = shape.d + shape.p
    per_function_mib = shape.clients * shape.k * shape.large * group // shape.d // group >> 20
    memory_mb = max(1024, 2 * per_function_mib + 512)
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-scale-") as tmp:
        daemons: list[Served] = []
        workers: list[Any] = []
        try:
            daemons = serve([(["serve", "daemon", "--port", "0", "--token", TOKEN, "--root", f"{tmp}/s{k}d{i}",
                               "--max-functions", str(group), "--group-size", str(group),
                               "--function-memory-mb", str(memory_mb), "--idle-s", "120",
                               "--host-bandwidth-mbps", str(host_mbps)], f"daemon {i} of {n}")
                             for k, n in enumerate(sizes) for i in range(n)])
            addrs = []
            for s in daemons:
                host, _, port = str(s.info["address"]).rpartition(":")
                addrs.append((host, int(port)))
            bounds = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
            sets = [addrs[bounds[k]:bounds[k + 1]] for k in range(len(sizes))]
            pids = [[s.proc.pid for s in daemons[bounds[k]:bounds[k + 1]]] for k in range(len(sizes))]
            _warm(addrs, shape)
            barrier = ctx.Barrier(shape.clients + 1, timeout=600)
            q = ctx.Queue()
            workers = [ctx.Process(target=_worker, args=(c, sets, plan, shape, barrier, q), daemon=True)
                       for c in range(shape.clients)]
            for w in workers:
                w.start()
            result: list[tuple[str, int, dict[str, Any]]] = []
            for phase, k in plan:
                if phase.startswith("get"):
                    _wait_uploads(sets[k])
                waited = _link_waited(sets[k])
                try:
                    barrier.wait()
                    cpu0, t0 = tree_cpu_s(pids[k]), time.monotonic()
                    barrier.wait()
                except threading.BrokenBarrierError:
                    raise RuntimeError(_errors(q) or f"bench scale: a load generator stopped in phase {phase}") from None
                cpu1, t1 = tree_cpu_s(pids[k]), time.monotonic()
                got = [q.get(timeout=60) for _ in workers]
                errors = [g[1] for g in got if g[0] == "error"]
                if errors:
                    raise RuntimeError("; ".join(map(str, errors)))
                agg = aggregate([g[1] for g in got])
                agg["daemon_cpu_cores"] = (cpu1 - cpu0) / max(t1 - t0, 1e-9)
                # requests held by the modelled NICs, per daemon and second: near 0, the cap did not bind
                agg["link_held_share"] = (_link_waited(sets[k]) - waited) / len(sets[k]) / max(agg["seconds"], 1e-9)
                result.append((phase, k, agg))
            for w in workers:
                w.join(60)
            return result
        finally:
            end_workers(workers, daemons)


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
