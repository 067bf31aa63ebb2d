"""``MetadataClient``'s failover (``failover_s``, config ``metadata_failover_s``) against real
sockets on loopback: a server that never comes back fails the call naming the setting, at once
when ``alive`` says the deployment is gone; a server that takes a request and dies before its
reply gets an idempotent call again, but never a ``start_run`` (a second run would start)."""

from __future__ import annotations

import socket
import threading

import pytest

from funcsion_rpc.client import MetadataClient
from funcsion_rpc.errors import ServiceUnavailable


def _free_port() -> int:
    with socket.socket() as s:      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_shard_that_never_comes_back_fails_the_call_naming_the_setting() -> None:
    port = _free_port()
    md = MetadataClient(port=port, token="t", failover_s=0.3)
    with pytest.raises(ServiceUnavailable, match=r"did not come back within 0.3 s \(metadata_failover_s"):
        md.get("r-1", "f", "x")
    assert md.failovers == 1
    gone = MetadataClient(port=port, token="t", failover_s=60.0, alive=lambda: False)
    with pytest.raises(ServiceUnavailable, match="no replacement is coming"):
        gone.get("r-1", "f", "x")   # the whole deployment is gone: at once, not after 60 s
    md.close()
    gone.close()


class DiesAfterRequest:
    """A listener that reads each request's first bytes and closes the connection unanswered
    (a server killed between taking a request and replying); counts the requests."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.requests = 0
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                if conn.recv(4):
                    self.requests += 1

    def close(self) -> None:
        self._stop = True
        self.sock.close()


def test_a_request_the_server_may_have_taken_is_sent_again_only_when_harmless() -> None:
    server = DiesAfterRequest()
    try:
        md = MetadataClient(port=server.port, admin_token="a", failover_s=0.6)
        with pytest.raises(ServiceUnavailable, match="not sent twice: it may have taken effect"):
            md.start_run("wf-1")
        assert server.requests == 1                 # sent once, never again
        with pytest.raises(ServiceUnavailable, match="did not come back within 0.6 s"):
            md.commit("r-1", "f")                   # idempotent: sent again until the window ran out
        assert server.requests > 2
        md.close()
    finally:
        server.close()
