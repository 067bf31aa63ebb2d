"""The metadata path of ``funcsion bench scale``: M metadata shard processes
(``funcsion serve metadata --shard I/M``, each with its journal), driven by
``clients_per_shard`` x M load-generator processes.

Every shard knows the workflow (registered with each) and owns storage capacity
(functions whose ``routing.shard_of_function`` names it). Each load generator has its
own run, started at the shard ``routing.shard_of_run`` gives its id (a shard mints
only ids it owns), with ``objects`` objects written; it routes every call by that
run id to the shard's address, as ``sdk.Client`` does, and calls ``get`` on its
objects round and round for ``seconds`` after a barrier (a reader's repeat reads: the
metadata call every task's GET makes). Weak scaling: the same runs and objects per
shard in every configuration.

With ``host_mbps`` each shard process holds each round of replies to a modelled NIC
(``--host-bandwidth-mbps``, ``storage_functions.throttle.HostLink``).

Not here: the data path (``_bench_scale_data``), the CLI (``bench_scale``).
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import threading
import time
from typing import Any

from funcsion_rpc.routing import owner, shard_of_run

from ._bench_scale_procs import PhaseResult, Served, aggregate, end_workers, self_cpu_s, serve, tree_cpu_s

__all__ = ["run_shards"]

ADMIN = "bench-scale-admin"
READER = "r00000"


def _worker(ports: list[int], run_id: str, token: str, objs: list[str], seconds: float, barrier: Any, q: Any) -> None:
    """One load generator (a forked process): ``get`` by ``run_id``'s shard."""
    import gc
    gc.freeze()  # the bench's inherited heap stays out of this client's collections
    from funcsion_rpc import MetadataClient

    try:
        c = MetadataClient(port=ports[shard_of_run(run_id, len(ports))], token=token)
        c.health()
        barrier.wait()
        cpu0 = self_cpu_s()
        t0 = time.monotonic()
        end, n, k = t0 + seconds, 0, len(objs)
        while n < k or time.monotonic() < end:
            c.get(run_id, READER, objs[n % k])
            n += 1
        t1 = time.monotonic()
        q.put(("ok", PhaseResult(n, 0, t0, t1, self_cpu_s() - cpu0)))
        barrier.wait()
        c.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which stops the run
        q.put(("error", f"metadata load generator: {type(exc).__name__}: {exc}"))
        barrier.abort()


def _capacity_name(shard: int, shards: int) -> str:
    """A storage function name whose capacity ``shard`` owns (no ``-N`` suffix: by its name)."""
    j = 0
    while owner(f"function:bench{j}", shards) != shard:
        j += 1
    return f"bench{j}"


def _setup(port: int, shard: int, shards: int, runs: int, objs: list[str]) -> list[tuple[str, str]]:
    """Register the workflow and capacity with one shard and start ``runs`` runs on it,
    each with ``objs`` written: their (run id, token)."""
    from funcsion_rpc import MetadataClient, PutRequest
    from metadata_server._bench import wide_wds

    out = []
    with MetadataClient(port=port, admin_token=ADMIN) as admin:
        admin.register_capacity(_capacity_name(shard, shards), 1 << 14)
        key = admin.register_workflow(wide_wds(len(objs), 1)).key
        for _ in range(runs):
            info = admin.start_run(key)
            if shard_of_run(info.run_id, shards) != shard:
                raise RuntimeError(f"bench scale: shard {shard} of {shards} minted run {info.run_id}, which routes "
                                   f"to shard {shard_of_run(info.run_id, shards)}")
            with admin.for_run(info.token) as c:
                c.begin_put(info.run_id, "", "in", 10, "c")
                c.finish_put(info.run_id, "", "in")
                c.begin_put_batch(info.run_id, "w", [PutRequest(o, 100, "c", False) for o in objs])
                c.finish_put_batch(info.run_id, "w", objs)
            out.append((info.run_id, info.token))
    return out


def run_shards(m: int, clients_per_shard: int, objects: int, seconds: float, host_mbps: float) -> dict[str, Any]:
    """One configuration: ``m`` shard processes (each capped at ``host_mbps``, 0: not);
    the aggregate ``get`` calls per second, the clients' and the shards' CPU."""
    objs = [f"o{i:06d}" for i in range(objects)]
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="funcsion-bench-scale-md-") as tmp:
        shards: list[Served] = []
        workers: list[Any] = []
        try:
            shards = serve([(["serve", "metadata", "--port", "0", "--admin-token", ADMIN,
                              "--journal", f"{tmp}/shard{i}.journal", "--shard", f"{i}/{m}",
                              "--host-bandwidth-mbps", str(host_mbps)], f"metadata shard {i}/{m}")
                            for i in range(m)])
            ports = [int(str(s.info["address"]).rpartition(":")[2]) for s in shards]
            runs = [r for i, port in enumerate(ports) for r in _setup(port, i, m, clients_per_shard, objs)]
            barrier = ctx.Barrier(len(runs) + 1, timeout=300)
            q = ctx.Queue()
            workers = [ctx.Process(target=_worker, args=(ports, run_id, token, objs, seconds, barrier, q), daemon=True)
                       for run_id, token in runs]
            for w in workers:
                w.start()
            pids = [s.proc.pid for s in shards]
            try:
                barrier.wait()
                cpu0, t0 = tree_cpu_s(pids), time.monotonic()
                barrier.wait()
            except threading.BrokenBarrierError:
                raise RuntimeError("bench scale: a metadata load generator stopped: " + _errors(q)) from None
            cpu1, t1 = tree_cpu_s(pids), time.monotonic()
            got = [q.get(timeout=60) for _ in workers]
            errors = [str(g[1]) for g in got if g[0] == "error"]
            if errors:
                raise RuntimeError("; ".join(errors))
            agg = aggregate([g[1] for g in got])
            agg["server_cpu_cores"] = (cpu1 - cpu0) / max(t1 - t0, 1e-9)
            agg["clients"] = float(len(workers))
            for w in workers:
                w.join(60)
            return agg
        finally:
            end_workers(workers, shards)


def _errors(q: Any) -> str:
    out: list[str] = []
    while True:
        try:
            got = q.get(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty: nothing more
            return "; ".join(out) or "no reason given"
        if got[0] == "error":
            out.append(str(got[1]))
