"""``funcsion serve daemon``: run the SION client daemon in the foreground
with storage functions on the local Lambda platform and COS in a directory
(or ``--cos s3://bucket/prefix``). Prints the address and token; SIGTERM or
Ctrl-C stops it cleanly."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

HELP = "run the storage daemon (SION) with local storage functions in the foreground"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    p.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    p.add_argument("--token", default="",
                   help="store token: drivers present it, tasks a run token minted from it (default: random)")
    p.add_argument("--root", default=None, help="directory for cos/ and buffer/ (default: temporary)")
    p.add_argument("--cos", default=None, help="COS URL (file:///dir or s3://bucket/prefix)")
    p.add_argument("--function-memory-mb", type=int, default=1536)
    p.add_argument("--max-functions", type=int, default=48)
    p.add_argument("--group-size", type=int, default=12)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--hello-timeout-s", type=float, default=10.0,
                   help="a new connection must complete its HELLO within this many seconds")
    p.add_argument("--json", action="store_true", help="print the address line as JSON")


def run(args: argparse.Namespace) -> int:
    from storage_functions.daemon import LocalStore

    overrides: dict[str, Any] = {"host": args.host, "port": args.port, "function_memory_mb": args.function_memory_mb,
                                 "max_functions": args.max_functions, "group_size": args.group_size,
                                 "idle_s": args.idle_s, "hello_timeout_s": args.hello_timeout_s}
    if args.token:
        overrides["token"] = args.token
    if args.cos:
        overrides["cos_url"] = args.cos
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
