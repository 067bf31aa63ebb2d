"""``funcsion serve stack``: the whole embedded stack in the foreground (what
``funcsion up`` starts in the background). Writes ``<state_dir>/stack.json``
with its endpoints and tokens (mode 0600) and removes it on SIGTERM. With the config's
``tls_cert``/``tls_key``/``tls_ca`` (``FUNCSION_TLS_*``) it serves TLS (``Stack``);
without a certificate and bound off loopback it refuses to start unless given
``--insecure``. ``--metadata-shards M`` runs M metadata servers, ``--daemons N`` N daemon
processes (``auto``: one per core, at most one per erasure-code group of the pool's
functions; the default, 1, runs the daemon in this process, as it always did) (``Stack``)."""

from __future__ import annotations

import argparse
import signal
import threading

__all__ = ["HELP", "add_arguments", "daemon_count", "daemons_for", "run", "shard_count"]

HELP = "run the embedded stack (metadata server, daemon, local platform, COS) in the foreground"


def shard_count(text: str) -> int:
    """``--metadata-shards``: a whole number, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected how many metadata shards, at least 1; got {text!r}")
    return int(text)


def daemon_count(text: str) -> int:
    """``--daemons``: a whole number, at least 1, or ``auto`` (0: one per core, ``daemons_for``)."""
    if text == "auto":
        return 0
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected how many daemons, at least 1, or 'auto'; got {text!r}")
    return int(text)


#: ``--daemons``' help, shared by ``funcsion up``
DAEMONS_HELP = ("run N daemon processes on this host, each owning its own storage functions (whole "
                "erasure-code groups, named sion-dK-I) and following every metadata shard; the metadata "
                "server places each object on one of them (a rendezvous hash of its key over those with room) "
                "and clients send its data there; stack.json lists them as daemon-K=HOST:PORT;... "
                "('auto': one per core, at most one per erasure-code group of the pool's 48 functions; "
                "default 1: the daemon in the stack's own process, as before)")


def daemons_for(asked: int, cores: int | None = None) -> int:
    """How many daemons ``--daemons asked`` runs (0: one per core of this host, capped so each
    owns at least one erasure-code group of the default pool)."""
    import os

    from sdk._config import Config
    from sdk.local._stack import default_daemons
    from storage_functions.daemon import DaemonConfig

    if asked:
        return asked
    c = Config.load()
    return default_daemons(cores if cores is not None else os.cpu_count(), DaemonConfig().max_functions,
                           c.ec_data + c.ec_parity)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from sdk._config import Config

    d = Config()  # the defaults; an unset option takes FUNCSION_<FIELD>, then funcsion.toml, then these
    p.add_argument("--state-dir", default=None,
                   help=f"where to keep COS, journal, logs and stack.json (default: config state_dir, {d.state_dir})")
    p.add_argument("--host", default=None, help=f"address to bind (default: config host, {d.host})")
    p.add_argument("--metadata-port", type=int, default=None,
                   help=f"metadata server port (default: config metadata_port, {d.metadata_port})")
    p.add_argument("--daemon-port", type=int, default=None,
                   help=f"daemon port (default: config daemon_port, {d.daemon_port})")
    p.add_argument("--metadata-shards", type=shard_count, default=1, metavar="M",
                   help="run M metadata servers (shards): shard 0 on --metadata-port, the others on free ports; "
                        "each owns the runs and storage-function groups its rendezvous hash gives it, the daemon "
                        "follows them all; stack.json lists them in shard order, joined by ';' (default 1)")
    p.add_argument("--daemons", type=daemon_count, default=1, metavar="N", help=DAEMONS_HELP)
    p.add_argument("--insecure", action="store_true",
                   help="allow plaintext on a non-loopback --host (without FUNCSION_TLS_CERT the stack speaks plaintext)")


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._stack import STACK_FILE, Stack

    from storage_functions.tls import is_loopback

    from ._tls import TlsSettingsError

    cfg = Config.load(state_dir=args.state_dir, host=args.host, metadata_port=args.metadata_port,
                      daemon_port=args.daemon_port)
    if not is_loopback(cfg.host) and not cfg.tls_cert and not args.insecure:
        raise TlsSettingsError(f"--host {cfg.host} is not loopback and no certificate was given: set "
                               "FUNCSION_TLS_CERT, FUNCSION_TLS_KEY and FUNCSION_TLS_CA (`funcsion certs DIR --name "
                               "HOST` makes them), or pass --insecure to speak plaintext on the network")
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        daemons = daemons_for(args.daemons)
        with Stack(cfg, metadata_shards=args.metadata_shards, daemons=daemons,
                   daemon_process=daemons > 1 or None) as stack:      # several: one process each, beyond the GIL
            path = stack.write_stack_file()
            ep = stack.endpoints
            print(f"funcsion stack up: metadata {ep.metadata}, daemon {ep.daemon}, state {stack.root}", flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
            path.unlink(missing_ok=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"funcsion stack down ({STACK_FILE} removed)", flush=True)
    return 0
