"""``get_batch`` replies written from pre-encoded bytes (``metadata_server._replies``): the
same bytes as the generated code's structs, for every kind of placement and read, with no
``GetResult`` struct built per object on the server."""

from __future__ import annotations

import json

import pytest
from thrift.protocol.TBinaryProtocol import TBinaryProtocol, TBinaryProtocolAccelerated
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc import reads
from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server._handler import MetadataHandler
from metadata_server._process import FrameProcessor
from metadata_server._replies import GetResultEncoder, encode_struct

ADMIN = "adm"
SIZES = {"small": 100, "big": 20 << 20, "empty": 0, "odd.name_-9": 5}
READERS = ("r1", "r2")


def _wds() -> str:
    outs = list(SIZES)
    return json.dumps({"app": "replies", "workflow_id": 1, "category": "t", "spec": {
        "write": {"stage_id": 1, "functions": [
            {"start": True, "name": "w", "input": ["in"], "output": outs, "next": list(READERS)}]},
        "read": {"stage_id": 2, "functions": [
            {"start": False, "name": r, "input": outs, "output": [], "next": []} for r in READERS]}}})


def _run(h: MetadataHandler, key: str, policy: str = "funcstore", latency_sensitive: bool = True) -> T.RunInfo:
    info = h.start_run(ADMIN, key, policy, 0, T.RunHints(0, 0, latency_sensitive))
    h.begin_put(info.token, info.run_id, "", T.PutRequest("in", 10, "c", False))
    h.finish_put(info.token, info.run_id, "", "in")
    h.begin_put_batch(info.token, info.run_id, "w", [T.PutRequest(o, n, f"sum-{o}-\u00e4\u2603", False) for o, n in SIZES.items()])
    h.finish_put_batch(info.token, info.run_id, "w", list(SIZES))
    return info


def _handler() -> tuple[MetadataHandler, str]:
    h = MetadataHandler(admin_token=ADMIN, clock=lambda: 1000.0)    # a fixed clock: two of them agree
    for fn in range(14):
        h.register_capacity(ADMIN, f"s{fn}", 64)
    return h, h.register_workflow(ADMIN, _wds(), {}, "t").key


@pytest.fixture
def handler() -> tuple[MetadataHandler, str]:
    return _handler()


def _call(token: str, run_id: str, function: str, names: list[str]) -> bytes:
    buf = TMemoryBuffer()
    client = Metadata.Client(TBinaryProtocol(buf))
    client.send_get_batch(token, run_id, function, names)
    return buf.getvalue()


def _generated_reply(h: MetadataHandler, frame: bytes) -> bytes:
    """What Thrift's own processor and pure-Python protocol write for ``frame``."""
    out = TMemoryBuffer()
    Metadata.Processor(h).process(TBinaryProtocol(TMemoryBuffer(frame)), TBinaryProtocol(out))
    return out.getvalue()


def _decode(reply: bytes) -> list[T.GetResult]:
    return Metadata.Client(TBinaryProtocolAccelerated(TMemoryBuffer(reply))).recv_get_batch()  # type: ignore[no-any-return]


class Twins:
    """Two handlers driven alike (same clock, same calls): one answers through the server's
    frame processor, the other through Thrift's generated processor."""

    def __init__(self) -> None:
        (self.fast, key), (self.slow, _) = _handler(), _handler()
        self.key = key
        self.processor = FrameProcessor(self.fast, string_length_limit=1 << 20)
        self.runs: dict[str, tuple[T.RunInfo, T.RunInfo]] = {}

    def run(self, name: str, **kw: object) -> None:
        self.runs[name] = (_run(self.fast, self.key, **kw), _run(self.slow, self.key, **kw))  # type: ignore[arg-type]

    def get_batch(self, run: str, function: str, names: list[str]) -> tuple[bytes, bytes]:
        a, b = self.runs[run]
        return (self.processor.process(_call(a.token, a.run_id, function, names)),
                _generated_reply(self.slow, _call(b.token, b.run_id, function, names)))

    def commit(self, run: str, function: str) -> None:
        for h, info in zip((self.fast, self.slow), self.runs[run]):
            h.commit(info.token, info.run_id, function)


def test_encoded_replies_are_the_generated_bytes_for_every_kind_of_read():
    t = Twins()
    names = list(SIZES)
    t.run("memory")
    fast, slow = t.get_batch("memory", "r1", names)                 # first reads: recorded
    assert fast == slow and all(r.recorded and not r.freed_by_read for r in _decode(fast))
    kinds = {r.object_name: r.placement.kind for r in _decode(fast)}
    assert kinds == {"small": "slice", "big": "blocks", "empty": "empty", "odd.name_-9": "slice"}
    big = _decode(fast)[1].placement                               # 12 chunks of two blocks' bytes each
    assert {e.chunk for e in big.extents} == set(range(12)) and sum(e.length for e in big.extents) == 12 * (2 << 20)
    fast, slow = t.get_batch("memory", "r1", names + names[:2])    # repeat reads (from the cache)
    assert fast == slow and not any(r.recorded for r in _decode(fast))
    t.commit("memory", "r1")                                        # a committed reader: already_committed
    fast, slow = t.get_batch("memory", "r1", names)
    assert fast == slow and all(r.already_committed and not r.recorded for r in _decode(fast))
    t.run("cos", latency_sensitive=False)                           # COS tier: one placement, many objects
    for reader in READERS:
        fast, slow = t.get_batch("cos", reader, names)
        assert fast == slow and {r.placement.tier for r in _decode(fast)} == {"cos", "empty"}
    t.run("oracle", policy="oracle")                                # the last declared read frees
    fast, slow = t.get_batch("oracle", "r1", names)
    assert fast == slow and not any(r.freed_by_read for r in _decode(fast))
    fast, slow = t.get_batch("oracle", "r2", names)
    assert fast == slow and all(r.recorded and r.freed_by_read for r in _decode(fast))
    t.run("release")                                                # funcstore: the last declared read
    t.get_batch("release", "r1", names)                             # is answered as such
    fast, slow = t.get_batch("release", "r2", names)
    assert fast == slow and {r.object_name for r in _decode(fast) if r.last_read} == set(names) - {"empty"}
    assert not any(r.freed_by_read for r in _decode(fast))
    a, b = t.runs["release"]
    assert sorted(t.fast.read_done(a.token, a.run_id, "r2", names)) == sorted(set(names) - {"empty"})
    assert sorted(t.slow.read_done(b.token, b.run_id, "r2", names)) == sorted(set(names) - {"empty"})
    fast, slow = t.get_batch("release", "r2", names)                # a re-run reader: the released placement
    assert fast == slow and not any(r.last_read or r.recorded for r in _decode(fast))
    assert all(not r.placement.extents for r in _decode(fast))


def test_a_refused_batch_gets_the_generated_fault(handler):
    h, key = handler
    run = _run(h, key)
    for frame in (_call("wrong-token", run.run_id, "r1", ["small"]), _call(run.token, run.run_id, "r1", ["nope"])):
        fast = FrameProcessor(h, string_length_limit=1 << 20).process(frame)
        assert fast == _generated_reply(h, frame)
        with pytest.raises(T.MetadataFault):
            _decode(fast)


def test_the_server_builds_no_result_struct_per_object(handler, monkeypatch):
    h, key = handler
    run = _run(h, key)
    frame = _call(run.token, run.run_id, "r1", list(SIZES))
    processor = FrameProcessor(h, string_length_limit=1 << 20)

    def no_struct(*args: object, **kw: object) -> None:
        raise AssertionError("a GetResult struct was built for a batched read")
    monkeypatch.setattr(T.GetResult, "__init__", no_struct)
    reply = processor.process(frame)
    monkeypatch.undo()
    assert [r.object_name for r in _decode(reply)] == list(SIZES)


def _columns(results: list[T.GetResult]) -> tuple[bytes, bytes]:
    """get_batch's results as read_batch's columns (funcsion_rpc.reads)."""
    return (bytes(reads.TIER_CODES[r.placement.tier] for r in results),
            bytes((reads.RECORDED if r.recorded else 0) | (reads.ALREADY_COMMITTED if r.already_committed else 0)
                  | (reads.FREED_BY_READ if r.freed_by_read else 0)
                  | (reads.LAST_READ if r.last_read else 0) for r in results))


def test_read_batch_says_what_get_batch_says_a_byte_per_object():
    t = Twins()
    names = list(SIZES)

    def both(run: str, function: str, batch: list[str]) -> tuple[bytes, bytes]:
        a, b = t.runs[run]
        got = t.fast.read_batch(a.token, a.run_id, function, batch)
        assert (got.tiers, got.flags) == _columns(t.slow.get_batch(b.token, b.run_id, function, batch))
        return got.tiers, got.flags
    t.run("memory")
    assert both("memory", "r1", names) == (b"mmem", bytes([reads.RECORDED] * 4))
    assert both("memory", "r1", names[:2]) == (b"mm", b"\0\0")
    t.commit("memory", "r1")
    assert both("memory", "r1", names)[1] == bytes([reads.ALREADY_COMMITTED] * 4)
    t.run("cos", latency_sensitive=False)
    assert both("cos", "r2", names)[0] == b"ccec"
    t.run("oracle", policy="oracle")
    both("oracle", "r1", names)
    assert both("oracle", "r2", names)[1] == bytes([reads.RECORDED | reads.FREED_BY_READ] * 4)
    t.run("release")
    both("release", "r1", names)
    rel = reads.RECORDED | reads.LAST_READ
    assert both("release", "r2", names)[1] == bytes([rel, rel, reads.RECORDED, rel])    # "empty" holds no memory
    a, _ = t.runs["memory"]
    with pytest.raises(T.MetadataFault):
        t.fast.read_batch(a.token, a.run_id, "r2", ["small", "nope"])


def test_the_encoder_s_cache_is_bounded_and_stays_right():
    h, key = _handler()
    run = _run(h, key)
    enc = GetResultEncoder(h._placement, max_entries=3, max_bytes=400)
    names = list(SIZES)
    outs = h._read_batch(run.token, run.run_id, "r1", names)
    expected = encode_struct(Metadata.get_batch_result(success=[h._get_result(o) for o in outs]))
    for _ in range(3):
        assert b"\x0f\x00\x00" + enc.encode(outs) + b"\x00" == expected
        assert len(enc._heads) <= 3 and enc._bytes <= 400 + 1000
