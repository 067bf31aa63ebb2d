"""The embedded stack's daemon in a child process, so that it can really be killed
(``funcsion run --restart-daemon-after S``): :class:`DaemonProcess` starts
``python -m sdk.local._daemon_proc`` with the daemon's settings on stdin; the
child runs a ``LocalStore`` (the SION daemon, its local Lambda platform and
the COS directory) and the control loop following the stack's metadata server,
as ``funcsion serve daemon --metadata`` does, and prints its address once it
listens. ``kill`` is SIGKILL: the table, the buffer and COS are left as they
are, and the platform's instances die with the daemon (their memory too): left
alone they would end a moment later (their connections to the daemon break, then
their request pipes), so ``kill`` SIGKILLs them at once and returns once they are
gone (on Linux: they are the processes holding the platform's log files open),
as a host loss would take them;
``start`` again on the same port rebuilds the table from the durable log
(``storage_functions.daemon._restore``). The child outlives no parent: the
parent keeps its stdin open, and when that closes (the parent died, even of
SIGKILL: a ``funcsion up`` stack killed with its daemons in processes of their
own) the child stops too, so no orphan holds the port or the state directory.
Not for AWS.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from storage_functions.daemon import DaemonConfig
from storage_functions.readiness import readable

from ._stack_errors import DaemonProcessError

__all__ = ["DaemonProcess", "DaemonProcessError"]


class DaemonProcess:
    """Parent side: ``start()``, ``kill()``, ``restart()``, ``stop()``; ``address``,
    ``token`` and ``config`` as a ``LocalStore`` has them."""

    def __init__(self, root: str, config: DaemonConfig, *, metadata: str, admin_token: str,
                 platform: dict[str, Any], log_path: str, start_timeout_s: float = 60.0) -> None:
        self.root, self.config = root, config
        self.metadata, self.admin_token = metadata, admin_token
        self.platform = platform
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.address: tuple[str, int] = (config.host, config.port)
        self.restarts = 0
        self.functions_killed = 0       # processes of its platform that ``kill`` ended
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> DaemonProcess:
        spec = {"root": self.root, "config": asdict(self.config), "metadata": self.metadata,
                "admin_token": self.admin_token, "platform": self.platform}
        here = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p))
        with open(self.log_path, "a") as log:
            proc = subprocess.Popen([sys.executable, "-m", "sdk.local._daemon_proc"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(spec) + "\n")
        proc.stdin.flush()      # kept open: its end tells the child that this process is gone
        ready = readable([proc.stdout], self.start_timeout_s)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self._reap()
            raise DaemonProcessError(f"the daemon process did not start within {self.start_timeout_s:g} s; "
                                     f"see {self.log_path}")
        host, port = json.loads(line)["address"]
        self.address = (str(host), int(port))
        if not self.config.port:  # a restart listens where clients and functions already dial
            from dataclasses import replace

            self.config = replace(self.config, port=int(port))
        return self

    def kill(self) -> None:
        """SIGKILL: nothing is flushed, closed or uploaded; the storage function instances
        (and the platform's fork server) are SIGKILLed too (the module docstring)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
            self._reap()
            self.functions_killed += _kill_holders(self._log_files)

    def _log_files(self, path: str) -> bool:
        """Whether ``path`` is one of this daemon's log files: its own, its functions'."""
        logs = os.path.dirname(os.path.abspath(self.log_path))
        name = os.path.basename(path)
        return os.path.dirname(path) in (logs, os.path.abspath(str(self.platform.get("log_dir", logs)))) and (
            path == os.path.abspath(self.log_path) or name.startswith(f"{self.config.function_prefix}-"))

    def restart(self) -> None:
        """kill -9, then start again on the same port, root and token."""
        self.kill()
        self.start()
        self.restarts += 1

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the child stops its control loop and daemon cleanly."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
            self._reap()

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:     # a child that died unread leaves a broken pipe
                    pass


def _kill_holders(owned: Any, timeout_s: float = 10.0) -> int:
    """SIGKILL every other process holding a file open that ``owned(path)`` accepts, and wait
    until none does; returns how many there were (0 where there is no ``/proc``)."""
    import time

    deadline = time.monotonic() + timeout_s
    killed: set[int] = set()
    while True:
        pids = _holders(owned)
        if not pids:
            return len(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise DaemonProcessError(f"processes {sorted(pids)} of the killed daemon's platform did not end "
                                     f"within {timeout_s:g} s of SIGKILL")
        time.sleep(0.01)    # the kernel takes a moment to close a killed process's files


def _holders(owned: Any) -> list[int]:
    """The processes other than this one with a file open that ``owned(path)`` accepts."""
    me, found = os.getpid(), []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:             # gone, or another user's
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and owned(target):
                found.append(pid)
                break
    return found


def _child() -> int:
    """The child: read the spec, serve until SIGTERM."""
    from sdk.local._control import follow_shards
    from storage_functions.daemon import LocalStore
    from storage_functions.local import PlatformConfig

    spec = json.loads(sys.stdin.readline())
    pcfg = dict(spec["platform"])
    if "idle_reclaim_s" in pcfg:
        pcfg["idle_reclaim_s"] = tuple(pcfg["idle_reclaim_s"])
    store = LocalStore(spec["root"], config=DaemonConfig(**spec["config"]), platform_config=PlatformConfig(**pcfg))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=_orphaned, args=(stop,), name="parent-watch", daemon=True).start()
    store.start()
    ca = store.config.tls_ca
    followers = follow_shards(store.daemon, spec["metadata"], spec["admin_token"], poll_s=0.02,
                              tls_ca=Path(ca).read_text(encoding="ascii") if ca else "")   # one per shard
    try:
        for follower in followers:
            try:
                store.daemon.wait_warm(follower.hello(), timeout_s=20.0)
            except Exception as exc:  # noqa: BLE001 - the loop retries with backoff; the daemon serves meanwhile
                print(f"daemon process: control loop: {exc}", file=sys.stderr, flush=True)
            follower.start()
        host, port = store.address
        sys.stdout.write(json.dumps({"address": [host, port], "pid": os.getpid()}) + "\n")
        sys.stdout.flush()
        stop.wait()
    finally:
        for follower in followers:
            follower.close()
        store.stop()
    return 0


def _orphaned(stop: threading.Event) -> None:
    """Stop when the parent's end of stdin closes: the parent is gone (a stopped parent sends
    SIGTERM first; a killed one only closes the pipe)."""
    try:
        while sys.stdin.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


if __name__ == "__main__":
    sys.exit(_child())
