"""TLS on the wire, terminated at the edge of the process (standard library only: this
module runs inside the storage Lambda zip and the task zip).

Every funcsion connection (SDK -> metadata server, SDK -> daemon, daemon -> metadata
server, storage function -> daemon) speaks TLS 1.2+ (1.3 preferred) when given a
certificate; the server's certificate is verified against the deployment's CA with
hostname checking (the server name is the host part of the address dialled: a DNS
name or an IP address, matched against the certificate's subject alternative names).

Why a relay and not ``ssl.SSLSocket`` in the data path: the data path is built on
calls an ``SSLSocket`` does not have or refuses (``sendmsg`` with scatter lists and
``MSG_DONTWAIT``, ``socket.sendfile``, ``recv_into`` with ``MSG_WAITALL``) and on
``poll(2)`` readiness of descriptors, which misses bytes already decrypted in an
``SSLSocket``'s buffer (``pending()``). So TLS ends at the edge of the process, like a
sidecar: the ``SSLSocket`` stays on the wire and the unchanged code gets the plain end
of a ``socketpair``; one pump thread per connection (``_pump``: non-blocking, one
thread, so one ``SSL`` object is never used by two threads at once) moves bytes
between the two. With TLS off nothing of this runs: ``connect`` is
``socket.create_connection`` and the servers accept as before.

Measured on the 2-core shared machine (one process each side, loopback, 100 MiB one
way / 4 KiB round trips): plaintext 547 MB/s / 20 us, ``SSLSocket`` used directly
214 MB/s / 42 us, this relay 162 MB/s / 196 us. The relay keeps 3/4 of direct TLS's
throughput and costs a thread wake-up each way in latency; in exchange not one data
path call changes, and making every one of them TLS-correct (scatter sends, sendfile,
non-blocking sends, readiness with ``pending()``) would touch the daemon, the runtime
and the SDK. The Thrift metadata client needs none of those calls and uses its
``SSLSocket`` directly (``funcsion_rpc.client``).

Pieces:

- ``server_context`` / ``client_context``: the ``SSLContext`` of each side;
- ``connect``: dial, handshake within the timeout, return the plain end;
- ``TlsAcceptor``: a server's accepted sockets go through it: a bounded number of
  handshakes at once (past ``max_handshakes`` a new connection is closed unread), each
  within ``handshake_timeout_s`` overall, so a peer that sends a plaintext request,
  garbage instead of a ClientHello or nothing at all is closed within a bounded time
  and holds at most a handshake's worth; a completed one is handed over as a plain
  socket;
- ``check_certificate``: a server's certificate must match the name it advertises
  (checked at start with a handshake in memory, so a mismatch fails with one line);
- ``is_loopback``: whether an address is loopback (a server elsewhere refuses to start
  in plaintext unless told ``--insecure``: ``sdk.cli``).

Not here: the settings (``sdk._config``, the CLI), making certificates
(``sdk.cli.certs_cmd``).
"""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable

from .exceptions import TlsError

__all__ = ["server_context", "client_context", "connect", "TlsAcceptor", "check_certificate", "is_loopback",
           "server_name", "relay", "read_pem", "failure"]

#: bytes a pump moves per direction per turn
PUMP_BYTES = 256 << 10
#: the default bound on handshakes in flight on one server, and on how long one may take
MAX_HANDSHAKES = 64
HANDSHAKE_TIMEOUT_S = 10.0


def read_pem(path: str, what: str) -> str:
    """The text of a PEM file, or ``TlsError`` naming ``what`` (the setting) and the path."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TlsError(f"{what} {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if "-----BEGIN " not in text:
        raise TlsError(f"{what} {path}: not a PEM file (make one with `funcsion certs DIR --name HOST`)")
    return text


def server_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """A server's context: its certificate chain and key, TLS 1.2 or later."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    read_pem(cert_path, "--tls-cert")
    read_pem(key_path, "--tls-key")
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"--tls-cert {cert_path} / --tls-key {key_path}: cannot load them "
                       f"({getattr(exc, 'reason', None) or exc}); is the key the certificate's?") from None
    return ctx


def client_context(ca_pem: str) -> ssl.SSLContext:
    """A client's context: servers verified against the CA in ``ca_pem`` (PEM text), hostname
    checked, TLS 1.2 or later."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_verify_locations(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(f"the TLS CA is not a PEM certificate ({exc})") from None
    return ctx


def server_name(host: str) -> str:
    """The name a client verifies: the host part of an address (brackets off an IPv6 one)."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(server_name(host)).is_loopback
    except ValueError:
        return False


def _handshake(tls: ssl.SSLSocket, deadline: float) -> None:
    """Complete ``tls``'s handshake before ``deadline`` (monotonic) on a non-blocking socket;
    ``TimeoutError`` past it."""
    while True:
        try:
            tls.do_handshake()
            return
        except ssl.SSLWantReadError:
            ev = select.POLLIN
        except ssl.SSLWantWriteError:
            ev = select.POLLOUT
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the TLS handshake did not finish in time")
        p = select.poll()
        p.register(tls.fileno(), ev)
        p.poll(max(1, int(left * 1000)))


def connect(addr: tuple[str, int], timeout: float | None, ctx: ssl.SSLContext | None = None,
            name: str = "") -> socket.socket:
    """``socket.create_connection(addr, timeout)``, or with ``ctx`` a TLS connection whose server
    certificate must name ``name`` (default: the host of ``addr``), handshaken within ``timeout``;
    returns the plain end (see the module docstring) with ``timeout`` set. Raises ``OSError``;
    ``ssl.SSLCertVerificationError`` (an ``OSError``) for a server the CA does not vouch for."""
    raw = socket.create_connection(addr, timeout=timeout)
    if ctx is None:
        return raw
    tls: ssl.SSLSocket | None = None
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = ctx.wrap_socket(raw, server_hostname=server_name(name or addr[0]), do_handshake_on_connect=False)
        tls.setblocking(False)
        _handshake(tls, time.monotonic() + (timeout if timeout is not None else HANDSHAKE_TIMEOUT_S))
    except BaseException:
        (tls or raw).close()        # the SSLSocket owns the descriptor once made
        raise
    plain = relay(tls)
    plain.settimeout(timeout)
    return plain


def failure(exc: ssl.SSLError, what: str, addr: tuple[str, int]) -> str:
    """One line for a TLS handshake with ``what`` (e.g. "the daemon") at ``addr`` that failed."""
    where = f"{what} at {addr[0]}:{addr[1]}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"{where} failed TLS verification ({(exc.verify_message or str(exc)).rstrip('.')}): give the CA "
                "that signed its certificate (ca.pem of `funcsion certs`) and dial a name the certificate holds")
    return f"TLS with {where} failed ({exc.reason or exc}): is it serving TLS (--tls-cert) on that port?"


def relay(tls: ssl.SSLSocket) -> socket.socket:
    """Start a pump between ``tls`` (handshaken) and a new socketpair; return its plain end."""
    mine, theirs = socket.socketpair()
    for s in (mine, theirs):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        except OSError:  # pragma: no cover - platform limits
            pass
    threading.Thread(target=_pump, args=(tls, mine), daemon=True, name="tls-pump").start()
    return theirs


def _pump(tls: ssl.SSLSocket, plain: socket.socket, size: int = PUMP_BYTES) -> None:
    """Move bytes both ways until one side closes (then the other is closed once what it was
    owed is delivered) or fails (then both close at once: the local code sees the connection
    end, as it would see a plaintext one end)."""
    tls.setblocking(False)
    plain.setblocking(False)
    down, up = bytearray(size), bytearray(size)
    dv, uv = memoryview(down), memoryview(up)
    d0 = d1 = u0 = u1 = 0         # down[d0:d1]: from the wire, owed to plain; up[u0:u1]: from plain, owed to the wire
    wire_open = plain_open = True
    poller = select.poll()
    tfd, pfd = tls.fileno(), plain.fileno()
    try:
        while True:
            moved = False
            read_wants_out = write_wants_in = False
            while wire_open and d1 < size:
                try:
                    n = tls.recv_into(dv[d1:])
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLWantWriteError:
                    read_wants_out = True
                    break
                if n == 0:
                    wire_open = False
                    break
                d1 += n
                moved = True
            if d1 > d0:
                try:
                    k = plain.send(dv[d0:d1])
                except BlockingIOError:
                    k = 0
                d0 += k
                moved = moved or k > 0
                if d0 == d1:
                    d0 = d1 = 0
            if plain_open and u0 == u1:    # a TLS write waiting for its retry keeps its buffer as it is
                try:
                    n = plain.recv_into(uv)
                except BlockingIOError:
                    n = -1
                if n == 0:
                    plain_open = False
                elif n > 0:
                    u0, u1, moved = 0, n, True
            if u1 > u0:
                try:
                    k = tls.send(uv[u0:u1])
                except ssl.SSLWantWriteError:
                    k = 0
                except ssl.SSLWantReadError:
                    k, write_wants_in = 0, True
                u0 += k
                moved = moved or k > 0
                if u0 == u1:
                    u0 = u1 = 0
            if (not wire_open and d0 == d1) or (not plain_open and u0 == u1):
                return
            if moved:
                continue
            tev = (select.POLLIN if (wire_open and d1 < size) or write_wants_in else 0) | \
                  (select.POLLOUT if (u1 > u0 and not write_wants_in) or read_wants_out else 0)
            pev = (select.POLLIN if plain_open and u0 == u1 else 0) | (select.POLLOUT if d1 > d0 else 0)
            for fd, ev in ((tfd, tev), (pfd, pev)):
                if ev:
                    poller.register(fd, ev)
                else:
                    try:
                        poller.unregister(fd)
                    except KeyError:
                        pass
            poller.poll()
    except (OSError, ValueError):
        return
    finally:
        for s in (plain, tls):
            try:
                s.close()
            except OSError:  # pragma: no cover
                pass


class TlsAcceptor:
    """The TLS edge of a server: ``accept(sock)`` takes an accepted socket; once its handshake
    completes, ``deliver(plain_sock, peer)`` gets the plain end on the handshake's thread
    (``peer``: "host:port"). At most ``max_handshakes`` at once (a connection past them is
    closed at once, unread, and counted in ``refused``), each within ``handshake_timeout_s``
    of accept (else closed and counted in ``failed``, as is any peer whose hello is not TLS).
    What an unauthenticated peer holds is one handshake: a thread and OpenSSL's buffers."""

    def __init__(self, ctx: ssl.SSLContext, deliver: Callable[[socket.socket, str], None], *,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, max_handshakes: int = MAX_HANDSHAKES) -> None:
        if handshake_timeout_s <= 0 or max_handshakes < 1:
            raise ValueError("handshake_timeout_s must be > 0 and max_handshakes >= 1")
        self.ctx = ctx
        self.deliver = deliver
        self.handshake_timeout_s = handshake_timeout_s
        self.max_handshakes = max_handshakes
        self._slots = threading.BoundedSemaphore(max_handshakes)
        self._lock = threading.Lock()
        self.refused = 0
        self.failed = 0
        self.completed = 0
        self.in_flight = 0

    def accept(self, sock: socket.socket) -> None:
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self.refused += 1
            sock.close()
            return
        with self._lock:
            self.in_flight += 1
        deadline = time.monotonic() + self.handshake_timeout_s
        threading.Thread(target=self._handshake, args=(sock, deadline), daemon=True, name="tls-handshake").start()

    def _handshake(self, sock: socket.socket, deadline: float) -> None:
        tls: ssl.SSLSocket | None = None
        peer = "?"
        try:
            try:
                addr = sock.getpeername()
                peer = f"{addr[0]}:{addr[1]}"
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
                tls = self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                _handshake(tls, deadline)
            except (OSError, ValueError):
                with self._lock:
                    self.failed += 1
                (tls or sock).close()
                return
        finally:
            with self._lock:
                self.in_flight -= 1
            self._slots.release()
        with self._lock:
            self.completed += 1
        self.deliver(relay(tls), peer)


def check_certificate(cert_path: str, key_path: str, name: str, ca_pem: str = "") -> None:
    """Raise ``TlsError`` unless a client verifying ``name`` (against ``ca_pem``, or the
    certificate file itself when no CA is given) accepts this certificate and key: a
    handshake in memory, so what fails here would fail every client."""
    server = server_context(cert_path, key_path)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        client.load_verify_locations(cadata=ca_pem or read_pem(cert_path, "--tls-cert"))
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(f"--tls-ca: not a PEM certificate ({exc})") from None
    if not ca_pem:
        client.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname=server_name(name))
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    for _ in range(8):
        for i, obj in enumerate((cli, srv)):
            if done[i]:
                continue
            try:
                obj.do_handshake()
                done[i] = True
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
            except ssl.SSLCertVerificationError as exc:
                why = (exc.verify_message or str(exc)).rstrip(".")
                hint = (f"make one for it: `funcsion certs DIR --name {server_name(name)}`" if "mismatch" in why
                        else "check the certificate and --tls-ca")
                raise TlsError(f"--tls-cert {cert_path} does not verify for {name}: {why}; {hint}") from None
            except ssl.SSLError as exc:
                raise TlsError(f"--tls-cert {cert_path}: a handshake with it fails ({exc.reason or exc})") from None
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done):
            return
    raise TlsError(f"--tls-cert {cert_path}: a handshake with it does not complete")  # pragma: no cover
