"""The metadata benchmark behind ``funcsion bench metadata``.

- RPC: a real server process (``funcsion serve metadata`` with its journal),
  clients in separate processes (so they do not share the server's GIL), each
  with one connection looping ``get`` for ``seconds``; 1, 4 and 16 clients.
  After its first pass over the objects a client's gets repeat reads (lease-only
  touches, not journaled one by one). ``single_op_rps`` is the best of the
  levels; ``p50_us``/``p99_us`` are of the largest level.
- One client against its peer, in ``rounds`` alternating rounds of
  ``seconds / 2`` each (so load from elsewhere on the machine hits both alike),
  medians over the rounds: ``thrift_baseline_rps`` (a bare Thrift server with a
  trivial handler, ``_bench_baseline``), ``one_client_rps`` (repeat reads as
  above) and ``journaled_one_client_rps`` (every ``get`` a reader's first read
  of an object: recorded and journaled); ``one_client_vs_thrift`` and
  ``journaled_vs_thrift`` are medians of the per-round ratios.
- Batched: ``get_batch`` of ``batch`` objects per RPC from 4 client processes;
  ops are objects. ``batched_journaled_ops_per_s``: every reader's first
  ``get_batch`` of a fresh run (each read recorded and journaled).
  ``batched_read_ops_per_s``: the same repeat reads by ``read_batch``, the call a
  task's ``get_many`` makes (a byte of tier and of flags per object, no placements).
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

READERS = 16

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
def _client(port: int, token: str, run: str, work: list[tuple[str, list[str]]], batch: bool | str, cycle: bool,
            start_at: float, seconds: float, q: Any) -> None:
    """Call ``get`` (or ``get_batch``; ``batch="read"``: ``read_batch``) for each (function,
    objects) of ``work``: one get per object, or one batch per entry; again from the start
    while ``cycle`` and time is left.
    A forked client inherits the bench's heap; it is frozen out of the cyclic GC, so the
    client pays for its own objects only (as a task's client would)."""
    import gc
    gc.freeze()
    from funcsion_rpc import MetadataClient
    c = MetadataClient(port=port, token=token)
    c.health()
    lat: list[float] = []
    n = 0
    while time.time() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    pc = time.perf_counter
    t0 = pc() - max(0.0, time.time() - start_at)
    calls = ([(fn, objs) for fn, objs in work] if batch
             else [(fn, o) for fn, objs in work for o in objs])
    i, t2 = 0, pc()
    while i < len(calls) or cycle:
        fn, what = calls[i % len(calls)]
        t = pc()
        if batch == "read":
            c.read_batch(run, fn, what)
        elif batch:
            c.get_batch(run, fn, what)
        else:
            c.get(run, fn, what)  # type: ignore[arg-type]
        t2 = pc()
        i += 1
        n += len(what) if batch else 1
        if len(lat) < 200_000:
            lat.append((t2 - t) * 1e6)
        if time.time() > end:
            break
    c.close()
    q.put((n, lat, t2 - t0))


def _level(port: int, token: str, run: str, works: list[list[tuple[str, list[str]]]], batch: bool | str, cycle: bool,
           seconds: float) -> dict[str, float]:
    """One client process per entry of ``works``; ops/s over the slowest client's time."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 0.3 + 0.02 * len(works)
    procs = [ctx.Process(target=_client, args=(port, token, run, w, batch, cycle, start_at, seconds, q))
             for w in works]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(10)
    total = sum(n for n, _, _ in results)
    elapsed = max(e for _, _, e in results)
    lat = sorted(x for _, ls, _ in results for x in ls)
    return {"clients": len(works), "ops_per_s": total / elapsed,
            "p50_us": lat[len(lat) // 2] if lat else 0.0,
            "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0,
            "mean_us": statistics.fmean(lat) if lat else 0.0}


def _fresh_run(admin: Any, key: str, objs: list[str]) -> Any:
    """A new run of the bench workflow with every object written."""
    from funcsion_rpc import PutRequest
    info = admin.start_run(key)
    with admin.for_run(info.token) as c:
        c.begin_put(info.run_id, "", "in", 10, "c")
        c.finish_put(info.run_id, "", "in")
        c.begin_put_batch(info.run_id, "w", [PutRequest(o, 100, "c", False) for o in objs])
        c.finish_put_batch(info.run_id, "w", objs)
    return info


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def rpc_bench(seconds: float = 2.0, batch: int = 1000, levels: tuple[int, ...] = (1, 4, 16),
              journal: bool = True, rounds: int = 3) -> dict[str, Any]:
    from funcsion_rpc import MetadataClient

    from ._bench_baseline import start_baseline
    objs = [f"o{i:06d}" for i in range(batch)]
    fns = [f"r{j:05d}" for j in range(READERS)]
    per = max(1, READERS // rounds)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "sdk.cli", "serve", "metadata", "--port", "0", "--admin-token", ADMIN]
        if journal:
            cmd += ["--journal", str(Path(tmp) / "bench.journal")]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        base_proc, base_port = start_baseline()
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
            with MetadataClient(port=port, admin_token=ADMIN) as admin:
                admin.register_capacity("s0", 1 << 14)
                key = admin.register_workflow(wide_wds(batch, READERS)).key
                a, b, c = (_fresh_run(admin, key, objs) for _ in range(3))
            # the peer and the 1-client loops alternate, so load from elsewhere hits both alike
            paired: list[dict[str, dict[str, float]]] = []
            for k in range(rounds):
                paired.append({
                    "baseline": _level(base_port, "", "r-0", [[(fns[0], objs)]], False, True, seconds / 2),
                    "one": _level(port, a.token, a.run_id, [[(fns[0], objs)]], False, True, seconds / 2),
                    "journaled": _level(port, b.token, b.run_id, [[(fn, objs) for fn in fns[k * per:(k + 1) * per]]],
                                        False, False, seconds / 2)})
            single = [_level(port, a.token, a.run_id, [[(fns[j % READERS], objs)] for j in range(n)], False, True,
                             seconds) for n in levels]
            batched = _level(port, a.token, a.run_id, [[(fns[j], objs)] for j in range(4)], True, True, seconds)
            read = _level(port, a.token, a.run_id, [[(fns[j], objs)] for j in range(4)], "read", True, seconds)
            first_batches = _level(port, c.token, c.run_id, [[(fn, objs) for fn in fns[j::4]] for j in range(4)],
                                   True, False, seconds)
        finally:
            base_proc.terminate()
            base_proc.join(10)
            proc.terminate()
            proc.wait(20)
            if proc.stdout is not None:
                proc.stdout.close()

    def med(kind: str, key: str = "ops_per_s") -> float:
        return _median([r[kind][key] for r in paired])

    def ratio(kind: str) -> float:
        return _median([r[kind]["ops_per_s"] / r["baseline"]["ops_per_s"] for r in paired
                        if r["baseline"]["ops_per_s"]])

    best = max(single, key=lambda r: r["ops_per_s"])
    return {"single": single, "batched": batched, "batch": batch, "journal": journal, "rounds": paired,
            "batched_journaled": first_batches, "batched_read": read,
            "batched_read_ops_per_s": read["ops_per_s"],
            "single_op_rps": best["ops_per_s"], "batched_ops_per_s": batched["ops_per_s"],
            "p50_us": single[-1]["p50_us"], "p99_us": single[-1]["p99_us"],
            "thrift_baseline_rps": med("baseline"), "thrift_baseline_p50_us": med("baseline", "p50_us"),
            "one_client_rps": med("one"), "one_client_p50_us": med("one", "p50_us"),
            "journaled_one_client_rps": med("journaled"), "journaled_one_client_p50_us": med("journaled", "p50_us"),
            "batched_journaled_ops_per_s": first_batches["ops_per_s"],
            "one_client_vs_thrift": ratio("one"), "journaled_vs_thrift": ratio("journaled")}
