"""``funcsion serve daemon``: run the SION client daemon in the foreground
with storage functions on the local Lambda platform and COS in a directory
(or ``--cos s3://bucket/prefix``). Host, port, block size and function memory
left unset take the config's (``FUNCSION_<FIELD>``, funcsion.toml, default:
127.0.0.1:7918), as ``funcsion up`` does. Prints the address and token;
SIGTERM or Ctrl-C stops it cleanly."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from sdk._config import Config

HELP = "run the storage daemon (SION) with local storage functions in the foreground"

__all__ = ["HELP", "add_arguments", "daemon_settings", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Config()  # the defaults; an unset option takes FUNCSION_<FIELD>, then funcsion.toml, then these
    p.add_argument("--host", default=None, help=f"bind address (default: config host, {d.host})")
    p.add_argument("--port", type=int, default=None,
                   help=f"port, 0 for any free one (default: config daemon_port, {d.daemon_port})")
    p.add_argument("--token", default="", help="run token clients must present (default: random)")
    p.add_argument("--root", default=None, help="directory for cos/ and buffer/ (default: temporary)")
    p.add_argument("--cos", default=None, help="COS URL (file:///dir or s3://bucket/prefix)")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"bytes per block, as the metadata server's (default: config block_size, {d.block_size})")
    p.add_argument("--function-memory-mb", type=int, default=None,
                   help=f"memory of each storage function (default: config function_memory_mb, "
                        f"{d.function_memory_mb})")
    p.add_argument("--max-functions", type=int, default=48)
    p.add_argument("--group-size", type=int, default=12)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--json", action="store_true", help="print the address line as JSON")


def daemon_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``DaemonConfig`` fields these arguments set, unset ones from the config."""
    cfg = Config.load(host=args.host, daemon_port=args.port, block_size=args.block_size,
                      function_memory_mb=args.function_memory_mb)
    out: dict[str, Any] = {"host": cfg.host, "port": cfg.daemon_port, "block_size": cfg.block_size,
                           "function_memory_mb": cfg.function_memory_mb, "max_object_bytes": cfg.max_object_size,
                           "max_functions": args.max_functions, "group_size": args.group_size,
                           "idle_s": args.idle_s}
    if args.token:
        out["token"] = args.token
    if args.cos:
        out["cos_url"] = args.cos
    return out


def run(args: argparse.Namespace) -> int:
    from storage_functions.daemon import LocalStore

    overrides = daemon_settings(args)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with LocalStore(args.root, **overrides) as st:
            host, port = st.address
            info = {"address": f"{host}:{port}", "token": st.token}
            sys.stdout.write((json.dumps(info) if args.json else f"daemon on {host}:{port} token {st.token}") + "\n")
            sys.stdout.flush()
            try:
                while not stop.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
