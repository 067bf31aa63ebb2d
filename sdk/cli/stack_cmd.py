"""``funcsion up`` and ``funcsion down``: keep a local stack running between runs.

``up`` starts ``funcsion serve stack`` as a background process (its output in
``<state_dir>/logs/stack.log``) and waits until it has written its endpoints;
``run`` then uses it. ``down`` stops it with SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from storage_functions.private_files import open_private, private_dir
from wds import FuncsionError

from .serve_stack import DAEMONS_HELP, daemon_count, shard_count

__all__ = ["add_parser", "up", "down"]


class StackError(FuncsionError):
    pass


def add_parser(sub: Any) -> None:
    up_p: argparse.ArgumentParser = sub.add_parser(
        "up", help="start a local stack in the background",
        description="Start a local stack (metadata server, daemon, storage functions, COS directory) in the "
                    "background and wait until it is up; `funcsion run` then uses it instead of starting one per "
                    "run, until `funcsion down`. Its output goes to <state-dir>/logs/stack.log.")
    up_p.add_argument("--state-dir", default=None, help="state directory (default .funcsion)")
    up_p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for it to come up")
    up_p.add_argument("--metadata-shards", type=shard_count, default=1, metavar="M",
                      help="run M metadata servers (shards; each owns the runs and storage-function groups "
                           "its rendezvous hash gives it); stack.json lists them in shard order (default 1)")
    up_p.add_argument("--daemons", type=daemon_count, default=1, metavar="N", help=DAEMONS_HELP)
    up_p.set_defaults(run=up, _parser=up_p)
    down_p: argparse.ArgumentParser = sub.add_parser(
        "down", help="stop the local stack started by `funcsion up`",
        description="Stop the local stack that `funcsion up` started in this state directory (SIGTERM, then "
                    "wait for it to exit); later runs start a stack of their own again.")
    down_p.add_argument("--state-dir", default=None, help="state directory (default .funcsion)")
    down_p.set_defaults(run=down, _parser=down_p)


def _state_dir(args: argparse.Namespace) -> Path:
    from sdk._config import Config

    return Path(Config.load(state_dir=args.state_dir).state_dir).resolve()


def up(args: argparse.Namespace) -> int:
    from sdk.local._stack import read_stack_file

    state = _state_dir(args)
    running = read_stack_file(state)
    if running is not None:
        print(f"a stack is already up (pid {running['pid']}): metadata {running['metadata']}, "
              f"daemon {running['daemon']}")
        return 0
    private_dir(state, tighten=True)
    private_dir(state / "logs")
    log = open_private(state / "logs" / "stack.log", "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "serve", "stack", "--state-dir", str(state),
                                 "--metadata-shards", str(args.metadata_shards),
                                 "--daemons", str(args.daemons or "auto")],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        info = read_stack_file(state)
        if info is not None and info.get("pid") == proc.pid:
            print(f"funcsion stack up (pid {proc.pid}): metadata {info['metadata']}, daemon {info['daemon']}")
            return 0
        if proc.poll() is not None:
            why = _last_line(state / "logs" / "stack.log")
            raise StackError(f"the stack exited with code {proc.returncode} while starting"
                             + (f" ({why})" if why else "") + f"; see {state / 'logs' / 'stack.log'}")
        time.sleep(0.1)
    proc.terminate()
    raise StackError(f"the stack did not come up within {args.timeout:g} s; see {state / 'logs' / 'stack.log'}")


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def down(args: argparse.Namespace) -> int:
    from sdk.local._stack import STACK_FILE, read_stack_file

    state = _state_dir(args)
    info = read_stack_file(state)
    if info is None:
        (state / STACK_FILE).unlink(missing_ok=True)
        print("no stack is up")
        return 0
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            print(f"funcsion stack (pid {pid}) stopped")
            return 0
        time.sleep(0.1)
    raise StackError(f"the stack (pid {pid}) did not stop within 30 s; kill it with `kill {pid}`")
