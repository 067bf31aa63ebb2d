"""The task zip: what every task Lambda of a workflow runs, from an allow-list.

``TASK_FILES`` names what a task imports (the handlers' ``sdk.get``/``sdk.put``
and the cleanup handler ``sdk._cleanup:handler``): the SDK's top-level modules
(its subpackages ``cli``, ``local`` and ``deploy`` run on a developer's machine),
the metadata client, the error root, ``wds`` (the config's limits; stdlib
only), and of ``storage_functions`` only the wire protocol and the run tokens
(COS-tier and persisted copies go through the daemon: a task holds no COS
credentials). The Python files beside the WDS (handlers, inputs) come first.
Third-party packages come from Lambda layers holding ``TASK_LAYER_PACKAGES``
(boto3 is in the Lambda runtime). A test unpacks the zip into a bare venv with
only those packages and imports every module and handler in it.
"""

from __future__ import annotations

from pathlib import Path

from storage_functions.deploy import collect, reproducible_zip

__all__ = ["TASK_EXCLUDED", "TASK_FILES", "TASK_LAYER_PACKAGES", "build_task_zip"]

#: Entries relative to the directory holding the packages: a file, a glob, or a directory
#: ending in "/" (its .py files and py.typed, recursively).
TASK_FILES = (
    "funcsion_errors/", "funcsion_rpc/", "sdk/*.py", "wds/",
    "storage_functions/__init__.py", "storage_functions/exceptions.py", "storage_functions/protocol.py",
    "storage_functions/auth.py", "storage_functions/checksum.py",
    "storage_functions/tls.py",
)
#: What the task Lambdas' layers must hold (pip names).
TASK_LAYER_PACKAGES = ("thrift", "pyeclib", "msgpack", "aws-lambda-powertools")


#: Left out of the task zip: ``sdk.torch`` is for training jobs that read stored samples
#: (torch is no layer package; a task importing it would fail at import anyway).
TASK_EXCLUDED = frozenset({"sdk/torch.py"})


def build_task_zip(code_dir: str | Path) -> bytes:
    """The zip every task Lambda of a workflow runs (see the module docstring)."""
    code = Path(code_dir)
    own = [(p.name, p) for p in sorted(code.glob("*.py"))]
    return reproducible_zip(own + [(n, p) for n, p in collect(TASK_FILES) if n not in TASK_EXCLUDED])
