"""Hostile and broken peers against a live metadata server: each closes its own connection
(or gets its fault), is logged once, costs no memory beyond a handshake, and everyone
else is served on. Also: oversized workflows, non-ASCII tokens, a client that cannot
reach the server does not fill the log."""

from __future__ import annotations

import logging
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from thrift.transport.TTransport import TMemoryBuffer

from funcsion_rpc import MetadataClient
from funcsion_rpc import errors as E
from funcsion_rpc.gen.metadata import Metadata
from funcsion_rpc.limits import DEFAULT_MAX_FRAME_BYTES, HANDSHAKE_BYTES, MAX_WDS_BYTES, MIN_MAX_FRAME_BYTES
from metadata_server import MetadataHandler, MetadataServer, MetadataState

ROOT = Path(__file__).resolve().parents[2]
FIG9 = ROOT / "tests" / "data" / "fig9.wds.json"
ADMIN = "hostile-admin"
_LEN = struct.Struct("!i")


# -- helpers -------------------------------------------------------------------------
def call_frame(method: str, args: object, seqid: int = 7) -> bytes:
    """One framed TBinaryProtocol call, as a Thrift client sends it."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.writeMessageBegin(method, TMessageType.CALL, seqid)
    args.write(proto)  # type: ignore[attr-defined]
    proto.writeMessageEnd()
    body = buf.getvalue()
    return _LEN.pack(len(body)) + body


def read_fault(sock: socket.socket, method: str) -> object:
    """Read one reply frame and return its MetadataFault."""
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the server closed the connection instead of answering"
            out += chunk
        return out
    (n,) = _LEN.unpack(exactly(4))
    proto = TBinaryProtocol(TMemoryBuffer(exactly(n)))
    name, mtype, _ = proto.readMessageBegin()
    assert (name, mtype) == (method, TMessageType.REPLY)
    result = getattr(Metadata, f"{method}_result")()
    result.read(proto)
    assert result.fault is not None
    return result.fault


def closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return True


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def served(port: int, run: tuple[str, str], admin: MetadataClient | None = None) -> None:
    """A fresh client and (when given) an old connection are both served."""
    with MetadataClient(port=port, admin_token=ADMIN, timeout_s=10) as fresh:
        assert fresh.health().status == "ok"
        assert fresh.stats()["workflows"] >= 1
    run_id, token = run
    with MetadataClient(port=port, token=token, timeout_s=10) as c:
        assert c.lookup(run_id, "in1").state == "pending"
    if admin is not None:
        assert admin.health().status == "ok"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# -- an in-process server ------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[MetadataServer]:
    handler = MetadataHandler(MetadataState(block_size=4096, data_chunks=2, parity_chunks=1), admin_token=ADMIN)
    srv = MetadataServer(handler, tick_interval_s=0.05).start()
    yield srv
    srv.close()
    handler.state.validate_state()


@pytest.fixture
def admin(server: MetadataServer) -> Iterator[MetadataClient]:
    with MetadataClient(port=server.port, admin_token=ADMIN, timeout_s=10) as c:
        yield c


@pytest.fixture
def run(admin: MetadataClient) -> tuple[str, str]:
    key = admin.register_workflow(FIG9.read_text(), {}, str(FIG9)).key
    info = admin.start_run(key)
    return info.run_id, info.token


def test_random_bytes_after_a_length_prefix_close_that_connection_only(server, admin, run, caplog):
    caplog.set_level(logging.WARNING, "funcsion.metadata")
    garbage = random.Random(2).randbytes(16)
    with connect(server.port) as bad:
        bad.sendall(_LEN.pack(16) + garbage)
        assert closed_by_server(bad)
    served(server.port, run, admin)
    assert server.bad_peers == 1
    (line,) = warnings_of(caplog)
    assert "closed the connection from 127.0.0.1:" in line and "16-byte frame that does not decode" in line


def test_a_string_over_the_protocol_limit_closes_that_connection_only(server, admin, run, caplog):
    caplog.set_level(logging.WARNING, "funcsion.metadata")
    name = b"stats"
    body = (_LEN.pack(-2147418111) + _LEN.pack(len(name)) + name + _LEN.pack(1)     # strict header, CALL
            + struct.pack("!bhi", 11, 1, 100 << 20))                                # field 1: 100 MB string
    with connect(server.port) as bad:
        bad.sendall(_LEN.pack(len(body)) + body)
        assert closed_by_server(bad)
    served(server.port, run, admin)
    (line,) = warnings_of(caplog)
    assert "does not decode" in line


def test_truncated_frames_then_close_leave_the_server_serving(server, admin, run):
    with connect(server.port) as bad:                         # a small frame, half sent
        bad.sendall(_LEN.pack(1000) + b"\x80" * 500)
    big = call_frame("register_workflow", Metadata.register_workflow_args(ADMIN, "x" * (1 << 20), {}, "t"))
    with connect(server.port) as bad:                         # an admitted large frame, a tenth sent
        bad.sendall(big[: len(big) // 10])
    served(server.port, run, admin)
    assert server.bad_peers == 0


def test_large_frames_are_checked_from_their_header(server, admin, run, caplog):
    """A frame over HANDSHAKE_BYTES with a wrong token gets Unauthorized from its header and its
    body is discarded, on a connection that stays usable; with the right token it is served."""
    caplog.set_level(logging.WARNING, "funcsion.metadata")
    run_id, token = run
    names = [f"object-{i:06d}" for i in range(4000)]
    frame = call_frame("get_batch", Metadata.get_batch_args("wrong", run_id, "F1", names))
    assert len(frame) > 4 * HANDSHAKE_BYTES
    with connect(server.port) as s:
        s.sendall(frame)
        fault = read_fault(s, "get_batch")
        assert fault.code == E.ErrorCode.UNAUTHORIZED and f"wrong token for run {run_id}" in fault.message
        s.sendall(call_frame("get_batch", Metadata.get_batch_args("wrong", run_id, "F1", names)))
        assert read_fault(s, "get_batch").code == E.ErrorCode.UNAUTHORIZED     # same connection, again
    with MetadataClient(port=server.port, token=token) as c, pytest.raises(E.UnknownObject):
        c.get_batch(run_id, "F1", names)                        # admitted: the core answers
    served(server.port, run, admin)
    assert server.bad_peers == 0 and warnings_of(caplog) == []


def test_a_large_frame_with_a_garbage_header_is_dropped_after_a_handshake(server, admin, run):
    with connect(server.port) as bad:
        bad.sendall(_LEN.pack(10 << 20) + b"\x00\x00\x00\x01" * (HANDSHAKE_BYTES // 4 + 1))
        assert closed_by_server(bad)
    served(server.port, run, admin)
    assert server.bad_peers == 1


def test_non_ascii_tokens_are_unauthorized(server, admin, run):
    run_id, _ = run
    with MetadataClient(port=server.port, token="jeton-\u00e9t\u00e9-\u2603") as c:
        with pytest.raises(E.Unauthorized, match=f"wrong token for run {run_id}"):
            c.lookup(run_id, "in1")
        with pytest.raises(E.Unauthorized):
            c.end_run(run_id)                                  # the admin-token path of run calls
    with MetadataClient(port=server.port, admin_token="\u00e4dmin") as c, pytest.raises(E.Unauthorized,
                                                                                       match="admin token"):
        c.stats()
    served(server.port, run, admin)


# -- oversized workflows (item 8, server side) --------------------------------------------
def test_a_50_mb_workflow_is_refused_before_it_is_read(server, admin, run):
    with pytest.raises(E.InvalidRequest, match="over this server's frame limit of 16,384,000 bytes"):
        admin.register_workflow("x" * (50 << 20), {}, "huge.wds.json")
    assert admin.stats()["workflows"] == 1                     # the same connection goes on
    served(server.port, run, admin)


def test_a_workflow_over_the_wds_limit_is_refused_by_name(server, admin, run):
    text = " " * (MAX_WDS_BYTES + 1)
    assert len(text) < DEFAULT_MAX_FRAME_BYTES
    with pytest.raises(E.InvalidRequest, match=r"big\.wds\.json is 8,388,609 bytes of WDS JSON; .* at most "
                                               r"8,388,608"):
        admin.register_workflow(text, {}, "big.wds.json")
    served(server.port, run, admin)


def test_the_largest_wds_fits_under_the_smallest_frame_limit():
    import wds

    # the wire's ceiling (MAX_WDS_BYTES) is above the default WDS limit (wds_max_bytes): raise that to it
    handler = MetadataHandler(MetadataState(wds_limits=wds.Limits(max_bytes=MAX_WDS_BYTES)), admin_token=ADMIN)
    with MetadataServer(handler, max_frame_bytes=MIN_MAX_FRAME_BYTES) as srv, \
            MetadataClient(port=srv.port, admin_token=ADMIN) as c:
        text = FIG9.read_text()
        text += " " * (MAX_WDS_BYTES - len(text.encode()))
        assert c.register_workflow(text, {}, "padded").key == "fig9/9"
        with pytest.raises(E.InvalidRequest, match="frame limit"):
            c.register_workflow(text + " " * (64 << 10), {}, "padded")
        assert c.health().status == "ok"


def test_the_frame_limit_is_a_checked_setting(capsys):
    handler = MetadataHandler(MetadataState(), admin_token=ADMIN)
    with pytest.raises(ValueError, match="max_frame_bytes must be 8,454,144 to"):
        MetadataServer(handler, max_frame_bytes=1 << 20)
    from sdk.cli import main
    assert main(["serve", "metadata", "--port", "0", "--max-frame-bytes", "1000"]) == 2
    err = capsys.readouterr().err
    assert "--max-frame-bytes (env FUNCSION_METADATA_MAX_FRAME_BYTES): max_frame_bytes must be" in err


# -- a live server process: memory and log -------------------------------------------------
class Live:
    def __init__(self, tmp: Path) -> None:
        self.log = tmp / "metadata.log"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sdk.cli", "serve", "metadata", "--port", "0", "--admin-token", ADMIN,
                 "--journal", str(tmp / "metadata.journal"), "--block-size", "4096"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, line + self.log.read_text()
        self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        with MetadataClient(port=self.port, admin_token=ADMIN) as c:
            key = c.register_workflow(FIG9.read_text(), {}, str(FIG9)).key
            info = c.start_run(key)
        self.run = (info.run_id, info.token)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def close(self) -> None:
        self.proc.terminate()
        assert self.proc.wait(20) == 0
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    srv = Live(tmp_path)
    yield srv
    srv.close()


def _partial(port: int, head: bytes, body_bytes: int) -> socket.socket:
    s = connect(port)
    try:
        s.sendall(head)
        chunk = b"\x00" * (1 << 20)
        for _ in range(body_bytes >> 20):
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return s


def test_large_partial_frames_do_not_grow_the_server(live):
    run_id, _ = live.run
    wrong_admin = call_frame("register_workflow", Metadata.register_workflow_args("nope", "", {}, ""))
    wrong_run = call_frame("get_batch", Metadata.get_batch_args("nope", run_id, "F1", []))

    def head(frame: bytes, declared: int) -> bytes:
        return _LEN.pack(declared) + frame[4:]              # the call's header, a huge declared length

    # warm up every path once (a refused frame, a dropped one), then measure
    with _partial(live.port, head(wrong_run, 1 << 20), 0) as s:
        assert read_fault(s, "get_batch").code == E.ErrorCode.UNAUTHORIZED
    with _partial(live.port, _LEN.pack(1 << 20) + b"\x07" * 8, 1 << 20) as s:
        assert closed_by_server(s)
    served(live.port, live.run)
    before = live.rss_kb()
    socks = []
    for _ in range(4):
        socks.append(_partial(live.port, head(wrong_admin, 63 << 20), 16 << 20))       # over the frame limit
        socks.append(_partial(live.port, head(wrong_run, 15 << 20), (15 << 20) - 1))   # under it, wrong token
        socks.append(_partial(live.port, _LEN.pack(15 << 20) + b"\x07" * 8, 16 << 20))  # garbage header
    served(live.port, live.run)
    grown_mb = (live.rss_kb() - before) / 1024
    assert read_fault(socks[0], "register_workflow").code == E.ErrorCode.UNAUTHORIZED
    assert read_fault(socks[1], "get_batch").code == E.ErrorCode.UNAUTHORIZED
    for s in socks:
        s.close()
    assert grown_mb < 4, f"the server grew by {grown_mb:.1f} MB for 12 unauthenticated partial frames"


def test_a_bad_peer_is_logged_once_and_the_log_stays_bounded(live):
    base = len(live.lines())
    with connect(live.port) as bad:
        bad.sendall(_LEN.pack(16) + random.Random(3).randbytes(16))
        assert closed_by_server(bad)
    deadline = time.monotonic() + 10
    while not any("closed the connection" in ln for ln in live.lines()[base:]) and time.monotonic() < deadline:
        served(live.port, live.run)
    for _ in range(100):                                   # the server goes on serving, silently
        served(live.port, live.run)
    new = live.lines()[base:]
    assert len(new) == 1 and "closed the connection from 127.0.0.1:" in new[0], new
    for i in range(60):                                    # a peer that misbehaves again and again
        with connect(live.port) as bad:
            bad.sendall(_LEN.pack(16) + random.Random(i).randbytes(16))
            assert closed_by_server(bad)
    served(live.port, live.run)
    new = live.lines()[base:]
    assert len(new) <= 10, new                             # at most 10 lines a minute
    assert all("closed the connection" in ln for ln in new)


def test_an_unreachable_server_does_not_fill_the_log(caplog):
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                          # bound, not listening: refused
        c = MetadataClient(port=port, timeout_s=1)
        for _ in range(50):
            with pytest.raises(E.ServiceUnavailable, match="cannot reach the metadata server"):
                c.health()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_a_raised_frame_limit_raises_the_string_limit_with_it():
    """Thrift decodes strings up to 16,384,000 bytes by default; past that a larger frame limit
    would turn a big request into a dropped connection instead of a clear refusal."""
    handler = MetadataHandler(MetadataState(), admin_token=ADMIN)
    with MetadataServer(handler, max_frame_bytes=24 << 20) as srv, \
            MetadataClient(port=srv.port, admin_token=ADMIN) as c:
        with pytest.raises(E.InvalidRequest, match="is 17,825,792 bytes of WDS JSON"):
            c.register_workflow("x" * (17 << 20), {}, "big")
        assert c.health().status == "ok" and srv.bad_peers == 0
