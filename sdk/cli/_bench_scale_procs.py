"""Processes for ``funcsion bench scale``: server processes started from the CLI and
read back from their first line, the CPU a process tree has used (from ``/proc``),
and phase timing for load-generator processes that meet at a barrier.

Not here: what the servers or the load generators do (``_bench_scale_data``,
``_bench_scale_meta``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["Served", "PhaseResult", "serve", "stop", "tree_cpu_s", "self_cpu_s", "aggregate", "end_workers"]


@dataclass(slots=True)
class Served:
    """A server process and what its first line said."""

    proc: subprocess.Popen[str]
    info: dict[str, Any]


@dataclass(slots=True)
class PhaseResult:
    """What one load generator did in one phase: ``units`` (objects or calls), ``nbytes``,
    its first start and last end (``time.monotonic``, which every process of a host
    shares) and the CPU seconds it used."""

    units: int
    nbytes: int
    t0: float
    t1: float
    cpu_s: float


def serve(commands: list[tuple[list[str], str]]) -> list[Served]:
    """Start ``funcsion <argv> --json`` for each (argv, what) at once, and read each one's
    one-line JSON address; if one does not start, all are stopped."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = [(Served(subprocess.Popen([sys.executable, "-m", "sdk.cli", *argv, "--json"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env), {}), what)
               for argv, what in commands]
    for s, what in started:
        assert s.proc.stdout is not None
        line = s.proc.stdout.readline()
        if not line.startswith("{"):
            try:
                s.proc.wait(10)  # it exited (a bad argument, a port in use): its last words say why
            except subprocess.TimeoutExpired:
                pass
            err = s.proc.stderr.read()[-2000:] if s.proc.stderr is not None and s.proc.poll() is not None else ""
            stop([x for x, _ in started])
            raise RuntimeError(f"bench scale: {what} did not start ({line.strip() or 'no output'}) {err}".strip())
        s.info.update(json.loads(line))
    return [s for s, _ in started]


def stop(served: list[Served]) -> None:
    """SIGTERM each, then wait (a daemon stops its storage functions on the way out)."""
    for s in served:
        if s.proc.poll() is None:
            s.proc.terminate()
    for s in served:
        try:
            s.proc.wait(60)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait(10)
        for f in (s.proc.stdout, s.proc.stderr):
            if f is not None:
                f.close()


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by ``pids`` and every live descendant
    (a daemon's storage functions are its children on the local platform)."""
    kids, tick = _children(), os.sysconf("SC_CLK_TCK")
    todo, seen, total = list(pids), set(), 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


def self_cpu_s() -> float:
    """This process's CPU seconds, every thread's."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def aggregate(results: list[PhaseResult]) -> dict[str, float]:
    """All load generators of a phase together: units and bytes over the span from the
    first start to the last end, and their CPU in cores (CPU seconds over that span)."""
    span = max(r.t1 for r in results) - min(r.t0 for r in results)
    span = max(span, 1e-9)
    return {"units_per_s": sum(r.units for r in results) / span,
            "mib_per_s": sum(r.nbytes for r in results) / span / (1 << 20),
            "seconds": span, "client_cpu_cores": sum(r.cpu_s for r in results) / span,
            "units": float(sum(r.units for r in results))}


def end_workers(workers: list[Any], served: list[Served]) -> None:
    """A phase's load generators that are still alive are terminated, then its servers stop."""
    for w in workers:
        if w.is_alive():
            w.terminate()
            w.join(10)
    stop(served)
