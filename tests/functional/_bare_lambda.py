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
- ``check_allow_list``: the first-party modules the invocations imported
  (the runtime reports them) against the zip's modules, both ways
  (``zip_modules``, ``reachable``: a lazy import on a path not taken counts).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import io
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


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(module: str, source: bytes, is_package: bool) -> set[str]:
    """The absolute names ``module``'s source imports anywhere (in functions and branches too;
    not under ``if TYPE_CHECKING``), each with its submodule candidates (``from a import b``: a.b)."""
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        if _type_checking(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return out


def reachable(zip_bytes: bytes, imported: set[str]) -> set[str]:
    """The zip's modules that the source of ``imported`` (and, in turn, of what they reach)
    imports on some path: a lazy import in a branch this run did not take."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as z:
        sources = {}
        for n in z.namelist():
            if n.endswith(".py"):
                (mod,) = zip_modules([n])
                sources[mod] = (z.read(n), n.endswith("/__init__.py"))
    seen: set[str] = set()
    todo = [m for m in imported if m in sources]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for name in _imports(m, *sources[m]):
            parts = name.split(".")
            todo.extend(p for p in (".".join(parts[:k]) for k in range(1, len(parts) + 1)) if p in sources)
    return seen


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
        with self.cond:
            since = len(self.outcomes)  # an earlier instance's death is not this invocation's
        inst.send(req)

        def reply() -> dict[str, Any] | None | bool:
            for nm, r in self.outcomes[since:]:
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


#: modules a zip holds that no handler path imports, and why (none today)
UNUSED_BY_DESIGN: dict[str, str] = {}


def check_allow_list(zip_bytes: bytes, zip_path: Path, replies: list[dict[str, Any]]) -> set[str]:
    """Every first-party module the handlers imported came from the zip (nothing missing),
    and every module of the zip was imported, or is imported by their code on a path these
    invocations did not take (a lazy import in another branch: ``reachable``), but
    ``UNUSED_BY_DESIGN`` (nothing unused). Returns the modules imported."""
    used: dict[str, str] = {}
    for r in replies:
        used.update(r["modules"])
    outside = {m: f for m, f in used.items() if not f.startswith(str(zip_path) + os.sep)}
    assert not outside, f"imported from outside the zip: {outside}"
    held = zip_modules(zipfile.ZipFile(io.BytesIO(zip_bytes)).namelist())
    assert set(used) <= held
    unused = held - set(used) - reachable(zip_bytes, set(used))
    assert unused == set(UNUSED_BY_DESIGN), f"in the zip, imported by no handler path: {sorted(unused)}"
    return set(used)


def failures(outcomes: list[tuple[str, dict[str, Any] | None]]) -> list[str]:
    """Invocations that failed as Lambda reports it, or returned errors, in one line each."""
    out = []
    for name, r in outcomes:
        if r is not None and "errorType" in r:
            out.append(f"{name}: {r['errorType']}: {r['errorMessage']}")
        elif r is not None and r["result"].get("errors"):
            out.append(f"{name}: {r['result']['errors']}")
    return out
