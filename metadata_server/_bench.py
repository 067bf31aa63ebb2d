"""The metadata benchmark behind ``funcsion bench metadata``.

- RPC: a real server process (``funcsion serve metadata`` with its journal),
  clients in separate processes (so they do not share the server's GIL), each
  with one connection looping ``get`` for ``seconds``; 1, 4 and 16 clients.
  ``single_op_rps`` is the best of the three; ``p50_us``/``p99_us`` are of the
  16-client level (1-client values are reported too).
- Batched: ``get_batch`` of ``batch`` objects per RPC from 4 client processes;
  ops are objects.
- Core: ``MetadataState.handle`` alone, no RPC: recording a first read, and
  committing a 10-record commit buffer.
- Memory: tracemalloc bytes of core state per live object (record, placement,
  dict slots), over 20,000 objects.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from ._events import BeginPut, Commit, FinishPut, Get, RegisterCapacity, RegisterWorkflow, StartRun
from ._state import MetadataState
from ._tokens import token_digest

__all__ = ["wide_wds", "core_costs", "bytes_per_object", "rpc_bench"]

ADMIN = "bench-admin"


def wide_wds(n_objects: int, n_readers: int = 1, name: str = "bench") -> str:
    """One writer ``w`` with ``n_objects`` outputs, read by ``n_readers`` functions without outputs."""
    outs = [f"o{i:06d}" for i in range(n_objects)]
    readers = [{"start": False, "name": f"r{j:05d}", "input": outs, "output": [], "next": []}
               for j in range(n_readers)]
    doc = {"app": name, "workflow_id": 1, "category": "bench", "spec": {
        "write": {"stage_id": 1, "functions": [
            {"start": True, "name": "w", "input": ["in"], "output": outs, "next": [r["name"] for r in readers]}]},
        "read": {"stage_id": 2, "functions": readers}}}
    return json.dumps(doc)


def _state_with_run(n_objects: int, n_readers: int, size: int = 100) -> tuple[MetadataState, str]:
    st = MetadataState()
    st.handle(RegisterWorkflow(0.0, "b", wide_wds(n_objects, n_readers), {}, "bench"))
    st.handle(RegisterCapacity(0.0, "b", "s0", 1 << 16))
    st.handle(StartRun(0.0, "b", "bench/1", token_digest("tok"), "funcstore", 1e9))
    for i in range(n_objects):
        st.handle(BeginPut(0.0, "b", "r-1", "w", f"o{i:06d}", size, "c", False))
        st.handle(FinishPut(0.0, "b", "r-1", "w", f"o{i:06d}"))
    return st, "r-1"


def core_costs(n_reads: int = 20_000, n_commits: int = 2_000) -> dict[str, float]:
    st, run = _state_with_run(n_reads, 1)
    events = [Get(1.0, "b", run, "r00000", f"o{i:06d}") for i in range(n_reads)]
    t = time.perf_counter()
    for e in events:
        st.handle(e)
    record = (time.perf_counter() - t) / n_reads * 1e6
    st, run = _state_with_run(10, n_commits)
    for j in range(n_commits):
        for i in range(10):
            st.handle(Get(1.0, "b", run, f"r{j:05d}", f"o{i:06d}"))
    commits = [Commit(2.0, "b", run, f"r{j:05d}") for j in range(n_commits)]
    t = time.perf_counter()
    for c in commits:
        st.handle(c)
    commit10 = (time.perf_counter() - t) / n_commits * 1e6
    st.validate_state()
    return {"record_read_us": record, "commit10_us": commit10}


def bytes_per_object(n: int = 20_000) -> float:
    st, run = _state_with_run(1, 1)
    st.handle(RegisterWorkflow(0.0, "b", wide_wds(n, 1, "mem"), {}, "mem"))
    st.handle(StartRun(0.0, "b", "mem/1", token_digest("tok2"), "funcstore", 1e9))
    names = [f"o{i:06d}" for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for o in names:
        st.handle(BeginPut(0.0, "b", "r-2", "w", o, 100, "c", False))
        st.handle(FinishPut(0.0, "b", "r-2", "w", o))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return grown / n


# -- RPC ------------------------------------------------------------------------------
def _client(port: int, token: str, run: str, fn: str, objs: list[str], batch: bool, start_at: float,
            seconds: float, q: Any) -> None:
    from funcsion_rpc import MetadataClient
    c = MetadataClient(port=port, token=token)
    c.health()
    lat: list[float] = []
    n = 0
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    pc = time.perf_counter
    i = 0
    while True:
        t = pc()
        if batch:
            c.get_batch(run, fn, objs)
        else:
            c.get(run, fn, objs[i % len(objs)])
        t2 = pc()
        i += 1
        n += len(objs) if batch else 1
        if len(lat) < 200_000:
            lat.append((t2 - t) * 1e6)
        if t2 > end or time.time() > end:
            break
    c.close()
    q.put((n, lat))


def _level(port: int, token: str, run: str, clients: int, seconds: float, objs: list[str], batch: bool
           ) -> dict[str, float]:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 0.3 + 0.02 * clients
    procs = [ctx.Process(target=_client, args=(port, token, run, f"r{k % 16:05d}", objs, batch, start_at,
                                               seconds, q)) for k in range(clients)]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(10)
    total = sum(n for n, _ in results)
    lat = sorted(x for _, ls in results for x in ls)
    return {"clients": clients, "ops_per_s": total / seconds,
            "p50_us": lat[len(lat) // 2] if lat else 0.0,
            "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0,
            "mean_us": statistics.fmean(lat) if lat else 0.0}


def rpc_bench(seconds: float = 2.0, batch: int = 1000, levels: tuple[int, ...] = (1, 4, 16),
              journal: bool = True) -> dict[str, Any]:
    from funcsion_rpc import MetadataClient, PutRequest
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "sdk.cli", "serve", "metadata", "--port", "0", "--admin-token", ADMIN]
        if journal:
            cmd += ["--journal", str(Path(tmp) / "bench.db")]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
            with MetadataClient(port=port, admin_token=ADMIN) as admin:
                admin.register_capacity("s0", 1 << 14)
                key = admin.register_workflow(wide_wds(batch, 16)).key
                info = admin.start_run(key)
                with admin.for_run(info.token) as c:
                    c.begin_put(info.run_id, "", "in", 10, "c")
                    c.finish_put(info.run_id, "", "in")
                    reqs = [PutRequest(f"o{i:06d}", 100, "c", False) for i in range(batch)]
                    c.begin_put_batch(info.run_id, "w", reqs)
                    c.finish_put_batch(info.run_id, "w", [r.object_name for r in reqs])
                objs = [f"o{i:06d}" for i in range(batch)]
                single = [_level(port, info.token, info.run_id, n, seconds, objs, False) for n in levels]
                batched = _level(port, info.token, info.run_id, 4, seconds, objs, True)
        finally:
            proc.terminate()
            proc.wait(20)
            if proc.stdout is not None:
                proc.stdout.close()
    best = max(single, key=lambda r: r["ops_per_s"])
    return {"single": single, "batched": batched, "batch": batch, "journal": journal,
            "single_op_rps": best["ops_per_s"], "batched_ops_per_s": batched["ops_per_s"],
            "p50_us": single[-1]["p50_us"], "p99_us": single[-1]["p99_us"]}
