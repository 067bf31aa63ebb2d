"""The metadata service over real Thrift on loopback, with concurrent clients."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import networkx as nx
import pytest

import funcsion_rpc
import hdag
import metadata_server
import wds
from funcsion_rpc import MetadataClient, PutRequest
from funcsion_rpc import errors as E
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server import MetadataHandler, MetadataServer, MetadataState

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin-secret"


@pytest.fixture
def server():
    handler = MetadataHandler(MetadataState(block_size=4096, data_chunks=2, parity_chunks=1), admin_token=ADMIN)
    srv = MetadataServer(handler, tick_interval_s=0.05).start()
    yield srv
    srv.close()
    handler.state.validate_state()


@pytest.fixture
def admin(server):
    c = MetadataClient(port=server.port, admin_token=ADMIN)
    for i in range(4):
        c.register_capacity(f"s{i}", 64)
    c.children = []
    yield c
    for child in c.children:
        child.close()
    c.close()


def start(admin: MetadataClient, path: Path, policy: str = "funcstore", ttl_ms: int = 0):
    key = admin.register_workflow(path.read_text(), {}, str(path)).key
    info = admin.start_run(key, policy, ttl_ms)
    client = admin.for_run(info.token)
    admin.children.append(client)
    return info, client


def put(c: MetadataClient, run: str, fn: str, obj: str, size: int = 100) -> T.PutResult:
    c.begin_put(run, fn, obj, size, f"sum-{obj}")
    return c.finish_put(run, fn, obj)


def execute(c: MetadataClient, run: str, graph: hdag.HDAG, batched: bool = False) -> None:
    for o in graph.inputs:
        put(c, run, "", o)
    for fn in nx.topological_sort(graph.function_graph()):
        f = graph.functions[fn]
        if batched:
            c.get_batch(run, fn, f.inputs)
            c.begin_put_batch(run, fn, [PutRequest(o, 100, f"sum-{o}", False) for o in f.outputs])
            c.finish_put_batch(run, fn, f.outputs)
        else:
            for o in f.inputs:
                c.get(run, fn, o)
            for o in f.outputs:
                put(c, run, fn, o)
        if not f.outputs:
            c.commit(run, fn)


def test_full_run_over_thrift(server, admin, fig9_path):
    info, c = start(admin, fig9_path)
    r = info.run_id
    assert info.policy == "funcstore" and len(info.token) == 32
    put(c, r, "", "in1")
    put(c, r, "", "in2")
    g = c.get(r, "F1", "in1")
    assert g.recorded and g.placement.tier == "memory" and g.placement.extents[0].function_name == "s0"
    assert c.get(r, "F1", "in1").recorded is False
    res = put(c, r, "F1", "a")
    assert res.committed and res.freed == ["in1"]
    st = c.lookup(r, "in1")
    assert (st.state, st.committed_by, st.freed_reason) == ("freed", ["F1"], "committed")
    assert [s.object_name for s in c.list_objects(r, "in")] == ["in1", "in2"]
    again = c.get(r, "F1", "in1")                    # F1 retried after its commit
    assert again.already_committed
    summary = c.end_run(r)
    assert summary["state"] == "ended" and summary["kept"] == []
    drops = [i for i in admin.fetch_instructions(0) if i.kind == "drop"]
    assert {i.object_name for i in drops} == {"in1", "in2", "a"}
    assert all(not i.keep_cos and i.extents for i in drops)
    last = max(i.seq for i in admin.fetch_instructions(0))
    assert admin.fetch_instructions(last) == []          # acknowledged
    stats = admin.stats()
    assert stats["counters"]["runs_ended"] == 1 and stats["runs"][0]["run_id"] == r
    c.close()


def test_errors_map_to_exception_tree(server, admin, fig9_path):
    info, c = start(admin, fig9_path)
    r = info.run_id
    with pytest.raises(E.ObjectNotWritten) as ei:
        c.get(r, "F3", "a")
    assert (ei.value.run_id, ei.value.function, ei.value.object) == (r, "F3", "a")
    assert isinstance(ei.value, wds.FuncsionError) and ei.value.code == E.ErrorCode.NOT_WRITTEN
    with pytest.raises(E.UnknownObject, match="no object 'zz'"):
        c.get(r, "F3", "zz")
    with pytest.raises(E.UndeclaredOutput):
        c.begin_put(r, "F1", "c", 1)
    c.begin_put(r, "", "in1", 5, "x")
    with pytest.raises(E.DuplicateWrite):
        c.begin_put(r, "", "in1", 6, "y")
    assert c.begin_put(r, "", "in1", 5, "x").existing
    with pytest.raises(E.UnknownRun):
        c.get("r-404", "F1", "in1")
    with pytest.raises(E.UnknownWorkflow):
        admin.start_run("nope/0")
    with pytest.raises(E.InvalidRequest, match="error"):
        admin.register_workflow("{not json")
    with pytest.raises(E.InvalidRequest, match="policy"):
        admin.start_run(info.workflow_key, "lru")
    # another run's token is refused for this run's objects
    other, c2 = start(admin, fig9_path)
    with pytest.raises(E.Unauthorized, match=f"wrong token for run {r}"):
        c2.lookup(r, "in1")
    with pytest.raises(E.Unauthorized, match="admin token"):
        c.register_capacity("evil", 10)
    with MetadataClient(port=server.port, admin_token="guess") as guess, pytest.raises(E.Unauthorized):
        guess.stats()
    c.end_run(r)
    with pytest.raises(E.RunEnded):
        c.get(r, "F1", "in1")
    for x in (c, c2):
        x.close()


def test_unreachable_server_is_service_unavailable():
    with pytest.raises(E.ServiceUnavailable, match="cannot reach"):
        MetadataClient(port=1, timeout_s=1).health()


def test_concurrent_runs_and_retrying_readers(server, admin):
    path = ROOT / "examples" / "wordcount" / "wordcount.wds.json"
    graph = hdag.build(wds.load(path))
    failures: list[BaseException] = []
    runs: list[str] = []

    def one(batched: bool) -> None:
        try:
            info, c = start(admin, path)
            runs.append(info.run_id)
            try:
                execute(c, info.run_id, graph, batched)
                c.end_run(info.run_id)
            finally:
                c.close()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i % 2 == 0,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    st = admin.stats()
    assert st["live_bytes"] == 0 and st["allocated_bytes"] == 0
    for s in st["runs"]:
        assert s["kept"] == sorted(graph.outputs) and s["live_bytes"] == 0


def test_many_threads_hammer_one_reader(server, admin, fig9_path):
    info, c = start(admin, fig9_path)
    r = info.run_id
    put(c, r, "", "in1")
    barrier = threading.Barrier(8)
    recorded: list[bool] = []

    def reader() -> None:
        barrier.wait()
        for _ in range(20):
            recorded.append(c.get(r, "F1", "in1").recorded)

    ts = [threading.Thread(target=reader) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert recorded.count(True) == 1 and len(recorded) == 160
    assert c.lookup(r, "in1").remaining == 1
    assert put(c, r, "F1", "a").freed == ["in1"]
    c.close()


def test_ttl_over_the_wire(server, admin, fig9_path):
    info, c = start(admin, fig9_path, ttl_ms=100)
    put(c, info.run_id, "", "in1")
    import time
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            c.lookup(info.run_id, "in1")
            time.sleep(0.3)               # keep quiet: only an idle run expires
        except E.MetadataError:
            break
        if admin.stats()["counters"].get("runs_expired"):
            break
    with pytest.raises(E.RunEnded, match="expired"):
        c.get(info.run_id, "F1", "in1")
    c.close()


def test_error_codes_match_idl():
    for name, value in vars(E.ErrorCode).items():
        if name.isupper():
            assert getattr(T.ErrorCode, name) == value


def test_public_names():
    assert set(funcsion_rpc.__all__) >= {"MetadataClient", "MetadataError", "ObjectExpired", "errors"}
    assert {"MetadataState", "MetadataHandler", "MetadataServer", "Journal", "Allocator", "CoreDriver"} <= set(
        metadata_server.__all__)
    for name in metadata_server.__all__:
        assert hasattr(metadata_server, name)


def test_funcsion_rpc_imports_no_server_code():
    code = ("import sys, funcsion_rpc, funcsion_rpc.client; "
            "bad = [m for m in ('networkx', 'hdag', 'metadata_server') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([__import__("sys").executable, "-c", code]).returncode == 0


@pytest.mark.skipif(shutil.which("thrift") is None, reason="thrift compiler not on PATH")
def test_generated_code_is_fresh():
    res = subprocess.run([str(ROOT / "scripts" / "gen-thrift"), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_capacity_registration_is_idempotent_over_a_replayed_journal(tmp_path):
    """A stack registers its 12 storage functions at every start over the same journal: the
    capacity stays 11,520 blocks instead of doubling at each start."""
    journal = tmp_path / "metadata.journal"
    for start in range(3):
        j = metadata_server.Journal(journal)
        handler = MetadataHandler(MetadataState(block_size=4096), journal=j, admin_token=ADMIN)
        with MetadataServer(handler) as srv, MetadataClient(port=srv.port, admin_token=ADMIN) as c:
            for i in range(12):
                assert c.register_capacity(f"sion-{i}", 960) == 960
            st = c.stats()
            assert (st["total_blocks"], st["free_blocks"], st["storage_functions"]) == (11_520, 11_520, 12), start
            if start == 2:
                assert c.register_capacity("sion-0", 1000) == 1000          # a new size updates
                assert c.stats()["total_blocks"] == 11_560
                with pytest.raises(E.InvalidRequest, match="blocks must be 1 to"):
                    c.register_capacity("sion-0", 2**31 - 1)
        handler.state.validate_state()
        j.close()
