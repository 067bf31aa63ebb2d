"""TLS on the wire, on loopback with certificates from ``funcsion certs``: metadata calls,
PUT/GET of a small and a coded object through a TLS daemon whose storage functions dial it
over TLS, the daemon following a TLS metadata server; a wrong CA refused with one clear
line; a certificate that does not hold the advertised name refused at start; plaintext
refused off loopback; hostile peers (plaintext, garbage, a silent client, a flood of
silent clients) closed within a bound while the server serves on."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from funcsion_rpc import MetadataClient
from funcsion_rpc.errors import ServiceUnavailable
from metadata_server import MetadataHandler, MetadataServer, MetadataState
from sdk._client import Client, Endpoints
from sdk._store_client import StoreClient
from sdk.cli import main
from sdk.cli.certs_cmd import make_certs
from sdk.local._control import follow_metadata
from storage_functions import tls
from storage_functions.daemon import DaemonConfig, LocalStore
from storage_functions.exceptions import StoreError, TlsError
from tests._waiting import wait_for

ADMIN = "admin-secret"
MiB = 1 << 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("certs"), ["127.0.0.1", "localhost"])


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA that signed nothing these servers hold."""
    return make_certs(tmp_path_factory.mktemp("other"), ["127.0.0.1"])["ca.pem"].read_text()


def _tls_server(certs: dict[str, Path], host: str = "127.0.0.1", **edge: Any) -> MetadataServer:
    ctx = tls.server_context(str(certs["server.pem"]), str(certs["server.key"]))
    return MetadataServer(MetadataHandler(MetadataState(), admin_token=ADMIN), host,
                          edge=lambda deliver: tls.TlsAcceptor(ctx, deliver, **edge)).start()


def _daemon_tls(certs: dict[str, Path]) -> dict[str, str]:
    return {"tls_cert": str(certs["server.pem"]), "tls_key": str(certs["server.key"]), "tls_ca": str(certs["ca.pem"])}


# -- funcsion certs ---------------------------------------------------------------------
def test_certs_command_writes_a_ca_and_a_server_certificate_that_verify(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography import x509

    out = tmp_path / "certs"
    assert main(["certs", str(out), "--name", "10.0.3.7", "--name", "metadata.internal", "--days", "30"]) == 0
    assert "--tls-cert" in capsys.readouterr().out
    for name, mode in (("ca.pem", 0o644), ("ca.key", 0o600), ("server.pem", 0o644), ("server.key", 0o600)):
        assert stat.S_IMODE((out / name).stat().st_mode) == mode, name
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    srv = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    srv.verify_directly_issued_by(ca)
    san = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.3.7"]
    assert san.get_values_for_type(x509.DNSName) == ["metadata.internal"]
    assert 29 <= (srv.not_valid_after_utc - srv.not_valid_before_utc).days <= 31
    pem = (out / "ca.pem").read_text()
    for name in ("10.0.3.7", "metadata.internal"):   # what every client checks, by name
        tls.check_certificate(str(out / "server.pem"), str(out / "server.key"), name, pem)
    with pytest.raises(TlsError, match="does not verify for 10.0.3.8"):
        tls.check_certificate(str(out / "server.pem"), str(out / "server.key"), "10.0.3.8", pem)
    assert main(["certs", str(out), "--name", "10.0.3.7"]) == 2          # never overwrites unasked
    assert "pass --force" in capsys.readouterr().err
    assert main(["certs", str(tmp_path / "x"), "--name", "10.0.0.1:7917"]) == 2
    assert "neither a DNS name nor an IP address" in capsys.readouterr().err


# -- the whole path under TLS -------------------------------------------------------------
@pytest.fixture
def tls_split(certs: dict[str, Path], tmp_path: Path) -> Iterator[tuple[MetadataServer, LocalStore]]:
    server = _tls_server(certs)
    try:
        with LocalStore(str(tmp_path), config=DaemonConfig(placement="metadata", group_size=12, max_functions=12,
                                                           function_memory_mb=128, **_daemon_tls(certs))) as st:
            yield server, st
    finally:
        server.close()


def test_metadata_calls_and_small_and_coded_objects_all_over_tls(fig9_path: Path, certs: dict[str, Path],
                                                                tls_split: tuple[MetadataServer, LocalStore]) -> None:
    server, st = tls_split
    ca = certs["ca.pem"].read_text()
    follower = follow_metadata(st.daemon, f"127.0.0.1:{server.port}", ADMIN, tls_ca=ca)
    follower.hello()                                  # the daemon's control loop dials the server over TLS
    follower.close()
    ep = Endpoints(f"127.0.0.1:{server.port}", f"{st.address[0]}:{st.address[1]}", st.token, ADMIN, tls_ca=ca)
    assert ep.for_run("r").to_dict()["tls_ca"] == ca            # what a task's event carries
    small, coded = os.urandom(1000), os.urandom(3 * MiB + 1)
    with Client(ep) as driver:
        run = driver.start_run(driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path)))
        run.put("in1", small)
        run.put("in2", coded)
        assert run.lookup("in2").placement.tier != "cos"
        assert run.bind(function="F1").get("in1") == small
        assert run.bind(function="F2").get("in2") == coded
        run.end_run("aborted")
        run.close()
    edge = st.daemon._tls_edge
    assert edge is not None and edge.completed >= 13 and edge.failed == 0   # a client and 12 functions
    event = st.daemon._event(st.daemon.handles[0], False)
    assert (event["tls_ca"], event["tls_name"]) == (ca, "127.0.0.1")
    assert st.daemon.counters["auth_failures"] == 0


def test_a_wrong_ca_is_refused_with_one_clear_line(certs: dict[str, Path], other_ca: str, tmp_path: Path) -> None:
    server = _tls_server(certs)
    try:
        with pytest.raises(ServiceUnavailable, match=r"failed TLS verification \(.*\): give the CA"), \
                MetadataClient(port=server.port, admin_token=ADMIN, tls_ca=other_ca) as wrong:
            wrong.health()
        elsewhere = _tls_server(certs, "127.0.0.2")               # an address the certificate lacks
        try:
            with pytest.raises(ServiceUnavailable, match=r"failed TLS verification \(IP address mismatch"), \
                    MetadataClient("127.0.0.2", elsewhere.port, admin_token=ADMIN,
                                   tls_ca=certs["ca.pem"].read_text()) as mismatched:
                mismatched.health()
        finally:
            elsewhere.close()
        with MetadataClient(port=server.port, admin_token=ADMIN, tls_ca=certs["ca.pem"].read_text()) as right:
            assert right.health()
        with LocalStore(str(tmp_path), max_functions=2, group_size=2, function_memory_mb=128,
                        **_daemon_tls(certs)) as st:
            with pytest.raises(StoreError, match=r"the daemon at 127.0.0.1:\d+ failed TLS verification"), \
                    StoreClient(st.address, st.token, tls_ca=other_ca, reconnect_s=0) as wrong_store:
                wrong_store.put("k", b"v")
    finally:
        server.close()


def test_a_daemon_whose_certificate_lacks_the_advertised_name_does_not_start(
        certs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "daemon", "--port", "0", "--root", str(tmp_path), "--advertise", "10.9.8.7",
                 "--tls-cert", str(certs["server.pem"]), "--tls-key", str(certs["server.key"]),
                 "--tls-ca", str(certs["ca.pem"])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not verify for 10.9.8.7" in err \
        and "funcsion certs DIR --name 10.9.8.7" in err, err
    assert main(["serve", "metadata", "--port", "0", "--advertise", "db.internal",
                 "--tls-cert", str(certs["server.pem"]), "--tls-key", str(certs["server.key"])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not verify for db.internal" in err, err
    assert main(["serve", "daemon", "--port", "0", "--root", str(tmp_path),
                 "--tls-cert", str(certs["server.pem"]), "--tls-key", str(certs["server.key"])]) == 2
    assert "--tls-cert needs --tls-ca" in capsys.readouterr().err


def _non_loopback() -> str:
    """This machine's address off loopback, else the wildcard (only ever used for a refusal)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))                  # no packet: a UDP connect only picks a route
            addr = str(s.getsockname()[0])
    except OSError:
        return "0.0.0.0"
    return "0.0.0.0" if tls.is_loopback(addr) else addr


@pytest.mark.parametrize("command", ["metadata", "daemon", "stack"])
def test_a_plaintext_server_off_loopback_refuses_to_start(command: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    host = _non_loopback()
    extra = ["--root", str(tmp_path)] if command == "daemon" else (
        ["--state-dir", str(tmp_path)] if command == "stack" else [])
    ports = ["--metadata-port", "0", "--daemon-port", "0"] if command == "stack" else ["--port", "0"]
    assert main(["serve", command, "--host", host, *ports, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--host {host} is not loopback" in err and "--insecure" in err, err


# -- hostile peers ----------------------------------------------------------------------------
def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """The server closed ``sock`` (EOF or reset) before ``seconds`` passed."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def test_hostile_peers_are_closed_in_bounded_time_and_the_server_serves_on(certs: dict[str, Path]) -> None:
    ca = certs["ca.pem"].read_text()
    server = _tls_server(certs, handshake_timeout_s=0.5, max_handshakes=3)
    port = server.port
    try:
        with pytest.raises(ServiceUnavailable), \
                MetadataClient(port=port, admin_token=ADMIN, timeout_s=5) as plain:   # a plaintext client gets nothing
            plain.health()
        garbage = socket.create_connection(("127.0.0.1", port))
        garbage.sendall(os.urandom(600))                           # not a ClientHello
        assert _closed_within(garbage, 5)
        garbage.close()
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]  # never say hello
        t0 = time.monotonic()
        assert all(_closed_within(s, 5) for s in silent)
        assert time.monotonic() - t0 < 4                           # the handshake deadline, not the 5 s wait
        for s in silent:
            s.close()
        hello_out = ssl.MemoryBIO()                                # a ClientHello, then nothing more
        obj = ssl.create_default_context(cadata=ca).wrap_bio(ssl.MemoryBIO(), hello_out, server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(hello_out.read())
        t0 = time.monotonic()
        assert _closed_within(half, 5) and time.monotonic() - t0 < 4   # the server answered, then gave up
        half.close()
        good = MetadataClient(port=port, admin_token=ADMIN, tls_ca=ca)
        assert good.health()
        good.close()
    finally:
        server.close()


def test_handshakes_in_flight_are_bounded(certs: dict[str, Path]) -> None:
    """Past ``max_handshakes`` silent peers a new connection is closed at once, unread; once
    they time out a real client is served."""
    ca = certs["ca.pem"].read_text()
    server = _tls_server(certs, handshake_timeout_s=1.5, max_handshakes=2)
    try:
        holders = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
        edge: Any = server._edge
        wait_for(lambda: edge.in_flight == 2, 5, "both silent peers in their handshakes")
        extra = socket.create_connection(("127.0.0.1", server.port))
        t0 = time.monotonic()
        assert _closed_within(extra, 5) and time.monotonic() - t0 < 1.0   # refused at once, not timed out
        assert edge.refused >= 1
        assert all(_closed_within(s, 5) for s in holders)
        for s in holders + [extra]:
            s.close()
        with MetadataClient(port=server.port, admin_token=ADMIN, tls_ca=ca) as good:
            assert good.health()
    finally:
        server.close()


def test_the_daemon_closes_a_plaintext_client_and_serves_tls_ones(certs: dict[str, Path], tmp_path: Path) -> None:
    ca = certs["ca.pem"].read_text()
    with LocalStore(str(tmp_path), max_functions=2, group_size=2, function_memory_mb=128, hello_timeout_s=1.0,
                    **_daemon_tls(certs)) as st:
        with pytest.raises((StoreError, ConnectionError)), \
                StoreClient(st.address, st.token, reconnect_s=0, timeout=5) as plain:
            plain.put("k", b"v")
        with StoreClient(st.address, st.token, tls_ca=ca) as c:
            c.put("k", b"v" * 5000)
            assert c.get("k") == b"v" * 5000
        edge = st.daemon._tls_edge
        assert edge is not None and edge.failed >= 1


# -- settings ------------------------------------------------------------------------------
def test_the_ca_travels_with_the_endpoints(certs: dict[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from sdk._config import Config
    from sdk._task import RunContext
    from sdk.cli._common import stack_endpoints, stack_option

    ca = certs["ca.pem"].read_text()
    monkeypatch.setenv("FUNCSION_ADMIN_TOKEN", "a")
    monkeypatch.setenv("FUNCSION_STORE_TOKEN", "s")
    ep = stack_option(f"metadata=10.0.0.5:7917,daemon=10.0.0.5:7918,ca={certs['ca.pem']}", os.environ)
    assert ep.tls_ca == ca
    assert stack_option("metadata=10.0.0.5:7917,daemon=10.0.0.5:7918", os.environ).tls_ca == ""
    with pytest.raises(ValueError, match="ca=.*cannot read it"):
        stack_option(f"metadata=h:1,daemon=h:2,ca={tmp_path / 'nope.pem'}", os.environ)
    event = {"run_id": "r-1", "function": "F1", "funcsion": {**ep.for_run("r-1").to_dict(), "token": "t"}}
    assert RunContext.from_event(event).endpoints.tls_ca == ca
    assert stack_endpoints({"metadata": "h:1", "daemon": "h:2", "store_token": "s", "admin_token": "a",
                            "tls_ca": ca}).tls_ca == ca
    monkeypatch.setenv("FUNCSION_TLS_CA", str(certs["ca.pem"]))
    monkeypatch.setenv("FUNCSION_TLS_CERT", str(certs["server.pem"]))
    monkeypatch.setenv("FUNCSION_TLS_KEY", str(certs["server.key"]))
    cfg = Config.load()
    assert (cfg.tls_ca, cfg.tls_cert, cfg.tls_key) == (str(certs["ca.pem"]), str(certs["server.pem"]),
                                                       str(certs["server.key"]))
    from sdk.cli import build_parser, serve_daemon
    got = serve_daemon.daemon_settings(build_parser().parse_args(   # the env is enough to serve TLS off loopback
        ["serve", "daemon", "--invoker", "aws", "--cos", "s3://b/p", "--advertise", "127.0.0.1:7918",
         "--host", "0.0.0.0"]), warn=lambda _: None)
    assert (got["tls_cert"], got["tls_ca"]) == (str(certs["server.pem"]), str(certs["ca.pem"]))
