"""One instance of a local Lambda function: an OS process running
``_worker.py`` (a fresh interpreter, or a child forked from a fork server
that imported the function's heavy modules once: ``_forkserver``), two
pipes, and what the platform knows about it.

Ownership rule (no fd is closed under a reader): the thread that holds an
instance -- the invoker while it is busy, or whoever took it out of the pool
while idle -- is the only one that reads its pipe or closes it. Any thread
may ``kill`` it (a signal), which the holder sees as EOF. Not here: pooling,
limits and billing (``_platform.py``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import IO, Any, Literal, Protocol

from ..private_files import open_private, private_dir
from ..readiness import readable
from . import _worker
from ._forkserver import ForkServer
from ._worker import HEADER, encode_frame

__all__ = ["Instance", "InstanceInfo", "FunctionSpec", "InstanceState", "read_rss_mb", "read_resident_mb",
           "close_all"]

InstanceState = Literal["starting", "idle", "busy", "dead"]
_WORKER = Path(_worker.__file__).resolve()
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """A deployed function. ``version`` grows with each redeploy; instances
    of an older version finish their invocation and are retired."""

    name: str
    handler: str
    memory_mb: int
    timeout_s: float
    env: tuple[tuple[str, str], ...]
    code_paths: tuple[str, ...]
    reserved_concurrency: int | None
    version: int
    preload: tuple[str, ...] = ()  # modules a fork server imports once for all instances (none: spawn each)

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.name}"


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """A snapshot of one instance, for ``LocalPlatform.instances``."""

    function_name: str
    instance_id: int
    pid: int
    state: InstanceState
    invocations: int
    started_at: float  # wall clock (time.time)
    last_invoked_at: float | None
    memory_mb: int
    rss_mb: float | None
    version: int


def read_rss_mb(pid: int) -> tuple[float, float] | None:
    """(current RSS, peak RSS) of ``pid`` in MiB from /proc, or None."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1]) / 1024.0
        elif line.startswith(b"VmHWM:"):
            hwm = int(line.split()[1]) / 1024.0
    return None if rss is None else (rss, hwm if hwm is not None else rss)


_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1 << 20)  # statm counts pages


def read_resident_mb(pid: int) -> float | None:
    """Current RSS of ``pid`` in MiB from ``/proc/<pid>/statm`` (its second field, resident
    pages: what ``VmRSS`` counts), or None. A third of the cost of reading ``status``
    (8.6 against 22 µs here), for the memory monitor's every tick."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            fields = fh.read().split()
        return int(fields[1]) * _PAGE_MB
    except (OSError, IndexError, ValueError):
        return None


class Process(Protocol):
    """What an instance's process offers: ``subprocess.Popen`` or ``ForkedProcess``."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


class Instance:
    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self.instance_id = next(_ids)
        self.state: InstanceState = "starting"
        self.invocations = 0
        self.started_at = time.time()
        self.last_invoked_at: float | None = None
        self.last_used = time.monotonic()
        self.reclaim_at = float("inf")
        self.kill_reason: str | None = None
        self.peak_rss_mb = 0.0
        self.proc: Process | None = None
        self.forked = False
        self._req_fd = -1
        self._resp_fd = -1
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    def info(self) -> InstanceInfo:
        rss = read_rss_mb(self.pid) if self.proc is not None and self.state != "dead" else None
        return InstanceInfo(self.spec.name, self.instance_id, self.pid, self.state, self.invocations,
                            self.started_at, self.last_invoked_at, self.spec.memory_mb,
                            rss[0] if rss else None, self.spec.version)

    # -- life -----------------------------------------------------------------

    def spawn(self, *, max_payload_bytes: int, log_dir: str | None, env_extra: Mapping[str, str] | None = None,
              env_drop: Iterable[str] = (), forker: ForkServer | None = None) -> None:
        """Start the process (forked from ``forker`` when given, else a fresh interpreter) and send
        it ``init``. ``env_extra``/``env_drop``: the platform's own settings (bytecode caching)."""
        spec = self.spec
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = dict(os.environ)
        for name in env_drop:
            env.pop(name, None)
        env.update(env_extra or {})
        env.update({
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"local/{self.instance_id}",
            "FUNCSION_LOCAL_PLATFORM": "1",
            "FUNCSION_INSTANCE_ID": str(self.instance_id),
        })
        env.update(dict(spec.env))
        out: Any = None
        if log_dir is not None:
            private_dir(log_dir)
            self._log = out = open_private(Path(log_dir) / f"{spec.name}.log", "ab")
        try:
            if forker is not None:
                self.proc = forker.fork(env, [req_r, resp_w] + ([out.fileno()] if out is not None else []))
                self.forked = True
            else:
                self.proc = subprocess.Popen(
                    [sys.executable, "-P", "-u", str(_WORKER), str(req_r), str(resp_w)],
                    pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT if out is not None else None,
                    env=env, start_new_session=True,  # a terminal's Ctrl-C is for the parent to handle
                )
        except BaseException:
            for fd in (req_r, req_w, resp_r, resp_w):
                os.close(fd)
            self._close_log()
            raise
        os.close(req_r)
        os.close(resp_w)
        self._req_fd, self._resp_fd = req_w, resp_r
        self.send({
            "op": "init", "handler": spec.handler, "code_paths": list(spec.code_paths), "sys_path": sys.path,
            "max_payload_bytes": max_payload_bytes, "log": log_dir is not None,
            "function": {"function_name": spec.name, "invoked_function_arn": spec.arn,
                         "memory_mb": spec.memory_mb, "log_stream_name": f"local/{self.instance_id}"},
        })

    def send(self, frame: dict[str, Any]) -> bool:
        """Write a frame; False if the instance is gone."""
        try:
            _worker._write_all(self._req_fd, encode_frame(frame))
        except (BrokenPipeError, OSError):
            return False
        return True

    def recv(self, deadline: float) -> dict[str, Any] | None:
        """The next frame; None if the process went away; ``TimeoutError``
        past ``deadline`` (time.monotonic)."""
        head = self._read_exact(HEADER.size, deadline)
        if head is None:
            return None
        body = self._read_exact(HEADER.unpack(head)[0], deadline)
        return None if body is None else json.loads(body)

    def _read_exact(self, n: int, deadline: float) -> bytes | None:
        chunks = []
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready = readable([self._resp_fd], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(self._resp_fd, min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def kill(self, reason: str) -> bool:
        """SIGKILL the process now (any thread). False if it was already gone."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return False
        if self.kill_reason is None:
            self.kill_reason = reason
        try:
            proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:  # pragma: no cover - raced with its exit
            return False
        return True

    def exit_status(self) -> str:
        """How the process ended, in AWS's words ("signal: killed", "exit status 1")."""
        proc = self.proc
        if proc is None:
            return "not started"
        try:
            code = proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return "still running"
        if code is None:
            return "exit status unknown"
        if code < 0:
            try:
                name = signal.Signals(-code).name.removeprefix("SIG").lower()
            except ValueError:
                name = str(-code)
            return f"signal: {'killed' if name == 'kill' else name}"
        return f"exit status {code}"

    def close(self, *, graceful: bool = True, grace_s: float = 1.0) -> None:
        """Stop the process and free its pipes (holder only; idempotent)."""
        self.begin_close(graceful=graceful)
        self.end_close(time.monotonic() + grace_s)

    def begin_close(self, *, graceful: bool = True) -> None:
        """Tell the process to stop (``exit`` and EOF, or SIGKILL) without waiting for it."""
        self.state = "dead"
        proc = self.proc
        if proc is not None:
            if proc.returncode is None:
                if graceful:
                    self.send({"op": "exit"})
                else:
                    self.kill(self.kill_reason or "reclaimed")
            if self._req_fd >= 0:
                os.close(self._req_fd)  # EOF ends the worker's loop
                self._req_fd = -1

    def end_close(self, deadline: float) -> None:
        """Wait until ``deadline`` (time.monotonic) for the process to end, then kill it; free the rest."""
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(self.kill_reason or "reclaimed")
                proc.wait()
            release = getattr(proc, "release", None)
            if release is not None:
                release()
        for fd in (self._req_fd, self._resp_fd):
            if fd >= 0:
                os.close(fd)
        self._req_fd = self._resp_fd = -1
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def close_all(instances: Iterable[Instance], *, graceful: bool = True, grace_s: float = 1.0) -> None:
    """Close several instances at once: every one is told to stop, then each is waited for
    within one shared ``grace_s`` (shutdown takes one grace period, not one per instance)."""
    insts = list(instances)
    for inst in insts:
        inst.begin_close(graceful=graceful)
    deadline = time.monotonic() + grace_s
    for inst in insts:
        inst.end_close(deadline)
