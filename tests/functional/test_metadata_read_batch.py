"""``read_batch`` (what a task's ``get_many`` calls) over real Thrift on loopback: the same
reads as ``get_batch`` in a byte of tier and one of flags per object, and the same bytes
from a server that predates it (the client falls back to ``get_batch``)."""

from __future__ import annotations

import json

import pytest

from funcsion_rpc import MetadataClient, PutRequest, reads
from funcsion_rpc import errors as E
from metadata_server import MetadataHandler, MetadataServer, MetadataState

ADMIN = "admin-secret"
OUTS = [f"o{i}" for i in range(5)]
WDS = json.dumps({"app": "rb", "workflow_id": 1, "category": "t", "spec": {
    "write": {"stage_id": 1, "functions": [
        {"start": True, "name": "w", "input": ["in"], "output": OUTS, "next": ["r"]}]},
    "read": {"stage_id": 2, "functions": [{"start": False, "name": "r", "input": OUTS, "output": [], "next": []}]}}})


@pytest.fixture
def server():
    handler = MetadataHandler(MetadataState(block_size=4096, data_chunks=2, parity_chunks=1), admin_token=ADMIN)
    srv = MetadataServer(handler, tick_interval_s=0.05).start()
    yield srv
    srv.close()
    handler.state.validate_state()


def _run(admin: MetadataClient) -> tuple[str, MetadataClient]:
    info = admin.start_run(admin.register_workflow(WDS).key)
    c = admin.for_run(info.token)
    c.begin_put(info.run_id, "", "in", 1, "x")
    c.finish_put(info.run_id, "", "in")
    c.begin_put_batch(info.run_id, "w", [PutRequest(o, 10 * i, f"s{i}", False) for i, o in enumerate(OUTS)])
    c.finish_put_batch(info.run_id, "w", OUTS)
    return info.run_id, c


@pytest.mark.parametrize("old_server", [False, True])
def test_read_batch_records_reads_like_get_batch(server, old_server):
    if old_server:                                   # a server without the call answers UNKNOWN_METHOD
        del server.processor._processMap["read_batch"]
    with MetadataClient(port=server.port, admin_token=ADMIN) as admin:
        admin.register_capacity("s0", 64)
        run, c = _run(admin)
        got = c.read_batch(run, "r", OUTS + ["o1"])
        assert got.tiers == b"emmmmm"                # o0 has 0 bytes
        last = reads.RECORDED | reads.LAST_READ       # r is their only reader (funcstore: memory goes at read_done)
        assert got.flags == bytes([reads.RECORDED] + [last] * 4 + [reads.LAST_READ])
        assert c._no_read_batch is old_server
        assert admin.lookup(run, "o3").remaining == 1
        assert sorted(c.read_done(run, "r", OUTS)) == OUTS[1:] and not admin.lookup(run, "o3").placement.extents
        with pytest.raises(E.UnknownObject):
            c.read_batch(run, "r", ["o2", "nope"])
        c.commit(run, "r")
        assert all(admin.lookup(run, o).state == "freed" for o in OUTS)
        assert c.read_batch(run, "r", OUTS[:2]).flags == bytes([reads.ALREADY_COMMITTED] * 2)


def test_both_sides_use_the_accelerated_protocol(server):
    """fastbinary encodes and decodes on the client and in the server's frame processor
    (the pure-Python protocol is ~10x slower per object; it would be used silently)."""
    from thrift.transport.TTransport import CReadableTransport

    from metadata_server._process import FrameProcessor
    with MetadataClient(port=server.port, admin_token=ADMIN) as admin:
        admin.health()
        proto = admin._conn().client._iprot
        assert proto._fast_decode is not None and proto._fast_encode is not None
        assert isinstance(proto.trans, CReadableTransport)
    frames = FrameProcessor(server.handler, string_length_limit=1 << 20)
    for proto in (frames._iprot, frames._oprot):
        assert proto._fast_decode is not None and proto._fast_encode is not None
        assert isinstance(proto.trans, CReadableTransport)


@pytest.mark.parametrize("old_server", [False, True])
def test_every_read_reply_names_the_daemon_holding_the_object(server, old_server):
    """Several daemons (issue 31 item 1): get_batch's and lookup's placements and read_batch's
    ``daemons`` column name the daemon whose functions hold each object (every chunk on one);
    one daemon registered without an id names none, as before."""
    if old_server:
        del server.processor._processMap["read_batch"]
    with MetadataClient(port=server.port, admin_token=ADMIN) as admin:
        for k in range(2):
            for i in range(3):
                admin.register_capacity(f"sion-d{k}-{i}", 64, f"daemon-{k}")
        run, c = _run(admin)
        got = c.read_batch(run, "r", OUTS)
        placed = [admin.lookup(run, o).placement for o in OUTS]
        assert got.daemons == [p.daemon or "" for p in placed]
        assert got.daemons[0] == "" and set(got.daemons[1:]) <= {"daemon-0", "daemon-1"}   # o0: empty
        for p in placed[1:]:
            assert {e.function_name.rsplit("-", 1)[0] for e in p.extents} == {f"sion-d{p.daemon[-1]}"}
        assert [g.placement.daemon for g in c.get_batch(run, "r", OUTS[1:])] == got.daemons[1:]


def test_one_daemon_names_none(server):
    with MetadataClient(port=server.port, admin_token=ADMIN) as admin:
        admin.register_capacity("s0", 64)
        run, c = _run(admin)
        assert c.read_batch(run, "r", OUTS).daemons is None
        assert admin.lookup(run, "o2").placement.daemon is None
