"""Deployment zips run as Lambda runs them, for the as-deployed tests.

- ``package_dir(dst, *dists)``: a directory of symlinks to installed
  distributions and everything they require (extras left out), as a Lambda
  layer built with pip holds them, or as Lambda's Python runtime ships boto3
  (``LAMBDA_RUNTIME_PACKAGES``).
- ``ZipInvoker``: a real ``Invoker`` whose functions run from a zip, each
  instance a bare interpreter (``python -I -S``: no site-packages, no
  PYTHONPATH) with only the zip and the given directories on its path,
  running ``_lambda_runtime.py`` (Lambda's runtime, small). One instance per
  function (reserved concurrency 1: events wait for the instance), warm
  between invocations; ``kill`` SIGKILLs it and the next invocation starts a
  new one.
- ``zip_modules`` / ``first_party``: the module names a zip holds, and which
  top-level names are this repository's, for the allow-list check.
"""

from __future__ import annotations

import importlib.metadata as md
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any, TextIO

from packaging.requirements import Requirement

from storage_functions.exceptions import InvocationFailed
from storage_functions.invoker import Invoker

REPO = Path(__file__).resolve().parents[2]
RUNTIME_SCRIPT = Path(__file__).with_name("_lambda_runtime.py")
#: what Lambda's Python runtime provides beside the standard library
LAMBDA_RUNTIME_PACKAGES = ("boto3",)


def package_dir(dst: Path, *dists: str) -> Path:
    """``dst`` holding symlinks to the files of ``dists`` and their requirements."""
    dst.mkdir(parents=True, exist_ok=True)
    todo, seen = list(dists), set()
    while todo:
        d = md.distribution(todo.pop())
        key = d.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for req in map(Requirement, d.requires or []):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
        for top in {f.parts[0] for f in d.files or [] if f.parts[0] != ".."}:
            src = Path(str(d.locate_file(top)))
            if src.exists() and not (dst / top).exists():
                (dst / top).symlink_to(src)
    return dst


def first_party() -> set[str]:
    """This repository's top-level packages."""
    return {p.parent.name for p in REPO.glob("*/__init__.py")}


def zip_modules(names: list[str]) -> set[str]:
    """The modules a zip's file names make (``a/b.py`` -> ``a.b``, ``a/__init__.py`` -> ``a``)."""
    out = set()
    for n in names:
        if n.endswith(".py"):
            parts = n[:-3].split("/")
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


class _Instance:
    def __init__(self, argv: list[str], env: dict[str, str], log: TextIO) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                                     text=True, bufsize=1)
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.replies.put(json.loads(line))
        self.replies.put(None)  # the process died

    def send(self, request: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()


class ZipInvoker(Invoker):
    """Functions ``handler`` (a Lambda handler string) from ``zip_path`` with ``paths``
    after it on ``sys.path``; every invocation's reply lands in ``outcomes``."""

    def __init__(self, zip_path: Path, handler: str, *, paths: tuple[Path, ...] = (), env: dict[str, str],
                 log_dir: Path, memory_mb: int = 256, timeout_s: float = 120.0) -> None:
        with zipfile.ZipFile(zip_path) as z:  # the repository's packages and the zip's own modules (handlers)
            tops = first_party() | {m.split(".")[0] for m in zip_modules(z.namelist())}
        self.argv = [sys.executable, "-I", "-S", str(RUNTIME_SCRIPT), handler, ",".join(sorted(tops)),
                     str(zip_path), *map(str, paths)]
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **env}
        self.log_dir = log_dir
        self.memory_mb, self.timeout_s = memory_mb, timeout_s
        self.instances: dict[str, _Instance] = {}
        self.outcomes: list[tuple[str, dict[str, Any] | None]] = []
        self.cond = threading.Condition()
        self._logs: list[TextIO] = []
        self.started = 0
        self.deployed: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def _instance(self, name: str) -> _Instance:
        with self.cond:
            inst = self.instances.get(name)
            if inst is None or inst.proc.poll() is not None:
                log = open(self.log_dir / f"{name}.log", "a")  # noqa: SIM115 - closed in close()
                self._logs.append(log)
                inst = self.instances[name] = _Instance(self.argv, self.env, log)
                self.started += 1
                threading.Thread(target=self._collect, args=(name, inst), daemon=True).start()
            return inst

    def _collect(self, name: str, inst: _Instance) -> None:
        while True:
            reply = inst.replies.get()
            with self.cond:
                self.outcomes.append((name, reply))
                self.cond.notify_all()
            if reply is None:
                return

    def _request(self, name: str, payload: str) -> dict[str, Any]:
        return {"event": json.loads(payload), "function_name": name, "memory_mb": self.memory_mb,
                "timeout_s": self.timeout_s, "id": next(self._ids)}

    def _invoke_async(self, function_name: str, payload: str) -> None:
        self._instance(function_name).send(self._request(function_name, payload))

    def _invoke(self, function_name: str, payload: str) -> Any:
        req = self._request(function_name, payload)
        inst = self._instance(function_name)
        inst.send(req)

        def reply() -> dict[str, Any] | None | bool:
            for nm, r in self.outcomes:
                if nm == function_name and (r is None or r.get("id") == req["id"]):
                    return r
            return False

        with self.cond:
            self.cond.wait_for(lambda: reply() is not False, self.timeout_s)
            got = reply()
        if not isinstance(got, dict):
            raise InvocationFailed(f"{function_name}: the instance died or did not answer in {self.timeout_s:g} s",
                                   function_name=function_name, reason="killed")
        if "errorType" in got:
            raise InvocationFailed(f"{function_name}: {got['errorType']}: {got['errorMessage']}",
                                   function_name=function_name, reason="error", error_type=got["errorType"],
                                   error_message=got["errorMessage"], stack_trace="".join(got["stackTrace"]))
        return got["result"]

    def deploy(self, name: str, handler: str, **settings: Any) -> None:
        """As ``LocalPlatform.deploy`` (a ``Stack``'s store calls it): every function runs the
        zip's handler, as deployed (``handler`` is the local platform's spelling of it)."""
        self.deployed[name] = {"handler": handler, **settings}

    def shutdown(self) -> None:
        self.close()

    def wait(self, predicate: Any, timeout: float = 60.0) -> bool:
        """Wait until ``predicate(outcomes)`` holds (each reply notifies)."""
        with self.cond:
            return bool(self.cond.wait_for(lambda: predicate(self.outcomes), timeout))

    def kill(self, name: str) -> int:
        """SIGKILL the function's instance; its pid."""
        inst = self.instances[name]
        inst.proc.send_signal(signal.SIGKILL)
        inst.proc.wait(10)
        inst.proc.stdin.close()  # type: ignore[union-attr]
        return inst.proc.pid

    def close(self) -> None:
        for inst in list(self.instances.values()):
            if not inst.proc.stdin.closed:  # type: ignore[union-attr]
                inst.proc.stdin.close()  # type: ignore[union-attr]  # the runtime's loop ends: it exits
            if inst.proc.poll() is None:
                try:
                    inst.proc.wait(10)
                except subprocess.TimeoutExpired:
                    inst.proc.kill()
                    inst.proc.wait(10)
            inst.reader.join(10)
        for log in self._logs:
            log.close()
