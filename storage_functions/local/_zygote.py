"""The fork server of the local platform (a "zygote"): one process that imports
a function's heavy modules once (``sdk`` for task handlers) and then forks
each new instance from itself, so an instance starts as a warm Lambda
container would, in milliseconds instead of a fresh interpreter's hundreds.
Run as a script by path (``python -P -u _zygote.py CTRL_FD``), like
``_worker.py``, whose loop each forked child then runs.

Protocol on ``CTRL_FD``, a ``SOCK_SEQPACKET`` unix socket (one JSON object per
packet, file descriptors as ``SCM_RIGHTS``):

- parent -> zygote, first: ``{"op": "preload", "sys_path": [...], "modules": [...]}``;
  answered ``{"op": "ready", "ms": ...}`` or ``{"op": "preload_error", "error": ...}``
  (then the zygote exits);
- parent -> zygote: ``{"op": "fork", "id": n, "env": {...}}`` with the child's
  request-read and response-write pipe ends (and its log file, if any); answered
  ``{"op": "forked", "id": n, "pid": p}`` with a pidfd of the child, which the
  parent signals and polls without any pid-reuse race;
- zygote -> parent, whenever a child ends: ``{"op": "exited", "pid": p, "code": c}``
  (``code`` as ``Popen.returncode``: negative for a signal).

The zygote stays single-threaded, so a fork copies no half-held lock. A child
closes the zygote's socket, starts its own session, takes its environment and
file descriptors, and runs ``_worker.main``. EOF on ``CTRL_FD`` (the platform
closed it, or died) ends the zygote; its children see EOF on their own request
pipes. Not here: when instances start or end (``_platform``), the parent's side
(``_forkserver``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable

__all__ = ["main", "MAX_PACKET", "MAX_FDS"]

MAX_PACKET = 1 << 20
MAX_FDS = 4


def _load_worker_main() -> Callable[[list[str]], int]:
    """``_worker.main``, loaded by path under a private name (this script imports nothing of funcsion)."""
    path = Path(__file__).resolve().with_name("_worker.py")
    spec = importlib.util.spec_from_file_location("_funcsion_local_worker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.main  # type: ignore[no-any-return]


def _send(ctrl: socket.socket, msg: dict[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(ctrl, [json.dumps(msg).encode()], list(fds))


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def _reap(ctrl: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(ctrl, {"op": "exited", "pid": pid, "code": _exit_code(status)})


def _child(ctrl: socket.socket, wake: tuple[int, int], msg: dict[str, Any], fds: list[int],
           worker_main: Callable[[list[str]], int]) -> None:
    """In the forked child: become the instance; never returns."""
    code = 1
    try:
        ctrl.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        os.setsid()  # a terminal's Ctrl-C is for the platform's process to handle
        req_r, resp_w = fds[0], fds[1]
        if len(fds) > 2:
            os.dup2(fds[2], 1)
            os.dup2(fds[2], 2)
            os.close(fds[2])
        os.environ.clear()
        os.environ.update(msg["env"])
        code = worker_main(["_worker.py", str(req_r), str(resp_w)])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report, then end like a crashed runtime
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the log may be gone
                pass
        os._exit(code)


def main(argv: list[str]) -> int:
    ctrl = socket.socket(fileno=int(argv[1]))
    raw = ctrl.recv(MAX_PACKET)
    if not raw:
        return 0
    hello = json.loads(raw)
    sys.path[:] = list(hello["sys_path"])
    t0 = time.perf_counter()
    try:
        worker_main = _load_worker_main()
        for name in hello["modules"]:
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001 - the platform falls back to fresh interpreters
        _send(ctrl, {"op": "preload_error", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _send(ctrl, {"op": "ready", "ms": (time.perf_counter() - t0) * 1000.0})
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll below through wake_w
    # poll, not select: CTRL_FD keeps the parent's number, past FD_SETSIZE (1024) in a parent
    # holding many sockets (select raised "filedescriptor out of range" in a long bench)
    poller = select.poll()
    poller.register(ctrl.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(ctrl)
        if ctrl.fileno() not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(ctrl, MAX_PACKET, MAX_FDS)
        if not data:
            return 0
        msg = json.loads(data)
        if msg.get("op") != "fork" or len(fds) < 2:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            _child(ctrl, (wake_r, wake_w), msg, fds, worker_main)
        pidfd = os.pidfd_open(pid)  # before any reaping: the pid cannot be reused yet
        try:
            _send(ctrl, {"op": "forked", "id": msg["id"], "pid": pid}, [pidfd])
        finally:
            os.close(pidfd)
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
