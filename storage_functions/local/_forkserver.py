"""The platform's side of a fork server (``_zygote.py``): start it, ask it for
a child, and follow each child's life.

``ForkServer(modules, env=..., sys_path=...)`` starts a zygote that imports
``modules`` once; ``fork(env, fds)`` returns a ``ForkedProcess``, which
behaves like the ``subprocess.Popen`` the platform otherwise holds (``pid``,
``returncode``, ``poll``, ``wait``, ``send_signal``): signals go through a
pidfd (no pid-reuse race), exit codes come from the zygote, which reaps its
children. A reader thread takes the zygote's answers and exit notices. When
the zygote is gone its children's exit is still seen (the pidfd turns
readable) but their code is unknown (``returncode`` stays None,
``status_unknown`` is True). ``ForkServers`` keeps one per set of preload
modules and function environment for a platform, started on first use and
restarted when one died; ``bytecode_env`` is how instances cache bytecode.
Not here: when to fork (``_platform``), what a child runs (``_worker``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..exceptions import ForkServerError
from ..private_files import private_dir
from ..readiness import readable
from . import _zygote

__all__ = ["ForkServer", "ForkServers", "ForkedProcess", "ForkServerError", "ZygoteSpec", "bytecode_env"]


class ZygoteSpec(Protocol):
    """What a fork server is made from, of a deployed function (``_instance.FunctionSpec``):
    its name (for the log), the modules it preloads and its environment."""

    @property
    def name(self) -> str: ...

    @property
    def preload(self) -> tuple[str, ...]: ...

    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...

log = logging.getLogger("storage_functions.local")
_ZYGOTE = Path(_zygote.__file__).resolve()


class ForkedProcess:
    """A child of the zygote, seen from the platform (``Popen``'s interface, the parts used)."""

    def __init__(self, pid: int, pidfd: int, server: ForkServer) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.status_unknown = False
        self._pidfd = pidfd
        self._server = server
        self._done = threading.Event()
        self._lock = threading.Lock()

    def _exited(self, code: int | None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self.returncode = code
            self.status_unknown = code is None
            self._done.set()

    def _gone(self, timeout: float | None) -> bool:
        """Whether the process ended (within ``timeout``), when the zygote can no longer say how."""
        with self._lock:
            fd = self._pidfd
        if fd < 0:
            return True
        ready = readable([fd], timeout)
        return bool(ready)

    def poll(self) -> int | None:
        if not self._done.is_set() and self._server.dead and self._gone(0):
            self._exited(None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"forked instance {self.pid}", timeout or 0.0)
            if self._server.dead:
                if self._gone(left):
                    self._exited(None)
                continue
            self._done.wait(0.1 if left is None else min(left, 0.1))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._done.is_set() and not self.status_unknown or self._pidfd < 0:
                raise ProcessLookupError(self.pid)
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def release(self) -> None:
        """Close the pidfd (once the process ended and nothing will signal it)."""
        with self._lock:
            fd, self._pidfd = self._pidfd, -1
        if fd >= 0:
            os.close(fd)


class ForkServer:
    """One zygote. ``start()`` blocks until it has imported its modules (or raises
    ``ForkServerError``); ``fork`` is thread-safe; ``close`` ends it."""

    _ids = itertools.count(1)

    def __init__(self, modules: Sequence[str], *, env: Mapping[str, str], sys_path: Sequence[str],
                 start_timeout_s: float = 60.0) -> None:
        self.modules = tuple(modules)
        self.env = dict(env)
        self.sys_path = list(sys_path)
        self.start_timeout_s = start_timeout_s
        self.preload_ms = 0.0
        self.dead = False
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, tuple[int, int] | None] = {}  # fork id -> (pid, pidfd), None: failed
        self._children: dict[int, ForkedProcess] = {}
        self._reader: threading.Thread | None = None

    def start(self) -> ForkServer:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-u", str(_ZYGOTE), str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._sock = mine
        try:
            mine.sendall(json.dumps({"op": "preload", "sys_path": self.sys_path,
                                     "modules": list(self.modules)}).encode())
            mine.settimeout(self.start_timeout_s)
            raw = mine.recv(_zygote.MAX_PACKET)
            mine.settimeout(None)
            msg = json.loads(raw) if raw else {"op": "preload_error", "error": "the fork server exited"}
        except (OSError, ValueError) as exc:
            self.close()
            raise ForkServerError(f"fork server for {', '.join(self.modules)}: {exc}") from None
        if msg.get("op") != "ready":
            self.close()
            raise ForkServerError(f"fork server cannot import {', '.join(self.modules)}: {msg.get('error')}")
        self.preload_ms = float(msg.get("ms", 0.0))
        self._reader = threading.Thread(target=self._read_loop, name="local-lambda-forkserver", daemon=True)
        self._reader.start()
        return self

    def fork(self, env: Mapping[str, str], fds: Sequence[int], timeout_s: float = 30.0) -> ForkedProcess:
        """A new child with ``env`` and ``fds`` (request read end, response write end[, log]);
        the caller closes its copies of ``fds`` afterwards."""
        fid = next(self._ids)
        with self._cond:
            if self.dead or self._sock is None:
                raise ForkServerError("the fork server is gone")
            self._replies[fid] = None
        try:
            with self._send_lock:
                socket.send_fds(self._sock, [json.dumps({"op": "fork", "id": fid, "env": dict(env)}).encode()],
                                list(fds))
        except OSError as exc:
            with self._cond:
                self._replies.pop(fid, None)
            raise ForkServerError(f"cannot ask the fork server for an instance: {exc}") from None
        with self._cond:
            if not self._cond.wait_for(lambda: self._replies.get(fid) is not None or self.dead, timeout_s):
                self._replies.pop(fid, None)
                raise ForkServerError(f"the fork server did not fork within {timeout_s:g} s")
            reply = self._replies.pop(fid, None)
            if reply is None:
                raise ForkServerError("the fork server exited before it forked")
            pid, _ = reply
            return self._children[pid]

    def _read_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        try:
            while True:
                data, fds, _, _ = socket.recv_fds(sock, _zygote.MAX_PACKET, _zygote.MAX_FDS)
                if not data:
                    break
                msg = json.loads(data)
                with self._cond:
                    if msg["op"] == "forked" and fds:
                        pid = int(msg["pid"])
                        self._children[pid] = ForkedProcess(pid, fds[0], self)
                        if msg["id"] in self._replies:
                            self._replies[msg["id"]] = (pid, fds[0])
                        self._cond.notify_all()
                        continue
                    for fd in fds:
                        os.close(fd)
                    if msg["op"] == "exited":
                        child = self._children.pop(int(msg["pid"]), None)
                        if child is not None:
                            child._exited(int(msg["code"]))
        except (OSError, ValueError) as exc:
            log.debug("fork server connection ended: %r", exc)
        finally:
            with self._cond:
                self.dead = True
                self._cond.notify_all()

    def close(self) -> None:
        """End the zygote (its children are the platform's to close) and wait for it."""
        with self._cond:
            self.dead = True
            sock, self._sock = self._sock, None
            self._cond.notify_all()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5)
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bytecode_env(where: str | None) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to set, variables to drop) so an instance writes and reuses the bytecode of
    what it imports under ``where`` (``PlatformConfig.bytecode_dir``; None or "off": Python's own
    settings stand). Makes the directory (0700); one that another user owns or may write to is
    not used (its bytecode would run as ours), with a warning."""
    if not where or where == "off":
        return {}, ()
    try:
        st = private_dir(where).stat()
    except OSError as exc:
        log.warning("bytecode cache %s cannot be made (%s); instances cache no bytecode", where, exc)
        return {}, ()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        log.warning("bytecode cache %s is not this user's alone (owner %d, mode %o); instances cache no "
                    "bytecode (set FUNCSION_BYTECODE_DIR to a private directory)", where, st.st_uid,
                    st.st_mode & 0o777)
        return {}, ()
    return {"PYTHONPYCACHEPREFIX": where}, ("PYTHONDONTWRITEBYTECODE",)


class ForkServers:
    """A platform's fork servers, one per (preload modules, function environment)."""

    def __init__(self, enabled: bool | None, bytecode_dir: str | None, start_timeout_s: float) -> None:
        self.enabled = bool(enabled)
        self.bytecode_dir = bytecode_dir
        self.start_timeout_s = start_timeout_s
        self._servers: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], ForkServer] = {}
        self._lock = threading.Lock()  # held while one starts
        self._failed: set[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = set()  # not tried again
        self._closed = False
        self._bytecode: tuple[dict[str, str], tuple[str, ...]] | None = None

    def bytecode_env(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """``bytecode_env(bytecode_dir)``, decided (and warned about) once per platform."""
        if self._bytecode is None:
            self._bytecode = bytecode_env(self.bytecode_dir)
        return self._bytecode

    def get(self, spec: ZygoteSpec) -> ForkServer | None:
        """The running fork server for ``spec`` (started now if needed, again if it died); None
        when the function preloads nothing, forking is off, or its fork server could not start
        (its modules cannot be imported: logged once, not tried again; its instances start
        fresh interpreters)."""
        if not spec.preload or not self.enabled:
            return None
        key = (spec.preload, spec.env)
        with self._lock:
            server = self._servers.get(key)
            if server is not None and not server.dead:
                return server
            if self._closed or key in self._failed:
                return None
            extra, drop = self.bytecode_env()
            env = {k: v for k, v in os.environ.items() if k not in drop}
            env.update(extra)
            env.update(dict(spec.env))
            try:
                server = ForkServer(spec.preload, env=env, sys_path=sys.path,
                                    start_timeout_s=self.start_timeout_s).start()
            except (ForkServerError, OSError) as exc:
                log.warning("%s: no fork server (%s); its instances start fresh interpreters", spec.name, exc)
                self._servers.pop(key, None)
                self._failed.add(key)
                return None
            self._servers[key] = server
            return server

    def close(self) -> None:
        with self._lock:
            self._closed = True
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.close()
