"""``LocalPlatform``: AWS Lambda on this machine, one OS process per instance.

Covers deploy, synchronous and asynchronous invoke, warm reuse (most recently
used idle instance first), cold starts (forked from a fork server for
functions deployed with ``preload`` modules, at least ``cold_start_s`` when
set), provisioning ahead of use, idle reclamation after a random time, a
concurrency limit, timeouts, memory enforcement, fault injection (kill now,
kill at a rate, kill through a file), parallel shutdown and the billing
meter. The decisions are in ``_policy.py``, the settings in ``_config.py``,
the process in ``_instance.py``/``_worker.py``/``_forkserver.py``; this
module pools and accounts.

Threads: any thread may call any method. One lock guards the pool; process
spawning, pipe I/O and closing happen outside it. A monitor thread reclaims
idle instances, watches the RSS of busy ones and polls the kill file.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import (
    ConcurrencyLimit, FunctionNotDeployed, InvalidPayload, InvocationFailed, PlatformConfigError, PlatformError,
)
from ._config import PlatformConfig
from ._forkserver import ForkServerError, ForkServers
from ._instance import FunctionSpec, Instance, InstanceInfo, close_all, read_resident_mb
from ._policy import kill_delay, matches, reclaim_at
from ._pricing import BillingMeter, BillingReport

__all__ = ["LocalPlatform", "InvocationHandle", "InvocationRecord"]

log = logging.getLogger("storage_functions.local")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MIN_MEMORY_MB, MAX_MEMORY_MB, MAX_TIMEOUT_S = 128, 10240, 900.0


@dataclass(frozen=True, slots=True)
class InvocationRecord:
    """One finished invocation. ``outcome`` is "ok" or an
    ``InvocationFailed.reason``; times in milliseconds. ``metrics``: the
    numbers the handler reported about itself under its result's ``"metrics"``
    key (as a Lambda emits CloudWatch embedded metrics; e.g. the storage
    runtime's warm-ups and COS requests), empty when it reported none."""

    function_name: str
    request_id: str
    pid: int
    cold: bool
    init_ms: float
    duration_ms: float
    billed_ms: int
    outcome: str
    max_memory_used_mb: float
    started_at: float  # wall clock
    metrics: Mapping[str, float] = field(default_factory=dict)


class InvocationHandle:
    """An asynchronous invocation (``InvocationType='Event'``)."""

    def __init__(self, function_name: str, request_id: str, future: Future[dict[str, Any]]) -> None:
        self.function_name = function_name
        self.request_id = request_id
        self.future = future

    def result(self, timeout: float | None = None) -> Any:
        """The handler's return value; raises what the invocation raised."""
        return self.future.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self.future.exception(timeout)

    def done(self) -> bool:
        return self.future.done()

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"InvocationHandle({self.function_name!r}, {self.request_id}, {state})"


def _metrics(result: Any) -> dict[str, float]:
    """The numbers under a result's ``"metrics"`` key (others are ignored)."""
    m = result.get("metrics") if isinstance(result, dict) else None
    if not isinstance(m, dict):
        return {}
    return {str(k): float(v) for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _kill_all(instances: dict[int, Instance], forkers: ForkServers) -> None:
    """Last resort (garbage collection or interpreter exit without shutdown):
    nothing else holds the instances then, so close them all."""
    for inst in list(instances.values()):
        inst.kill("shutdown")
    close_all(list(instances.values()), graceful=False)
    instances.clear()
    forkers.close()


def _monitor(ref: weakref.ReferenceType[LocalPlatform], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        platform = ref()
        if platform is None:
            return
        try:
            platform._monitor_once()
        except Exception:  # pragma: no cover - keep watching
            log.exception("local platform monitor")
        del platform


class LocalPlatform:
    """A local Lambda platform. Use as a context manager or call
    ``shutdown()``; instances also die with this process."""

    def __init__(self, config: PlatformConfig | None = None, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = (config or PlatformConfig()).resolve(environ)
        self._rng = random.Random(self.config.seed)
        self._cond = threading.Condition(threading.Lock())
        self._functions: dict[str, FunctionSpec] = {}
        self._instances: dict[int, Instance] = {}
        self._meter = BillingMeter()
        self._records: deque[InvocationRecord] = deque(maxlen=self.config.record_limit)
        self._async: set[Future[Any]] = set()  # invocations of invoke_async not yet ended
        self._closed = False
        self._stop = threading.Event()
        self._forkers = ForkServers(self.config.fork_server, self.config.bytecode_dir, self.config.init_timeout_s)
        self._finalizer = weakref.finalize(self, _kill_all, self._instances, self._forkers)
        self._monitor_thread = threading.Thread(
            target=_monitor, args=(weakref.ref(self), self._stop, self.config.monitor_interval_s),
            name="local-lambda-monitor", daemon=True,
        )
        self._monitor_thread.start()

    # -- functions --------------------------------------------------------------

    def deploy(
        self,
        name: str,
        handler: str,
        *,
        memory_mb: int = 1024,
        timeout_s: float = 900.0,
        env: Mapping[str, str] | None = None,
        code_paths: Sequence[str | os.PathLike[str]] = (),
        reserved_concurrency: int | None = None,
        preload: Sequence[str] = (),
    ) -> FunctionSpec:
        """Create or update function ``name``. ``handler`` is
        ``"package.module:function"`` (or AWS's ``"module.function"``),
        imported from ``code_paths`` then this process's ``sys.path``.
        ``preload``: modules (from this process's ``sys.path``) a fork server
        imports once; its instances are forked from it (``PlatformConfig.fork_server``;
        the handler's own module is still imported by each instance). Its fork
        server starts now, in the background.
        Instances of a previous version finish what they run and retire."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise PlatformConfigError(f"function name {name!r}: use 1-64 letters, digits, '-' or '_'")
        if not isinstance(handler, str) or not ("." in handler or ":" in handler):
            raise PlatformConfigError(f"function {name}: handler {handler!r} must be 'package.module:function'")
        if not isinstance(memory_mb, int) or not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
            raise PlatformConfigError(f"function {name}: memory_mb must be an int in "
                                      f"[{MIN_MEMORY_MB}, {MAX_MEMORY_MB}], got {memory_mb!r}")
        if not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise PlatformConfigError(f"function {name}: timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}")
        if reserved_concurrency is not None and (not isinstance(reserved_concurrency, int) or reserved_concurrency < 1):
            raise PlatformConfigError(f"function {name}: reserved_concurrency must be an int >= 1 or None")
        env_items = tuple(sorted((env or {}).items()))
        for k, v in env_items:
            if not isinstance(k, str) or not isinstance(v, str):
                raise PlatformConfigError(f"function {name}: env {k!r}={v!r}: names and values must be str")
        paths = []
        for p in code_paths:
            path = Path(p).resolve()
            if not path.is_dir():
                raise PlatformConfigError(f"function {name}: code path {str(p)!r} is not a directory")
            paths.append(str(path))
        if isinstance(preload, str) or not all(isinstance(m, str) and m for m in preload):
            raise PlatformConfigError(f"function {name}: preload must be a list of module names, got {preload!r}")
        retire: list[Instance] = []
        with self._cond:
            self._check_open()
            old = self._functions.get(name)
            spec = FunctionSpec(name, handler, memory_mb, float(timeout_s), env_items, tuple(paths),
                                reserved_concurrency, old.version + 1 if old else 1, tuple(preload))
            self._functions[name] = spec
            if old is not None:
                retire = self._take_idle(lambda i: i.spec.name == name)
        close_all(retire)
        if spec.preload and self.config.fork_server:
            threading.Thread(target=self._forkers.get, args=(spec,), name="local-lambda-forkserver-start",
                             daemon=True).start()
        return spec

    def remove(self, name: str) -> None:
        """Delete function ``name``; its running invocations finish."""
        with self._cond:
            self._spec(name)
            del self._functions[name]
            retire = self._take_idle(lambda i: i.spec.name == name)
        close_all(retire)

    def functions(self) -> dict[str, FunctionSpec]:
        with self._cond:
            return dict(self._functions)

    # -- invoke -----------------------------------------------------------------

    def invoke(self, name: str, event: Any, *, request_id: str | None = None) -> Any:
        """Run ``name`` on ``event`` and return the handler's (JSON) result.
        Raises ``InvocationFailed`` (error, timeout, oom, killed, init,
        marshal, shutdown), ``FunctionNotDeployed``, ``InvalidPayload``,
        ``ConcurrencyLimit``. ``request_id`` (default: a new UUID) names the
        invocation in its record and log lines, so a caller can find them."""
        text = self._encode(name, event)
        return self._invoke(name, text, request_id or str(uuid.uuid4()), queue=self.config.on_limit == "queue")

    def prewarm(self, name: str) -> float:
        """Start an instance of ``name`` now and load its handler (what provisioned
        concurrency does), so the first invocation finds it warm and a handler that cannot
        be imported fails here: ``InvocationFailed(reason="init")``. Returns the seconds the
        cold start took (0 when an idle instance was there already)."""
        inst, cold = self._acquire(name, queue=True)
        healthy = False
        try:
            init_s = self._cold_start(inst, "prewarm") if cold else 0.0
            healthy = True
            return init_s
        finally:
            self._release(inst, healthy=healthy)

    def provision(self, name: str, count: int) -> int:
        """Start instances of ``name`` in parallel until ``count`` of its current version are alive
        (starting, idle or busy), within the concurrency limits and without reclaiming anyone's idle
        instances: what provisioned concurrency does ahead of a burst. Returns how many were started.
        A handler that cannot be loaded raises ``InvocationFailed(reason="init")`` once all started."""
        with self._cond:
            self._check_open()
            spec = self._spec(name)
            mine = sum(1 for i in self._instances.values() if i.spec.name == name and i.state != "dead")
            current = sum(1 for i in self._instances.values()
                          if i.spec.name == name and i.state != "dead" and i.spec.version == spec.version)
            n = min(count - current, (self.config.concurrency_limit or 1) - len(self._instances))
            if spec.reserved_concurrency is not None:
                n = min(n, spec.reserved_concurrency - mine)
            insts = [Instance(spec) for _ in range(max(0, n))]
            for inst in insts:
                self._instances[inst.instance_id] = inst
        if not insts:
            return 0
        errors: list[BaseException] = []

        def start(inst: Instance) -> None:
            healthy = False
            try:
                self._cold_start(inst, "provision")
                healthy = True
            except BaseException as exc:  # noqa: BLE001 - the caller gets the first one
                errors.append(exc)
            finally:
                self._release(inst, healthy=healthy)

        threads = [threading.Thread(target=start, args=(inst,), name=f"lambda-provision-{name}", daemon=True)
                   for inst in insts[1:]]
        for t in threads:
            t.start()
        start(insts[0])
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return len(insts)

    def invoke_async(self, name: str, event: Any) -> InvocationHandle:
        """Start ``name`` on ``event`` and return at once, like
        ``InvocationType='Event'``; waits for capacity if at the limit.
        An unknown function or a bad event raises here."""
        text = self._encode(name, event)
        request_id = str(uuid.uuid4())
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()
        thread = threading.Thread(target=self._run_async, args=(name, text, request_id, future),
                                  name=f"lambda-event-{name}", daemon=True)
        with self._cond:
            self._check_open()
            self._spec(name)
            self._async.add(future)  # shutdown() waits for the future, started or not
        try:
            # outside the lock: start() waits until the new thread runs, which under a busy
            # interpreter lock takes milliseconds, and every other invocation needs the lock
            thread.start()
        except RuntimeError as exc:  # no thread to be had: the invocation fails, the caller hears
            self._async_done(future)
            future.set_exception(InvocationFailed(f"{name} (request {request_id}): cannot start: {exc}",
                                                  function_name=name, request_id=request_id, reason="error"))
        return InvocationHandle(name, request_id, future)

    def _async_done(self, future: Future[Any]) -> None:
        with self._cond:
            self._async.discard(future)

    def _run_async(self, name: str, text: str, request_id: str, future: Future[Any]) -> None:
        try:
            future.set_result(self._invoke(name, text, request_id, queue=True))
        except BaseException as exc:  # noqa: BLE001 - the future carries it to the caller
            if not isinstance(exc, InvocationFailed) or exc.reason != "shutdown":
                log.warning("async invocation %s of %s failed: %s", request_id, name, exc)
            future.set_exception(exc)
        finally:
            self._async_done(future)

    def _encode(self, name: str, event: Any) -> str:
        try:
            text = json.dumps(event)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"event for {name} is not JSON: {exc}") from None
        if len(text) > self.config.max_payload_bytes:
            raise InvalidPayload(f"event for {name} is {len(text)} bytes, over the "
                                 f"{self.config.max_payload_bytes}-byte payload limit")
        return text

    def _invoke(self, name: str, text: str, request_id: str, *, queue: bool) -> Any:
        inst, cold = self._acquire(name, queue)
        spec = inst.spec
        healthy = False
        outcome = "ok"
        init_s = duration_s = 0.0
        mem_used = 0.0
        metrics: dict[str, float] = {}
        started_at = time.time()
        try:
            if cold:
                init_s = self._cold_start(inst, request_id)
            delay = kill_delay(self.config, name, self._rng)
            t0 = time.monotonic()
            deadline = t0 + spec.timeout_s
            kill_at = t0 + delay if delay is not None else float("inf")
            with self._cond:
                inst.state = "busy"
                inst.invocations += 1
                inst.last_invoked_at = started_at
            frame: dict[str, Any] | None = None
            if inst.send({"op": "invoke", "request_id": request_id, "event": json.loads(text),
                          "deadline_ms": int((time.time() + spec.timeout_s) * 1000),
                          "init_s": init_s, "bill_init": bool(self.config.bill_init)}):
                try:
                    frame = inst.recv(min(deadline, kill_at))
                except TimeoutError:
                    inst.kill("fault injection" if kill_at < deadline else "timeout")
            if frame is not None and delay is not None:  # doomed: it dies before its answer gets out
                inst.kill("fault injection")
                frame = None
            duration_s = time.monotonic() - t0
            if frame is None:
                raise self._died(inst, request_id, duration_s)
            duration_s = float(frame.get("duration_s", duration_s))
            mem_used = float(frame.get("max_memory_used_mb", 0.0))
            healthy = True
            if frame["op"] == "error":
                raise InvocationFailed(
                    f"{name} (request {request_id}): {frame['errorType']}: {frame['errorMessage']}",
                    function_name=name, request_id=request_id,
                    reason="marshal" if frame["errorType"] == "Runtime.MarshalError" else "error",
                    error_type=frame["errorType"], error_message=frame["errorMessage"],
                    stack_trace=frame.get("traceback") or "".join(frame.get("stackTrace") or ()),
                )
            result = json.loads(frame["result"])
            metrics = _metrics(result)
            return result
        except InvocationFailed as exc:
            outcome = exc.reason
            raise
        finally:
            mem_used = max(mem_used, inst.peak_rss_mb)
            billed = self._meter.record(name, spec.memory_mb, duration_s, init_s=init_s, cold=cold,
                                        error=outcome != "ok", bill_init=bool(self.config.bill_init),
                                        max_memory_used_mb=mem_used)
            self._records.append(InvocationRecord(name, request_id, inst.pid, cold, init_s * 1000.0,
                                                  duration_s * 1000.0, billed, outcome, mem_used, started_at,
                                                  metrics))
            self._release(inst, healthy=healthy)

    def _cold_start(self, inst: Instance, request_id: str) -> float:
        name = inst.spec.name
        t0 = time.monotonic()
        extra, drop = self._forkers.bytecode_env()
        forker = self._forkers.get(inst.spec)
        try:
            inst.spawn(max_payload_bytes=self.config.max_payload_bytes, log_dir=self.config.log_dir,
                       env_extra=extra, env_drop=drop, forker=forker)
        except ForkServerError as exc:  # it died meanwhile: this one starts fresh
            log.warning("%s: fork server failed (%s); starting a fresh interpreter", name, exc)
            inst.spawn(max_payload_bytes=self.config.max_payload_bytes, log_dir=self.config.log_dir,
                       env_extra=extra, env_drop=drop)
        try:
            frame = inst.recv(t0 + self.config.init_timeout_s)
        except TimeoutError:
            inst.kill("init timeout")
            raise InvocationFailed(
                f"{name} (request {request_id}): init did not finish in {self.config.init_timeout_s:g} s",
                function_name=name, request_id=request_id, reason="init", error_type="Runtime.InitTimeout",
            ) from None
        if frame is None:
            raise self._died(inst, request_id, time.monotonic() - t0, during="init")
        if frame["op"] == "init_error":
            raise InvocationFailed(
                f"{name} (request {request_id}): cannot load handler {inst.spec.handler!r}: "
                f"{frame['errorType']}: {frame['errorMessage']}",
                function_name=name, request_id=request_id, reason="init", error_type=frame["errorType"],
                error_message=frame["errorMessage"],
                stack_trace=frame.get("traceback") or "".join(frame.get("stackTrace") or ()),
            )
        rest = (self.config.cold_start_s or 0.0) - (time.monotonic() - t0)
        if rest > 0:  # a simulated cold start: Lambda's, for cost studies
            self._stop.wait(rest)
        return time.monotonic() - t0

    def _died(self, inst: Instance, request_id: str, elapsed_s: float, during: str = "invoke") -> InvocationFailed:
        name, status = inst.spec.name, inst.exit_status()
        why = inst.kill_reason
        common: dict[str, Any] = {"function_name": name, "request_id": request_id}
        if why == "timeout":
            msg = f"Task timed out after {inst.spec.timeout_s:.2f} seconds"
            return InvocationFailed(f"{name} (request {request_id}): {msg}", reason="timeout",
                                    error_type="Sandbox.Timedout", error_message=msg, **common)
        if why == "oom":
            msg = (f"Runtime exited with error: {status} (out of memory: Max Memory Used "
                   f"{inst.peak_rss_mb:.0f} MB of {inst.spec.memory_mb} MB)")
            return InvocationFailed(f"{name} (request {request_id}): {msg}", reason="oom",
                                    error_type="Runtime.OutOfMemory", error_message=msg, **common)
        reason = "shutdown" if why == "shutdown" else "killed" if why or during != "init" else "init"
        cause = f" ({why})" if why else ""
        msg = f"Runtime exited with error: {status}{cause} after {elapsed_s * 1000:.0f} ms of {during}"
        return InvocationFailed(f"{name} (request {request_id}): {msg}", reason=reason,
                                error_type="Runtime.ExitError", error_message=msg, **common)

    # -- the pool ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvocationFailed("the local platform was shut down", reason="shutdown")

    def _spec(self, name: str) -> FunctionSpec:
        spec = self._functions.get(name)
        if spec is None:
            known = ", ".join(sorted(self._functions)) or "none"
            raise FunctionNotDeployed(f"function {name!r} is not deployed (deployed: {known})")
        return spec

    def _take_idle(self, pred: Any) -> list[Instance]:
        """Remove matching idle instances from the pool (lock held); the caller closes them."""
        out = [i for i in self._instances.values() if i.state == "idle" and pred(i)]
        for inst in out:
            del self._instances[inst.instance_id]
            inst.state = "dead"
        if out:
            self._cond.notify_all()
        return out

    def _acquire(self, name: str, queue: bool) -> tuple[Instance, bool]:
        to_close: list[Instance] = []
        try:
            with self._cond:
                give_up = time.monotonic() + (self.config.queue_timeout_s or 0.0)
                while True:
                    self._check_open()
                    spec = self._spec(name)
                    to_close += self._take_idle(lambda i: i.proc is not None and i.proc.poll() is not None)
                    idle = [i for i in self._instances.values() if i.spec.name == name and i.state == "idle"]
                    if idle:
                        inst = max(idle, key=lambda i: i.last_used)
                        inst.state = "busy"
                        return inst, False
                    mine = sum(1 for i in self._instances.values() if i.spec.name == name)
                    if spec.reserved_concurrency is None or mine < spec.reserved_concurrency:
                        if len(self._instances) < (self.config.concurrency_limit or 1):
                            inst = Instance(spec)  # "starting" until its cold start is done
                            self._instances[inst.instance_id] = inst
                            return inst, True
                        others = sorted((i for i in self._instances.values() if i.state == "idle"),
                                        key=lambda i: i.last_used)
                        if others:  # idle instances never block: reclaim the least recently used
                            to_close += self._take_idle(lambda i: i is others[0])  # noqa: B023 - used at once
                            continue
                    limit = (f"reserved concurrency {spec.reserved_concurrency} of {name}"
                             if spec.reserved_concurrency is not None and mine >= spec.reserved_concurrency
                             else f"concurrency limit {self.config.concurrency_limit}")
                    if not queue:
                        raise ConcurrencyLimit(f"{name}: {limit} reached, every instance is busy "
                                               "(PlatformConfig.on_limit='raise')")
                    remaining = give_up - time.monotonic()
                    if remaining <= 0:
                        raise ConcurrencyLimit(f"{name}: {limit} reached and no instance freed up in "
                                               f"{self.config.queue_timeout_s:g} s (PlatformConfig.queue_timeout_s)")
                    self._cond.wait(remaining)
        finally:
            close_all(to_close)

    def _release(self, inst: Instance, *, healthy: bool) -> None:
        with self._cond:
            spec = self._functions.get(inst.spec.name)
            keep = (healthy and not self._closed and inst.kill_reason is None
                    and spec is not None and spec.version == inst.spec.version)
            if keep:
                now = time.monotonic()
                inst.state = "idle"
                inst.last_used = now
                inst.reclaim_at = reclaim_at(self.config, now, self._rng)
            else:
                self._instances.pop(inst.instance_id, None)
                inst.state = "dead"
            self._cond.notify_all()
        if not keep:
            inst.close(graceful=healthy)

    def _monitor_once(self) -> None:
        now = time.monotonic()
        with self._cond:
            done = self._take_idle(lambda i: i.reclaim_at <= now)
            busy = [i for i in self._instances.values() if i.state == "busy" and i.proc is not None]
        close_all(done)
        if self.config.enforce_memory:
            for inst in busy:  # the worker's reply reports its exact peak; this samples it
                rss = read_resident_mb(inst.pid)
                if rss is not None:
                    inst.peak_rss_mb = max(inst.peak_rss_mb, rss)
                    if rss > inst.spec.memory_mb:
                        inst.kill("oom")
        kill_file = self.config.kill_file
        if kill_file and os.path.exists(kill_file):
            try:
                with open(kill_file, encoding="utf-8") as fh:
                    globs = fh.read().strip() or "*"
                os.unlink(kill_file)
            except OSError:  # pragma: no cover - being written or removed right now
                return
            for name in list(self.functions()):
                if matches(globs, name):
                    log.warning("kill file %s: killing the instances of %s", kill_file, name)
                    self.kill(name)

    # -- inspection and faults ------------------------------------------------

    def instances(self, name: str | None = None) -> list[InstanceInfo]:
        """Live instances (of ``name``, or all), oldest first."""
        with self._cond:
            if name is not None:
                self._spec(name)
            live = [i for i in self._instances.values() if name is None or i.spec.name == name]
        return [i.info() for i in sorted(live, key=lambda i: i.instance_id)]

    def kill(self, name: str, instance: int | None = None) -> list[int]:
        """SIGKILL the instances of ``name`` now -- all of them, or the one
        whose pid or instance id is ``instance``. A busy one's caller gets
        ``InvocationFailed(reason="killed")``. Returns the pids killed."""
        with self._cond:
            self._spec(name)
            targets = [i for i in self._instances.values() if i.spec.name == name
                       and (instance is None or instance in (i.pid, i.instance_id))]
            if instance is not None and not targets:
                raise PlatformError(f"function {name} has no instance with pid or id {instance}")
            idle = self._take_idle(lambda i: i in targets)
        killed = [i.pid for i in targets if i.kill("fault injection")]
        close_all(idle, graceful=False)
        return killed

    def billing(self) -> BillingReport:
        return self._meter.report()

    def records(self, name: str | None = None) -> list[InvocationRecord]:
        """Finished invocations, oldest first (the last ``record_limit``)."""
        return [r for r in list(self._records) if name is None or r.function_name == name]

    # -- shutdown -------------------------------------------------------------

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Kill every instance, fail queued and running invocations with
        ``reason="shutdown"``, and wait for them. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle = self._take_idle(lambda i: True)
            busy = list(self._instances.values())
            self._cond.notify_all()
        self._stop.set()
        if self._monitor_thread is not threading.current_thread():
            self._monitor_thread.join(timeout_s)
        for inst in busy:
            inst.kill("shutdown")
        close_all(idle)
        give_up = time.monotonic() + timeout_s
        with self._cond:
            pending = list(self._async)
        wait_futures(pending, timeout=max(0.0, give_up - time.monotonic()))
        with self._cond:
            while self._instances and time.monotonic() < give_up:
                self._cond.wait(max(0.0, give_up - time.monotonic()))
            stuck = list(self._instances.values())
        for inst in stuck:  # their holders close them; make sure they are dead meanwhile
            inst.kill("shutdown")
            if inst.proc is not None:
                inst.proc.wait()
        self._forkers.close()

    def __enter__(self) -> LocalPlatform:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
