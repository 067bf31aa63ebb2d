"""Wire framing shared by the SDK client, the client daemon and the
storage-function runtime. Covers the frame layout, op and status codes and the
socket helpers; not what any peer does with a frame.

A frame is a fixed 40-byte big-endian header, then ``keylen`` bytes of UTF-8
key, ``metalen`` bytes of JSON meta, and ``paylen`` bytes of payload::

    op u8 | status u8 | keylen u16 | reqid u32 | metalen u32 | crc u32 |
    a u64 | b u64 | paylen u64

``a``/``b`` carry small integers without JSON (block/offset on a function
PUT, memory in use on a function reply, stripe/chunk index on a CHUNK).
Payloads are sent straight from memoryviews and received with ``recv_into``
into their final buffers; a peer never copies a payload byte by byte.

Conversations (every request carries a ``reqid``; replies echo it):

* client -> daemon: HELLO{role=client, token}; PUT key {n, size, alloc?}
  followed by ``n`` STRIPE frames {d, p, fs, ol, crcs} whose payload is the
  d+p chunks back to back; GET key {version?} answered by REPLY{version,
  size, stripes...}, then ``d`` CHUNK frames per stripe (a=stripe, b=chunk)
  and END; an object that is one uncoded slice is answered by a single
  REPLY{..., inline: 1} whose payload is the object (no CHUNK, no END);
  DEL key; FREE {keys}; STAT. The daemon writes a reply's frames with one
  ``sendmsg`` where it can (REPLY head + first CHUNK, last CHUNK + END).
  COS_PUT / COS_GET / COS_DEL key: the SDK's own COS objects (``tier/``,
  ``persisted/``, ``outputs/``), which the daemon reads and writes for the
  client under the same token scope (tasks hold no COS credentials).
* function -> daemon: HELLO{role=function, name, secret, conn, term, hash,
  mem}, once per connection (a function opens a "small" and a "large" one);
  BYE{term, hash, diff_rank} when idle, answered BYE_ACK or BYE_NACK.
* daemon -> function: PUT key (a=block, b=offset, crc, payload), GET key,
  DEL {keys}, PING; the function answers REPLY with a=memory in use.

Limits: ``recv_frame`` refuses (``ProtocolError``) a frame whose declared key
+ meta is over its ``max_meta`` (per op when a mapping) or whose payload is
over ``max_payload``, before allocating anything, so a peer cannot make its
reader allocate what it merely declares; a ``deadline`` bounds the time the
whole frame may take (a slow-drip peer).
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import (
    AuthError,
    ChunkCorrupt,
    COSNotFound,
    NoRoom,
    NotEnoughChunks,
    ObjectTooLarge,
    ProtocolError,
    StorageError,
    StoreError,
    UnknownKey,
)

__all__ = [
    "HEADER", "HEADER_SIZE", "Op", "Status", "Frame", "send_frame", "recv_frame", "parse_frame",
    "recv_into", "recv_exact", "drain", "error_for", "status_for", "tune_socket", "frame_bytes", "pack_header",
    "sendmsg_all", "DEFAULT_DAEMON_PORT", "META_LIMIT", "HELLO_LIMIT", "compact_json",
]

#: The client daemon's TCP port unless configured otherwise (sdk.Config.daemon_port).
DEFAULT_DAEMON_PORT = 7918

HEADER = struct.Struct("!BBHIIIQQQ")
#: compact JSON, one encoder for every frame's meta and the daemon's records (``json.dumps``
#: with options builds a new encoder per call); one decoder (``json.loads`` of bytes sniffs
#: their encoding first)
compact_json = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.JSONDecoder().decode
HEADER_SIZE = HEADER.size  # 40


class Op:
    HELLO = 1
    PUT = 2
    GET = 3
    DEL = 4
    PING = 5
    PONG = 6
    BYE = 7
    BYE_ACK = 8
    BYE_NACK = 9
    REPLY = 10
    STRIPE = 11
    CHUNK = 12
    END = 13
    FREE = 14
    STAT = 15
    CORRUPT = 16  # debug only: flip a byte of a stored chunk (tests)
    COS_PUT = 17
    COS_GET = 18
    COS_DEL = 19
    RECOVER = 20  # a storage or recovery function downloads one chunk from COS (SION Sec. 5.5)
    EVICT = 21  # a client lets objects' chunks leave function memory, their durable copies kept


class Status:
    OK = 0
    UNKNOWN_KEY = 1
    TOO_LARGE = 2
    AUTH = 3
    CORRUPT = 4
    NOT_ENOUGH = 5
    PROTOCOL = 6
    ERROR = 7
    NOT_FOUND = 8
    FULL = 9


_ERRORS: dict[int, type[StorageError]] = {
    Status.UNKNOWN_KEY: UnknownKey,
    Status.TOO_LARGE: ObjectTooLarge,
    Status.AUTH: AuthError,
    Status.CORRUPT: ChunkCorrupt,
    Status.NOT_ENOUGH: NotEnoughChunks,
    Status.PROTOCOL: ProtocolError,
    Status.ERROR: StoreError,
    Status.NOT_FOUND: COSNotFound,
    Status.FULL: NoRoom,
}

#: Key + meta bytes a frame may declare by default (a FREE's key list, a function's DEL).
META_LIMIT = 16 << 20
#: Key + meta bytes a HELLO may declare: what a handshake needs (a token, a few fields).
HELLO_LIMIT = 4096


def error_for(status: int, message: str) -> StorageError:
    """The exception a non-OK status stands for."""
    return _ERRORS.get(status, StoreError)(message)


def status_for(exc: BaseException) -> int:
    for status, cls in _ERRORS.items():
        if type(exc) is cls:
            return status
    for status, cls in _ERRORS.items():
        if isinstance(exc, cls):
            return status
    return Status.ERROR


@dataclass(slots=True)
class Frame:
    op: int
    status: int
    reqid: int
    key: str
    meta: dict[str, Any]
    crc: int
    a: int
    b: int
    paylen: int


def tune_socket(sock: socket.socket) -> None:
    if sock.family != socket.AF_UNIX:     # the plain end of a TLS relay (``tls``) is a socketpair
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
        except OSError:  # pragma: no cover - platform limits
            pass


def pack_header(op: int, *, status: int = 0, reqid: int = 0, key: bytes = b"", meta: bytes = b"",
                crc: int = 0, a: int = 0, b: int = 0, paylen: int = 0) -> bytes:
    return HEADER.pack(op, status, len(key), reqid, len(meta), crc, a, b, paylen) + key + meta


def frame_bytes(op: int, *, status: int = 0, reqid: int = 0, key: str = "", meta: dict[str, Any] | None = None,
                crc: int = 0, a: int = 0, b: int = 0, payload: bytes = b"") -> bytes:
    """One whole frame as bytes (small payloads only)."""
    mb = compact_json(meta).encode() if meta else b""
    return pack_header(op, status=status, reqid=reqid, key=key.encode() if key else b"", meta=mb, crc=crc, a=a, b=b,
                       paylen=len(payload)) + payload


def send_frame(sock: socket.socket, op: int, *, status: int = 0, reqid: int = 0, key: str = "",
               meta: dict[str, Any] | None = None, crc: int = 0, a: int = 0, b: int = 0,
               payload: Any = None, paylen: int | None = None, before: bytes = b"") -> None:
    """Send one frame. ``payload`` is bytes-like or a list of bytes-like
    pieces (sent with one ``sendmsg`` when small, else piece by piece);
    with ``paylen`` and no payload only the header goes out and the caller
    streams the payload itself. ``before``: whole frames (``frame_bytes``)
    that go out first in the same ``sendmsg``."""
    kb = key.encode() if key else b""
    mb = compact_json(meta).encode() if meta else b""
    pieces: list[Any]
    if payload is None:
        pieces = []
    elif isinstance(payload, list):
        pieces = payload
    else:
        pieces = [payload]
    n = paylen if paylen is not None else sum(len(p) for p in pieces)
    head = pack_header(op, status=status, reqid=reqid, key=kb, meta=mb, crc=crc, a=a, b=b, paylen=n)
    if not pieces:
        sock.sendall(before + head if before else head)
    else:
        sendmsg_all(sock, [before, head, *pieces])


def sendmsg_all(sock: socket.socket, pieces: list[Any]) -> None:
    """Send every piece with as few ``sendmsg`` calls as the kernel allows
    (no joining copy)."""
    views = [memoryview(p).cast("B") for p in pieces if len(p)]
    while views:
        sent = sock.sendmsg(views[:512])
        while sent and views:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def recv_into(sock: socket.socket, view: memoryview, deadline: float | None = None) -> None:
    """Fill ``view`` completely from ``sock`` (by ``deadline``, a ``time.monotonic()``
    instant, when given: past it, ``TimeoutError``)."""
    got = 0
    n = len(view)
    while got < n:
        if deadline is not None:
            _until(sock, deadline)
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed the connection mid-frame")
        got += k


def _until(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the peer did not send a whole frame in time")
    sock.settimeout(left)


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    buf = bytearray(n)
    if n:
        recv_into(sock, memoryview(buf), deadline)
    return buf


def drain(sock: socket.socket, n: int, scratch: bytearray | None = None) -> None:
    """Read and discard ``n`` payload bytes."""
    scratch = scratch if scratch is not None else bytearray(min(n, 1 << 20) or 1)
    view = memoryview(scratch)
    while n:
        k = sock.recv_into(view, min(n, len(view)))
        if k == 0:
            raise ConnectionError("peer closed the connection mid-frame")
        n -= k


def recv_frame(sock: socket.socket, head: bytearray | None = None, *,
               max_meta: int | Mapping[int, int] = META_LIMIT, max_payload: int | None = None,
               deadline: float | None = None) -> Frame | None:
    """Read one header (+ key and meta); the payload is left on the socket.
    Returns None on a clean EOF before the first byte. A frame that declares
    more key + meta than ``max_meta`` (an int, or a limit per op with
    ``HELLO_LIMIT`` for ops it does not name) or a payload over
    ``max_payload`` raises ``ProtocolError`` before anything is allocated;
    so does a key that is not UTF-8 or a meta that is not a JSON object."""
    head = head if head is not None else bytearray(HEADER_SIZE)
    view = memoryview(head)
    if deadline is not None:
        _until(sock, deadline)
    k = sock.recv_into(view, HEADER_SIZE)
    if k == 0:
        return None
    if k < HEADER_SIZE:
        recv_into(sock, view[k:], deadline)
    op, status, keylen, reqid, metalen, crc, a, b, paylen = HEADER.unpack_from(head)
    limit = max_meta if isinstance(max_meta, int) else max_meta.get(op, HELLO_LIMIT)
    if keylen + metalen > limit:
        raise ProtocolError(f"frame op={op} declares {keylen} key and {metalen} meta bytes, over the "
                            f"{limit} this frame may carry")
    if max_payload is not None and paylen > max_payload:
        raise ProtocolError(f"frame op={op} declares a {paylen}-byte payload, over the {max_payload} "
                            "this frame may carry")
    key = ""
    meta: dict[str, Any] = {}
    if keylen or metalen:
        rest = recv_exact(sock, keylen + metalen, deadline)
        if keylen:
            try:
                key = rest[:keylen].decode()
            except UnicodeDecodeError:
                raise ProtocolError(f"frame op={op}: key is not UTF-8") from None
        if metalen:
            try:
                meta = _loads(rest[keylen:].decode())  # not UTF-8: a ValueError too
            except ValueError as exc:
                raise ProtocolError(f"frame op={op}: meta is not JSON: {exc}") from None
            if not isinstance(meta, dict):
                raise ProtocolError(f"frame op={op}: meta is a JSON {type(meta).__name__}, not an object")
    return Frame(op, status, reqid, key, meta, crc, a, b, paylen)


def parse_frame(data: bytes | bytearray, *, max_meta: int, max_payload: int) -> Frame | int:
    """``recv_frame`` for bytes read without blocking (the daemon's HELLO gate): the
    frame when ``data`` holds its whole header, key and meta (nothing more), else how
    many bytes it needs in all (the header's, then the header's + key + meta). A frame
    that declares more than ``max_meta`` key + meta bytes or ``max_payload`` payload
    bytes, a key that is not UTF-8 or a meta that is not a JSON object raises
    ``ProtocolError``, as ``recv_frame`` does, before anything past the header is read."""
    if len(data) < HEADER_SIZE:
        return HEADER_SIZE
    op, status, keylen, reqid, metalen, crc, a, b, paylen = HEADER.unpack_from(data)
    if keylen + metalen > max_meta:
        raise ProtocolError(f"frame op={op} declares {keylen} key and {metalen} meta bytes, over the "
                            f"{max_meta} this frame may carry")
    if paylen > max_payload:
        raise ProtocolError(f"frame op={op} declares a {paylen}-byte payload, over the {max_payload} "
                            "this frame may carry")
    if len(data) < HEADER_SIZE + keylen + metalen:
        return int(HEADER_SIZE + keylen + metalen)
    key = ""
    meta: dict[str, Any] = {}
    if keylen:
        try:
            key = bytes(data[HEADER_SIZE:HEADER_SIZE + keylen]).decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"frame op={op}: key is not UTF-8") from None
    if metalen:
        try:
            meta = _loads(bytes(data[HEADER_SIZE + keylen:HEADER_SIZE + keylen + metalen]).decode())
        except ValueError as exc:
            raise ProtocolError(f"frame op={op}: meta is not JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise ProtocolError(f"frame op={op}: meta is a JSON {type(meta).__name__}, not an object")
    return Frame(op, status, reqid, key, meta, crc, a, b, paylen)
