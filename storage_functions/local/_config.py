"""Settings of the local Lambda platform, and the environment variables that
set them.

Precedence, per field: a value given to ``PlatformConfig(...)`` beats the
``FUNCSION_*`` environment variable, which beats the default. Fields left at
``None`` are "unset"; ``resolve(environ)`` returns a config where every field
is concrete and checked, and names the field (and variable) of a bad value.
Not here: what the platform does with them (``_platform.py``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from ..exceptions import PlatformConfigError

__all__ = ["PlatformConfig", "ENV"]

#: field name -> environment variable (one place for every name)
ENV = {
    "idle_reclaim_s": "FUNCSION_IDLE_RECLAIM_S",          # "lo,hi" seconds, e.g. "600,1800"
    "concurrency_limit": "FUNCSION_CONCURRENCY_LIMIT",    # live instances, all functions
    "on_limit": "FUNCSION_ON_CONCURRENCY_LIMIT",          # "queue" or "raise"
    "queue_timeout_s": "FUNCSION_QUEUE_TIMEOUT_S",
    "kill_rate": "FUNCSION_KILL_RATE",                    # probability per invocation, 0..1
    "kill_functions": "FUNCSION_KILL_FUNCTIONS",          # comma-separated fnmatch globs
    "kill_delay_s": "FUNCSION_KILL_DELAY_S",              # a doomed invocation dies within this
    "kill_file": "FUNCSION_KILL_FILE",                    # write function globs here to kill now
    "seed": "FUNCSION_PLATFORM_SEED",
    "log_dir": "FUNCSION_PLATFORM_LOG_DIR",
    "enforce_memory": "FUNCSION_ENFORCE_MEMORY",
    "bill_init": "FUNCSION_BILL_INIT",
    "fork_server": "FUNCSION_FORK_SERVER",                # 1/0: fork instances of preloading functions
    "cold_start_s": "FUNCSION_COLD_START_S",              # a cold start takes at least this (simulated)
    "bytecode_dir": "FUNCSION_BYTECODE_DIR",              # where instances cache .pyc ("off": nowhere)
}

OnLimit = Literal["queue", "raise"]


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    """How the local platform behaves. See ``ENV`` for the variables.

    - ``idle_reclaim_s``: an idle instance is reclaimed after a time drawn
      uniformly from ``(lo, hi)`` seconds, redrawn each time it goes idle
      (AWS keeps idle instances "tens of minutes to hours", SION Sec. 2.2).
    - ``concurrency_limit``: most live instances (busy or idle) across all
      functions. Idle instances never block an invocation: the least recently
      used idle one is reclaimed to make room. When every instance is busy,
      ``on_limit="queue"`` waits up to ``queue_timeout_s`` and
      ``on_limit="raise"`` raises ``ConcurrencyLimit`` at once (AWS's
      throttling of synchronous invokes). Asynchronous invokes always queue.
    - ``kill_rate``: each invocation of a function matching ``kill_functions``
      is doomed with this probability: its instance is SIGKILLed at a time
      drawn from ``[0, kill_delay_s]`` after dispatch, or when it answers if
      that comes first; the caller sees ``InvocationFailed(reason="killed")``.
    - ``kill_file``: when this file appears, the instances of the functions
      whose names match its globs (one per line, ``*`` for all) are killed and
      the file is removed: fault injection from a shell.
    - ``enforce_memory``: poll each busy instance's RSS (``/proc``) every
      ``monitor_interval_s`` and kill it when over its memory size.
    - ``bill_init``: bill cold-start init time as AWS does since Aug 2025.
    - ``log_dir``: instance stdout/stderr go to ``<log_dir>/<function>.log``;
      None lets them through to this process's stdout/stderr.
    - ``fork_server``: the instances of a function deployed with ``preload``
      modules are forked from a fork server that imported them once (a warm
      container's start: milliseconds); off, every instance is a fresh
      interpreter that imports everything itself.
    - ``cold_start_s``: every cold start takes at least this long (the
      platform waits out the rest, billed as init): Lambda's cold starts for
      cost studies, now that local ones are fast. 0: as fast as they are.
    - ``bytecode_dir``: instances write and reuse the bytecode (``.pyc``) of
      what they import there (``PYTHONPYCACHEPREFIX``), whatever
      ``PYTHONDONTWRITEBYTECODE`` says; ``"off"`` leaves Python's own
      settings. Default: ``<temp dir>/funcsion-pycache-<uid>``.
    """

    idle_reclaim_s: tuple[float, float] | None = None
    concurrency_limit: int | None = None
    on_limit: OnLimit | None = None
    queue_timeout_s: float | None = None
    kill_rate: float | None = None
    kill_functions: str | None = None
    kill_delay_s: float | None = None
    kill_file: str | None = None
    seed: int | None = None
    log_dir: str | None = None
    enforce_memory: bool | None = None
    bill_init: bool | None = None
    fork_server: bool | None = None
    cold_start_s: float | None = None
    bytecode_dir: str | None = None
    init_timeout_s: float = 30.0
    monitor_interval_s: float = 0.02
    max_payload_bytes: int = 6 * 1024 * 1024
    record_limit: int = 10_000

    def resolve(self, environ: Mapping[str, str] | None = None) -> PlatformConfig:
        """Every unset field from ``environ`` (default ``os.environ``), then
        from the defaults; raise ``PlatformConfigError`` naming a bad one."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            source = f"PlatformConfig.{f.name}"
            if value is None and f.name in ENV and ENV[f.name] in env:
                raw = env[ENV[f.name]]
                source = f"{ENV[f.name]}={raw!r}"
                value = _parse(f.name, raw, source)
            if value is None:
                value = _DEFAULTS.get(f.name)
            values[f.name] = _check(f.name, value, source)
        return replace(self, **values)


_DEFAULTS: dict[str, object] = {
    "idle_reclaim_s": (600.0, 1800.0),
    "concurrency_limit": 64,
    "on_limit": "queue",
    "queue_timeout_s": 300.0,
    "kill_rate": 0.0,
    "kill_functions": "*",
    "kill_delay_s": 0.0,
    "enforce_memory": True,
    "bill_init": True,
    "fork_server": True,
    "cold_start_s": 0.0,
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse(name: str, raw: str, source: str) -> object:
    try:
        if name == "idle_reclaim_s":
            parts = [float(x) for x in raw.replace(" ", "").split(",")]
            if len(parts) == 1:
                parts *= 2
            if len(parts) != 2:
                raise ValueError("write 'lo,hi'")
            return (parts[0], parts[1])
        if name in ("concurrency_limit", "seed"):
            return int(raw)
        if name in ("queue_timeout_s", "kill_rate", "kill_delay_s", "cold_start_s"):
            return float(raw)
        if name in ("enforce_memory", "bill_init", "fork_server"):
            if raw.strip().lower() not in _TRUE | _FALSE:
                raise ValueError("write 1/0, true/false, yes/no or on/off")
            return raw.strip().lower() in _TRUE
    except ValueError as exc:
        raise PlatformConfigError(f"{source}: cannot read a value for PlatformConfig.{name}: {exc}") from None
    return raw


def _check(name: str, value: object, source: str) -> object:
    def bad(why: str) -> PlatformConfigError:
        return PlatformConfigError(f"{source}: PlatformConfig.{name} {why}, got {value!r}")

    if name == "idle_reclaim_s":
        if (not isinstance(value, tuple) or len(value) != 2
                or not all(isinstance(v, (int, float)) for v in value) or not 0 <= value[0] <= value[1]):
            raise bad("must be (lo, hi) seconds with 0 <= lo <= hi")
        return (float(value[0]), float(value[1]))
    if name == "concurrency_limit" and (not isinstance(value, int) or value < 1):
        raise bad("must be an int >= 1")
    if name == "on_limit" and value not in ("queue", "raise"):
        raise bad("must be 'queue' or 'raise'")
    if name == "kill_rate" and (not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0):
        raise bad("must be a probability in [0, 1]")
    if name in ("queue_timeout_s", "kill_delay_s", "init_timeout_s", "cold_start_s") and (
            not isinstance(value, (int, float)) or value < 0):
        raise bad("must be a number of seconds >= 0")
    if name == "monitor_interval_s" and (not isinstance(value, (int, float)) or value <= 0):
        raise bad("must be a number of seconds > 0")
    if name == "bytecode_dir":
        if value is None:
            return os.path.join(tempfile.gettempdir(), f"funcsion-pycache-{os.getuid()}")
        if not isinstance(value, str) or not value:
            raise bad("must be a directory, or 'off'")
    if name in ("max_payload_bytes", "record_limit") and (not isinstance(value, int) or value < 1):
        raise bad("must be an int >= 1")
    return value
