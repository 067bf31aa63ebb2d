"""Group commit: the requests of several clients that one server loop round applies reach
the journal as one write, and no reply of the round leaves before that write."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc import MetadataClient, PutRequest
from funcsion_rpc.gen.metadata import Metadata
from metadata_server import Event, Journal, MetadataHandler, MetadataServer, MetadataState
from metadata_server._bench import wide_wds

ADMIN = "group-admin"
_LEN = struct.Struct("!i")


class GatedJournal(Journal):
    """A real journal whose writes can be held at a gate, so requests queue up behind one."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()
        self.groups_seen: list[int] = []

    def append(self, events: Sequence[Event]) -> None:
        self.writing.set()
        assert self.gate.wait(30)
        self.groups_seen.append(len(events))
        super().append(events)


def get_frame(token: str, run: str, fn: str, obj: str) -> bytes:
    buf = TMemoryBuffer()
    Metadata.Client(TBinaryProtocolAccelerated(buf)).send_get(token, run, fn, obj, False)
    body = buf.getvalue()
    return _LEN.pack(len(body)) + body


def read_reply(sock: socket.socket) -> bool:
    """The ``recorded`` flag of a ``get`` reply."""
    def take(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data
    (n,) = _LEN.unpack(take(4))
    client = Metadata.Client(TBinaryProtocolAccelerated(TMemoryBuffer(take(n))))
    return bool(client.recv_get().recorded)


def test_one_write_per_round_and_no_reply_before_it(tmp_path: Path):
    journal = GatedJournal(tmp_path / "metadata.journal")
    handler = MetadataHandler(MetadataState(block_size=4096), journal=journal, admin_token=ADMIN)
    with MetadataServer(handler) as srv:
        with MetadataClient(port=srv.port, admin_token=ADMIN) as admin:
            admin.register_capacity("s0", 64)
            info = admin.start_run(admin.register_workflow(wide_wds(1, 4)).key)
            with admin.for_run(info.token) as c:
                c.begin_put(info.run_id, "", "in", 1, "c")
                c.finish_put(info.run_id, "", "in")
                c.begin_put_batch(info.run_id, "w", [PutRequest("o000000", 10, "c", False)])
                c.finish_put_batch(info.run_id, "w", ["o000000"])
        socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(4)]
        try:
            # the first reader's request is applied; its group waits at the gate, and so does its reply
            journal.gate.clear()
            journal.writing.clear()
            socks[0].sendall(get_frame(info.token, info.run_id, "r00000", "o000000"))
            assert journal.writing.wait(30)
            socks[0].setblocking(False)
            try:
                assert socks[0].recv(1) == b"", "a reply left before its group was written"
            except BlockingIOError:
                pass                                    # no reply yet: as it must be
            socks[0].setblocking(True)
            # three more readers' requests arrive meanwhile (loopback: in the server's buffers on return)
            for k in (1, 2, 3):
                socks[k].sendall(get_frame(info.token, info.run_id, f"r{k:05d}", "o000000"))
            before = len(journal.groups_seen)
            journal.gate.set()
            assert [read_reply(s) for s in socks] == [True, True, True, True]
            assert journal.groups_seen[before:] == [1, 3]  # the held group, then one group of three
        finally:
            for s in socks:
                s.close()
    journal.close()
    with Journal(tmp_path / "metadata.journal") as j:
        assert [type(e).__name__ for e in j.replay()][-4:] == ["Get"] * 4
