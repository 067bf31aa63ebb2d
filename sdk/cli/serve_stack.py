"""``funcsion serve stack``: the whole embedded stack in the foreground (what
``funcsion up`` starts in the background). Writes ``<state_dir>/stack.json``
with its endpoints and tokens (mode 0600) and removes it on SIGTERM. With the config's
``tls_cert``/``tls_key``/``tls_ca`` (``FUNCSION_TLS_*``) it serves TLS (``Stack``);
without a certificate and bound off loopback it refuses to start unless given
``--insecure``. ``--metadata-shards M`` runs M metadata servers (``Stack``)."""

from __future__ import annotations

import argparse
import signal
import threading

__all__ = ["HELP", "add_arguments", "run", "shard_count"]

HELP = "run the embedded stack (metadata server, daemon, local platform, COS) in the foreground"


def shard_count(text: str) -> int:
    """``--metadata-shards``: a whole number, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected how many metadata shards, at least 1; got {text!r}")
    return int(text)


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
        with Stack(cfg, metadata_shards=args.metadata_shards) as stack:
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
