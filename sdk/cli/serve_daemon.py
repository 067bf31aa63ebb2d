"""``funcsion serve daemon``: run the SION client daemon in the foreground.

``--invoker local`` (the default): storage functions on the local Lambda
platform and COS in a directory (or ``--cos s3://bucket/prefix``).
``--invoker aws``: the storage Lambdas that ``funcsion deploy storage``
created (``--function-prefix``, ``--region``, ``--endpoint-url``) invoked
through boto3, COS in S3 (``--cos s3://...``, required), and ``--advertise
HOST[:PORT]``, the address the Lambdas dial back to (they take no inbound
connections). ``build(args)`` makes the store for both modes (tests call
it). Host, port, block size and function memory left unset take the
config's (``FUNCSION_<FIELD>``, funcsion.toml, default: 127.0.0.1:7918), as
``funcsion up`` does. Prints the address and token; SIGTERM or Ctrl-C stops
it cleanly.

``--metadata HOST:PORT`` (with the server's admin token: ``--admin-token`` or
``FUNCSION_ADMIN_TOKEN``) makes it the storage layer of that metadata server:
it stores every chunk where the server's allocator placed it and runs the
control loop (``storage_functions.daemon.Follower``) that carries out the
server's drops, scale-outs and releases and acknowledges them. A server it
cannot reach at start (or later) is retried with backoff while the daemon
serves; a wrong token or another block size exits 2 at start.

TLS (``sdk.cli._tls``): ``--tls-cert PATH --tls-key PATH`` serve TLS (the
certificate must hold the advertised host, checked at start), ``--tls-ca PATH``
is the deployment's CA: every storage function gets its PEM in its invocation to
verify the daemon, and the daemon verifies the metadata server (``--metadata``)
with it. Bound off loopback without a certificate it refuses to start unless
given ``--insecure``."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from funcsion_errors import FuncsionError
from sdk._config import Config
from sdk._constants import ENV_ADMIN_TOKEN

from ._tls import TlsSettingsError, add_tls_arguments, tls_settings

HELP = "run the storage daemon (SION) with local or AWS Lambda storage functions in the foreground"

__all__ = ["HELP", "add_arguments", "build", "daemon_settings", "follow", "run", "ServeDaemonError"]

_AWS_ONLY = ("region", "endpoint_url", "function_prefix")


class ServeDaemonError(FuncsionError):
    """Bad arguments for ``funcsion serve daemon``, or AWS refused a check."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Config()  # the defaults; an unset option takes FUNCSION_<FIELD>, then funcsion.toml, then these
    p.add_argument("--invoker", choices=["local", "aws"], default="local",
                   help="where storage functions run: the local platform (default) or AWS Lambda")
    p.add_argument("--host", default=None, help=f"bind address (default: config host, {d.host})")
    p.add_argument("--port", type=int, default=None,
                   help=f"port, 0 for any free one (default: the --advertise port if it names one, else config "
                        f"daemon_port, {d.daemon_port})")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"bytes per block, as the metadata server's (default: config block_size, {d.block_size})")
    p.add_argument("--advertise", metavar="HOST[:PORT]", default="",
                   help="address the storage functions dial back to (default: the bound one); required with "
                        "--invoker aws: an address of this machine the Lambdas can reach")
    p.add_argument("--token", default="",
                   help="store token: drivers present it, tasks a run token minted from it (default: random)")
    p.add_argument("--root", default=None, help="directory for cos/ and buffer/ (default: temporary)")
    p.add_argument("--cos", default=None,
                   help="COS URL: file:///dir or s3://bucket/prefix[?endpoint_url=URL&region=R] (s3 with aws)")
    p.add_argument("--function-prefix", default=None, metavar="PREFIX",
                   help="(aws) name prefix of the storage Lambdas, as given to `funcsion deploy storage` "
                        "(default funcsion-storage-)")
    p.add_argument("--region", default=None, help="(aws) AWS region (default: the AWS configuration's)")
    p.add_argument("--endpoint-url", default=None, metavar="URL", help="(aws) Lambda endpoint (moto, LocalStack)")
    p.add_argument("--function-memory-mb", type=int, default=None,
                   help=f"memory per function (local default: config function_memory_mb, {d.function_memory_mb}; "
                        "aws default: the deployed MemorySize)")
    p.add_argument("--max-functions", type=int, default=None,
                   help="functions in the pool (local default 48; aws default: how many are deployed)")
    p.add_argument("--group-size", type=int, default=12)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--hello-timeout-s", type=float, default=10.0,
                   help="a new connection must complete its HELLO within this many seconds")
    p.add_argument("--hello-pending-max", type=int, default=None, metavar="N",
                   help="connections waiting for their HELLO at most (default 1024); past it the oldest is "
                        "closed: what unauthenticated peers can make the daemon hold")
    p.add_argument("--upload-delay-s", type=float, default=None,
                   help="write-behind: every object waits this long before its COS upload (default 0, as SION)")
    p.add_argument("--parity-upload-delay-s", type=float, default=None,
                   help="write-behind: a coded object waits this long, and is never uploaded if it is freed "
                        "by then (its parity covers the loss of up to p functions; default 2)")
    p.add_argument("--host-bandwidth-mbps", type=float, default=None, metavar="MB/S",
                   help="model this host's NIC: MB/s each way (10^6 bytes a second), a token bucket every client "
                        "GET and PUT holds to by its coded bytes (a PUT's come in and go out to the functions, a "
                        "GET's the other way); for benchmarks that stand several daemon processes on one host "
                        "for one VM each (`funcsion bench scale`); default 0: unlimited")
    p.add_argument("--state-id", metavar="NAME", default=None,
                   help="this daemon's stable identity: its durable table is shipped to COS under "
                        "<prefix>/control/daemon/NAME/ and a daemon started with an empty --root and the same NAME "
                        f"restores it from there (env FUNCSION_DAEMON_STATE_ID; default: config daemon_state_id, "
                        f"{d.daemon_state_id}); give each daemon of a deployment its own")
    p.add_argument("--daemon-id", metavar="ID", default="",
                   help="one of several daemons of a deployment: its id (daemon-0, daemon-1, ... in the order "
                        "clients list them: --stack daemon=A;B), registered with its storage functions so the "
                        "metadata server names it in their placements; its local functions are sion-ID-I, its COS "
                        "copies go under <cos prefix>/ID, and --state-id defaults to it. Start every daemon of the "
                        "deployment with the same --token (default: the deployment's only daemon)")
    p.add_argument("--control-ship-lag-s", type=float, default=None, metavar="SECONDS",
                   help="ship what the durable table gained to COS this often, off the request path; a lost host "
                        "loses the objects PUT in this window, and the bytes of objects whose COS upload had not "
                        "finished (--upload-delay-s) unless their functions outlived it; 0 ships each record "
                        "before the PUT it records is acknowledged (env "
                        f"FUNCSION_CONTROL_SHIP_LAG_S; default: config control_ship_lag_s, {d.control_ship_lag_s:g})")
    p.add_argument("--metadata", metavar="HOST:PORT", default="",
                   help="follow this metadata server: store chunks where it places them and carry out its "
                        "drops, scale-outs and releases; several shards: 'H:P;H:P' in shard order (one control "
                        "loop each, each shard given the function groups it owns; --group-size must be their "
                        "d+p) (default: a standalone daemon that places chunks itself)")
    p.add_argument("--admin-token", default=None,
                   help=f"the metadata server's admin token, with --metadata (default: env {ENV_ADMIN_TOKEN})")
    add_tls_arguments(p)
    p.add_argument("--json", action="store_true", help="print the address line as JSON")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _addresses(args: argparse.Namespace, warn: Callable[[str], None]) -> dict[str, Any]:
    """Bind and advertise settings, checked: the functions must be able to dial what is advertised."""
    from storage_functions.daemon._config import split_address

    cfg = Config.load(host=args.host, daemon_port=args.port)
    args.host = cfg.host
    port_given = args.port is not None
    args.port = args.port if port_given else 0
    out: dict[str, Any] = {"host": cfg.host, "port": args.port}
    if not 0 <= args.port <= 65535:
        raise ServeDaemonError(f"--port must be 0..65535, got {args.port}")
    adv_host, adv_port = "", 0
    if args.advertise:
        try:
            adv_host, adv_port = split_address(args.advertise)
        except ValueError as exc:
            raise ServeDaemonError(f"--advertise: {exc}") from None
        out["advertise"] = args.advertise
        if adv_port and not args.port:
            out["port"] = adv_port
    if not port_given and "port" in out and not out["port"]:
        out["port"] = cfg.daemon_port
    if args.invoker != "aws":
        return out
    if not args.advertise:
        raise ServeDaemonError(
            "--invoker aws: the storage Lambdas dial out to the daemon and cannot reach "
            f"{args.host}; pass --advertise HOST:PORT (an address of this VM or container that they can "
            "reach, e.g. its private IP in their VPC) and bind it with --host (that IP, or 0.0.0.0)")
    if _loopback(args.host) and not _loopback(adv_host):
        raise ServeDaemonError(
            f"--host {args.host} is loopback, so functions dialing --advertise {args.advertise} cannot connect: "
            f"bind --host {adv_host} (or --host 0.0.0.0 to listen on every interface)")
    if _loopback(adv_host):
        warn(f"--advertise {args.advertise} is loopback: only functions on this machine (an emulator) can dial it")
    if args.host in ("0.0.0.0", "::"):
        warn(f"--host {args.host} listens on every interface: let only the Lambdas' security group and your "
             "workflow reach the port (clients still need the token, functions their invocation secret)")
    return out


def daemon_settings(args: argparse.Namespace, *, warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The ``DaemonConfig`` fields these arguments set (unset ones from the config), checked;
    raises ``ServeDaemonError``. Pure: builds nothing."""
    def say(msg: str) -> None:
        print(f"funcsion serve daemon: warning: {msg}", file=sys.stderr)

    if args.invoker == "aws" and not (args.cos or "").startswith("s3://"):
        got = f"got --cos {args.cos}" if args.cos else "no --cos given"
        raise ServeDaemonError(f"--invoker aws needs --cos s3://bucket/prefix: storage Lambdas cannot reach a "
                               f"local directory ({got})")
    overrides: dict[str, Any] = {**_addresses(args, warn or say), "group_size": args.group_size,
                                 "idle_s": args.idle_s, "hello_timeout_s": args.hello_timeout_s}
    if _follow(args):
        overrides["placement"] = "metadata"  # the metadata server decides where every chunk lives
    if args.token:
        overrides["token"] = args.token
    if getattr(args, "hello_pending_max", None) is not None and args.hello_pending_max < 1:
        raise ServeDaemonError(f"--hello-pending-max {args.hello_pending_max}: give the number of connections "
                               "that may wait for their HELLO at once, at least 1 (default 1024)")
    for name in ("function_memory_mb", "max_functions", "upload_delay_s", "parity_upload_delay_s",
                 "hello_pending_max", "host_bandwidth_mbps"):
        if getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    ident = str(getattr(args, "daemon_id", "") or "")
    if ident and (not ident.replace("-", "").replace("_", "").isalnum() or len(ident) > 64):
        raise ServeDaemonError(f"--daemon-id {ident!r}: give letters, digits, '-' or '_' (at most 64), e.g. daemon-1")
    control = Config.load(daemon_state_id=getattr(args, "state_id", None) or ident or None,
                          control_ship_lag_s=getattr(args, "control_ship_lag_s", None))
    overrides["state_id"] = control.daemon_state_id
    if ident:       # one of several: its functions, COS copies and control state carry its id
        from storage_functions.daemon import DaemonConfig

        overrides["daemon_id"] = ident
        overrides["cos_prefix"] = f"{DaemonConfig().cos_prefix}/{ident}"
        if args.invoker == "local":
            overrides["function_prefix"] = f"{DaemonConfig().function_prefix}-{ident}"
    overrides["control_ship_lag_s"] = control.control_ship_lag_s
    for name in ("upload_delay_s", "parity_upload_delay_s", "host_bandwidth_mbps"):
        if overrides.get(name, 0) < 0:
            raise ServeDaemonError(f"--{name.replace('_', '-')} must be >= 0, got {overrides[name]}")
    if args.invoker == "local":
        given = [f"--{n.replace('_', '-')}" for n in _AWS_ONLY if getattr(args, n) is not None]
        if given:
            raise ServeDaemonError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} only for "
                                   "--invoker aws (the storage Lambdas)")
        cfg = Config.load(function_memory_mb=args.function_memory_mb, block_size=args.block_size)
        overrides.setdefault("function_memory_mb", cfg.function_memory_mb)
        overrides.setdefault("max_functions", 48)
        overrides["block_size"] = cfg.block_size
        overrides["memory_grain"] = cfg.memory_grain
        overrides["max_object_bytes"] = cfg.max_object_size
        if args.cos:
            overrides["cos_url"] = args.cos
    else:  # the storage Lambdas back their memory by the grain the metadata server models
        overrides["memory_grain"] = Config.load().memory_grain
    try:
        t = tls_settings(args, overrides["host"])
    except TlsSettingsError as exc:
        raise ServeDaemonError(str(exc)) from None
    if t.serving and not t.ca:
        raise ServeDaemonError("--tls-cert needs --tls-ca PATH too: every storage function verifies the daemon "
                               "against that CA (ca.pem of `funcsion certs`)")
    overrides.update(tls_cert=t.cert, tls_key=t.key, tls_ca=t.ca)
    return overrides


def _follow(args: argparse.Namespace) -> tuple[str, str] | None:
    """(metadata address, admin token) with ``--metadata``, checked; None without it."""
    from storage_functions.daemon._config import split_address

    token = args.admin_token if args.admin_token is not None else os.environ.get(ENV_ADMIN_TOKEN, "")
    if not args.metadata:
        if args.admin_token:
            raise ServeDaemonError("--admin-token is for --metadata HOST:PORT (the metadata server to follow)")
        return None
    for addr in args.metadata.split(";"):      # several metadata shards: H:P;H:P in shard order
        try:
            _, port = split_address(addr.strip())
        except ValueError as exc:
            raise ServeDaemonError(f"--metadata: {exc}") from None
        if not port:
            raise ServeDaemonError(f"--metadata {args.metadata}: give the metadata server's port too, e.g. "
                                   f"{addr.strip()}:7917")
    if not token:
        raise ServeDaemonError(f"--metadata {args.metadata} needs the metadata server's admin token: pass "
                               f"--admin-token TOKEN or set {ENV_ADMIN_TOKEN} (`funcsion serve metadata` prints it)")
    return args.metadata, token


def build(args: argparse.Namespace, *, warn: Callable[[str], None] | None = None) -> Any:
    """The store ``serve daemon`` runs (not started): a ``LocalStore`` or an
    ``AwsStore``. Raises ``ServeDaemonError`` for bad arguments; ``warn``
    gets the warnings (default: stderr)."""
    from storage_functions.exceptions import StorageError

    overrides = daemon_settings(args, warn=warn)
    try:
        if args.invoker == "local":
            from storage_functions.daemon import LocalStore

            return LocalStore(args.root, **overrides)
        return _build_aws(args, overrides)
    except StorageError as exc:
        raise ServeDaemonError(str(exc)) from None
    except ValueError as exc:  # DaemonConfig's checks name the field
        raise ServeDaemonError(str(exc)) from None
    except Exception as exc:  # botocore: no credentials, no region, endpoint unreachable
        if type(exc).__module__.startswith("botocore"):
            hint = " (pass --region)" if type(exc).__name__ == "NoRegionError" else ""
            raise ServeDaemonError(f"AWS: {type(exc).__name__}: {exc}{hint}") from None
        raise


def _build_aws(args: argparse.Namespace, overrides: dict[str, Any]) -> Any:
    import os

    from storage_functions.daemon import AwsStore
    from storage_functions.deploy import DEFAULT_PREFIX

    if args.root:
        overrides["buffer_dir"] = os.path.join(args.root, "buffer")
    return AwsStore(args.cos, function_prefix=args.function_prefix or DEFAULT_PREFIX, region_name=args.region,
                    endpoint_url=args.endpoint_url, **overrides)


def follow(store: Any, metadata: str, admin_token: str, *, warn: Callable[[str], None], tls_ca: str = ""
           ) -> list[Any]:
    """Start the control loops of ``store``'s daemon, one per metadata shard of ``metadata``
    (``H:P``, or ``H:P;H:P`` in shard order; over TLS verified against ``tls_ca``, PEM text, when
    given); a wrong token or another block size raise ``ServeDaemonError``, an unreachable
    server is retried."""
    from funcsion_rpc.errors import ServiceUnavailable, Unauthorized
    from sdk.local._control import follow_shards
    from storage_functions.exceptions import ControlError

    followers = follow_shards(store.daemon, metadata, admin_token, tls_ca=tls_ca)
    for follower in followers:
        try:
            follower.hello()
        except ServiceUnavailable as exc:
            if "TLS" in exc.message:                   # a wrong CA, or a server without TLS: no retry helps
                for f in followers:
                    f.close()
                raise ServeDaemonError(f"--metadata {metadata}: {exc.message}") from None
            warn(f"{exc.message}; serving anyway and retrying with backoff")
        except (Unauthorized, ControlError) as exc:
            for f in followers:
                f.close()
            what = exc.message if isinstance(exc, Unauthorized) else str(exc)
            raise ServeDaemonError(f"--metadata {metadata}: {what}") from None
    return [f.start() for f in followers]


def run(args: argparse.Namespace) -> int:
    from storage_functions.exceptions import StorageError

    def say(msg: str) -> None:
        print(f"funcsion serve daemon: warning: {msg}", file=sys.stderr, flush=True)

    store = build(args)
    following = _follow(args)
    followers: list[Any] = []
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        try:
            store.start()
            if following is not None:
                ca = store.config.tls_ca
                followers = follow(store, *following, warn=say,
                                  tls_ca=open(ca, encoding="ascii").read() if ca else "")
        except (OSError, StorageError, ServeDaemonError) as exc:
            store.stop()
            if isinstance(exc, ServeDaemonError):
                raise
            where = f"cannot listen on {args.host}:{store.config.port}: " if isinstance(exc, OSError) else ""
            raise ServeDaemonError(where + str(getattr(exc, "strerror", None) or exc)) from None
        try:
            host, port = store.address
            info = {"address": f"{host}:{port}", "token": store.token, "invoker": args.invoker,
                    "tls": bool(store.config.tls_cert)}
            if following is not None:
                info["metadata"] = following[0]
            if args.invoker == "aws" or args.advertise:
                dhost, dport = store.config.dial_address(store.address)
                info["advertise"] = f"{dhost}:{dport}"
            line = json.dumps(info) if args.json else (
                f"daemon on {host}:{port} token {store.token}"
                + (f" (functions dial {info['advertise']})" if "advertise" in info else "")
                + (f", following metadata {info['metadata']}" if "metadata" in info else ""))
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            try:
                while not stop.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass
        finally:
            for follower in followers:
                follower.close()
            store.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
