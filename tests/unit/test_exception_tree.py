"""One exception tree: every error class a funcsion package defines derives from
``funcsion_errors.FuncsionError``, which imports nothing but the standard library."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import pytest

from funcsion_errors import FuncsionError

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("funcsion_errors", "wds", "hdag", "funcsion_rpc", "lifetime_model", "metadata_server",
            "storage_functions", "sdk")
# Signals that never leave the module that raises them (each is caught and turned into a
# FuncsionError or a result right there), so they stay plain Exceptions.
INTERNAL = {
    "sdk._client.AlreadyCommitted",              # the task decorator ends the attempt successfully
    "sdk.deploy.sfn_local.HandlerError",         # a simulated Lambda function error under moto
    "storage_functions.cos._retry.RetryExhausted",  # COS and the invoker raise their own error from it
    "storage_functions.runtime._memory.MemoryFull",  # the storage function replies with a status
    "storage_functions.runtime._memory.Overlap",  # the storage function replies FULL (a dead chunk)
    "storage_functions.daemon._placement.PoolExhausted",  # the daemon scales out or refuses the PUT
    "storage_functions.daemon._placement.BadPlacement",   # the daemon refuses the PUT with a StoreError
    "wds._templates.TemplateError",              # wds._parse turns it into an Issue at its JSON path
    "wds._limits.JSONNumberTooLong",             # the parser turns it into an Issue (a too-long number)
    "metadata_server._frames._Short",            # the frame reader waits for more bytes
    "metadata_server._server._BadPeer",          # the server closes that connection
    "sdk.local._run.RunInterrupted",             # a KeyboardInterrupt on purpose: Ctrl-C ends the run as aborted
    "sdk.asl_plan._definition._Duplicate",       # the ASL reader turns it into an AslError at the key's JSON path
    "sdk.asl_plan._flow._TooMany",               # the planner's walk turns it into a "not static" route
}


def _modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        for info in pkgutil.walk_packages(mod.__path__, prefix=pkg + "."):
            if info.name.rsplit(".", 1)[-1] != "__main__" and ".gen" not in info.name:
                names.append(info.name)
    return names


def test_every_error_class_derives_from_the_root() -> None:
    found, stray = [], []
    for name in _modules():
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name):
                qual = f"{name}.{obj.__name__}"
                found.append(qual)
                if not issubclass(obj, FuncsionError) and qual not in INTERNAL:
                    stray.append(qual)
    assert not stray, f"error classes outside the FuncsionError tree: {stray}"
    assert {"wds.exceptions.WDSError", "funcsion_rpc.errors.MetadataError",
            "storage_functions.exceptions.StorageError", "sdk.exceptions.TaskError"} <= set(found)
    assert INTERNAL <= set(found), "an INTERNAL entry names a class that no longer exists"


@pytest.mark.parametrize("root", ["wds.WDSError", "funcsion_rpc.errors.MetadataError",
                                  "storage_functions.exceptions.StorageError", "sdk.exceptions.StoreFailure",
                                  "sdk.ConfigError", "sdk.CodecError"])
def test_package_roots(root: str) -> None:
    mod, _, cls = root.rpartition(".")
    assert issubclass(getattr(importlib.import_module(mod), cls), FuncsionError)


def test_root_is_one_class_everywhere() -> None:
    import sdk
    import storage_functions.exceptions as sfe
    import wds

    assert sdk.FuncsionError is wds.FuncsionError is FuncsionError
    assert sfe.StorageError.__mro__[1] is FuncsionError


def test_root_module_imports_only_the_standard_library() -> None:
    tree = ast.parse((REPO / "funcsion_errors" / "__init__.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    assert imported <= set(sys.stdlib_module_names), imported


def test_storage_functions_exceptions_import_only_the_root() -> None:
    tree = ast.parse((REPO / "storage_functions" / "exceptions.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "funcsion_errors"}
