"""The peer of ``funcsion bench metadata``: a bare Thrift server with a trivial handler.

Thrift's own ``TSimpleServer`` (framed transport, accelerated binary protocol,
the ``Metadata`` service) whose ``get`` returns one prebuilt ``GetResult``
shaped like the metadata server's reply for a slice (one extent), with no
token check, state or journal. The benchmark runs it in a process of its own
and drives it with the same client loop as the real server, so the ratio of
the two is what the metadata server costs over its framework. Not covered:
any other call (they raise).
"""

from __future__ import annotations

import multiprocessing as mp
import socket
from typing import Any

from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.gen.metadata import ttypes as T

__all__ = ["TrivialHandler", "start_baseline"]


class TrivialHandler:
    """Answers ``get`` (and ``health``) with constants."""

    def __init__(self) -> None:
        placement = T.Placement("memory", "slice", [T.Extent("sion-0", 3, 4096, 100, 0)], 1, 0, 0)
        self._result = T.GetResult("o000000", 100, "c", placement, False, False)
        self._health = T.Health("ok", 0.0, 1, 0, "baseline")

    def health(self) -> T.Health:
        return self._health

    def get(self, token: str, run_id: str, function_name: str, object_name: str, delete_after: bool) -> T.GetResult:
        return self._result


def _serve(listener: socket.socket) -> None:
    from thrift.protocol.TBinaryProtocol import TBinaryProtocolAcceleratedFactory
    from thrift.server.TServer import TSimpleServer
    from thrift.transport import TSocket, TTransport

    class Bound(TSocket.TServerSocket):  # type: ignore[misc]  # thrift ships no types
        """The listening socket the parent bound (so it knows the port before the fork)."""

        def listen(self) -> None:
            self.handle = listener

        def accept(self) -> TSocket.TSocket:
            client = super().accept()
            client.handle.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # as the real server
            return client

    server = TSimpleServer(Metadata.Processor(TrivialHandler()), Bound(), TTransport.TFramedTransportFactory(),
                           TBinaryProtocolAcceleratedFactory())
    server.serve()


def start_baseline() -> tuple[Any, int]:
    """Start the bare server in a forked process; returns (process, port). Terminate it when done."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    proc = mp.get_context("fork").Process(target=_serve, args=(listener,), daemon=True)
    proc.start()
    listener.close()
    return proc, port
