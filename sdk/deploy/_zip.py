"""The task zip: what every task Lambda of a workflow runs, from an allow-list.

``TASK_FILES`` names what a task imports (the handlers' ``sdk.get``/``sdk.put``
and the cleanup handler ``sdk._cleanup:handler``): the SDK's top-level modules
(its subpackages ``cli``, ``local`` and ``deploy`` run on a developer's machine),
``sdk.asl_plan`` (stdlib only: ``import sdk`` loads it for ``@sdk.offload``'s run
layout), the metadata client, the error root, ``wds`` (the config's limits; stdlib
only), and of ``storage_functions`` only the wire protocol and the run tokens
(COS-tier and persisted copies go through the daemon: a task holds no COS
credentials). The Python files beside the WDS come first: given the handler
references, the handler modules and the modules beside them that those import
(read from their source, transitively); otherwise every one of them but
``inputs.py``, which ``funcsion run`` imports on the developer's machine to
make a run's inputs (``sdk.local._inputs``) and no Lambda does. Third-party
packages come from Lambda layers holding ``TASK_LAYER_PACKAGES`` (boto3 is in
the Lambda runtime). Tests run the zip as deployed: a task and the cleanup
handler from it in a bare interpreter with the layer's packages alone, and the
first-party modules they imported compared with the zip's both ways
(``tests/functional/test_zip_as_deployed.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from storage_functions.deploy import collect, reproducible_zip

__all__ = ["TASK_EXCLUDED", "TASK_FILES", "TASK_LAYER_PACKAGES", "LOCAL_ONLY", "build_task_zip", "own_modules"]

#: Entries relative to the directory holding the packages: a file, a glob, or a directory
#: ending in "/" (its .py files and py.typed, recursively).
TASK_FILES = (
    "funcsion_errors/", "funcsion_rpc/", "sdk/*.py", "sdk/asl_plan/", "wds/",
    "storage_functions/__init__.py", "storage_functions/exceptions.py", "storage_functions/protocol.py",
    "storage_functions/auth.py", "storage_functions/checksum.py",
    "storage_functions/tls.py",
)
#: What the task Lambdas' layers must hold (pip names).
TASK_LAYER_PACKAGES = ("thrift", "pyeclib", "msgpack", "aws-lambda-powertools")


#: Left out of the task zip: ``sdk.torch`` is for training jobs that read stored samples
#: (torch is no layer package; a task importing it would fail at import anyway); the Thrift
#: compiler's ``constants`` module, which nothing imports (the IDL declares no constant).
TASK_EXCLUDED = frozenset({"sdk/torch.py", "funcsion_rpc/gen/metadata/constants.py"})
#: Files beside a WDS that run on the developer's machine only (``funcsion run``'s inputs).
LOCAL_ONLY = frozenset({"inputs.py"})


def _imported(path: Path) -> set[str]:
    """The top-level names a module's source imports (absolute imports; any nesting)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def own_modules(code_dir: str | Path, handlers: Iterable[str] | None = None) -> list[Path]:
    """The Python files beside the WDS a task zip carries, sorted: the modules of
    ``handlers`` (``module:function`` or ``module.function``; those not beside the
    WDS, such as ``sdk._cleanup:handler``, are the zip's own) and, transitively, the
    files beside them that they import; with ``handlers`` None, every file but
    ``LOCAL_ONLY``."""
    code = Path(code_dir)
    files = {p.stem: p for p in code.glob("*.py")}
    if handlers is None:
        return sorted(p for p in files.values() if p.name not in LOCAL_ONLY)
    todo = [ref.replace(":", ".").rsplit(".", 1)[0] for ref in handlers]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in files:
            continue
        seen[name] = files[name]
        todo.extend(_imported(files[name]))
    return sorted(seen.values())


def build_task_zip(code_dir: str | Path, handlers: Iterable[str] | None = None) -> bytes:
    """The zip every task Lambda of a workflow runs (see the module docstring); ``handlers``
    are the references of its entries (``plan_workflow`` passes them)."""
    own = [(p.name, p) for p in own_modules(code_dir, handlers)]
    return reproducible_zip(own + [(n, p) for n, p in collect(TASK_FILES) if n not in TASK_EXCLUDED])
