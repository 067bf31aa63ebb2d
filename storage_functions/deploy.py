"""Package the storage-function runtime and create or update the storage
Lambda functions through boto3.

``build_zip()`` zips the files of an allow-list (``RUNTIME_FILES``: what
``storage_functions.runtime.handler`` imports on every path, the COS adapters
included, since an invocation seals its insertion log into COS and recovery
and cache functions read chunks from it; nothing of the VM-side daemon, the
local platform, the invoker or this module), byte-for-byte reproducible
(fixed timestamps, sorted entries) so that an unchanged runtime has an
unchanged ``CodeSha256`` and a redeploy leaves the code alone. The zip needs
the standard library and, for S3, boto3, which Lambda's Python runtime
provides (no layer); a test runs it so, in a bare interpreter
(``tests/functional/test_zip_as_deployed.py``). This module needs boto3 to
deploy it. ``collect`` and ``reproducible_zip`` build the task
zip too (``sdk.deploy``).

``deploy_storage_functions(count=N, role_arn=...)`` makes functions
``<prefix>0`` .. ``<prefix>N-1``: created if missing, else their code
updated when its hash differs and their configuration when it differs.
Not here: invoking them (``invoker.py``), the CLI (``sdk/cli/deploy_storage.py``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .exceptions import DeployError

__all__ = [
    "build_zip", "code_sha256", "collect", "deploy_storage_functions", "reproducible_zip", "upsert_function",
    "DeployResult", "StorageFunctionConfig", "RUNTIME_HANDLER", "DEFAULT_PREFIX", "DEFAULT_RUNTIME", "RUNTIME_FILES",
]

RUNTIME_HANDLER = "storage_functions.runtime.handler"
DEFAULT_PREFIX = "funcsion-storage-"
DEFAULT_RUNTIME = "python3.12"
#: The storage-function zip, relative to the directory holding the packages (see ``collect``).
RUNTIME_FILES = ("funcsion_errors/", "storage_functions/__init__.py", "storage_functions/exceptions.py",
                 "storage_functions/protocol.py", "storage_functions/checksum.py", "storage_functions/readiness.py",
                 "storage_functions/runtime/", "storage_functions/cos/", "storage_functions/private_files.py",
                 "storage_functions/tls.py", "storage_functions/throttle.py")
_ROOT = Path(__file__).resolve().parent.parent
_EPOCH = (1980, 1, 1, 0, 0, 0)
_ARN_ROLE = re.compile(r"^arn:aws[a-zA-Z-]*:iam::\d{12}:role/.+$")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,54}$")


def collect(allow: Iterable[str], root: Path = _ROOT) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for each entry of ``allow``, sorted: a file, a glob
    (``sdk/*.py``) or a directory ending in "/" (its .py files and py.typed, recursively).
    An entry that matches nothing is a ``DeployError`` (an allow-list must not rot silently)."""
    out: dict[str, Path] = {}
    for entry in allow:
        base = root / entry
        if "*" in entry:
            files = [p for p in root.glob(entry) if p.is_file()]
        elif entry.endswith("/"):
            files = [p for p in base.rglob("*") if p.is_file() and (p.suffix == ".py" or p.name == "py.typed")
                     and "__pycache__" not in p.parts] if base.is_dir() else []
        else:
            files = [base] if base.is_file() else []
        if not files:
            raise DeployError(f"zip allow-list entry {entry!r} matches no file under {root}")
        out.update((p.relative_to(root).as_posix(), p) for p in files)
    return sorted(out.items())


def reproducible_zip(files: Iterable[tuple[str, Path]]) -> bytes:
    """A zip of ``(name, file)`` pairs, the same bytes for the same contents (fixed
    timestamps and modes, entries in the given order)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in files:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def build_zip(*, files: Iterable[str] = RUNTIME_FILES, root: Path = _ROOT) -> bytes:
    """The storage-function deployment zip: the ``files`` allow-list, reproducible to the byte."""
    return reproducible_zip(collect(files, root))


def code_sha256(zip_bytes: bytes) -> str:
    """The hash Lambda reports as ``CodeSha256`` (base64 of SHA-256)."""
    return base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()


@dataclass(frozen=True, slots=True)
class StorageFunctionConfig:
    """The settings every storage function gets."""

    role_arn: str
    memory_mb: int = 1024
    timeout_s: int = 900
    env: Mapping[str, str] = field(default_factory=dict)
    runtime: str = DEFAULT_RUNTIME
    handler: str = RUNTIME_HANDLER
    architecture: Literal["x86_64", "arm64"] = "x86_64"
    description: str = "funcsion storage function (SION runtime)"

    def __post_init__(self) -> None:
        if not _ARN_ROLE.match(self.role_arn or ""):
            raise DeployError(f"role ARN {self.role_arn!r} is not an IAM role ARN "
                              "(arn:aws:iam::123456789012:role/NAME)")
        if not isinstance(self.memory_mb, int) or not 128 <= self.memory_mb <= 10240:
            raise DeployError(f"memory_mb must be an int in [128, 10240], got {self.memory_mb!r}")
        if not isinstance(self.timeout_s, int) or not 1 <= self.timeout_s <= 900:
            raise DeployError(f"timeout_s must be an int in [1, 900] seconds, got {self.timeout_s!r}")
        if self.architecture not in ("x86_64", "arm64"):
            raise DeployError(f"architecture must be x86_64 or arm64, got {self.architecture!r}")
        for k, v in self.env.items():
            if not re.match(r"^[a-zA-Z]\w*$", str(k)) or not isinstance(v, str):
                raise DeployError(f"environment variable {k!r}={v!r}: names are letters, digits and '_' "
                                  "starting with a letter; values are str")

    def configuration(self) -> dict[str, Any]:
        """The ``update_function_configuration`` arguments (and their part of create)."""
        return {"Role": self.role_arn, "Handler": self.handler, "Runtime": self.runtime,
                "MemorySize": self.memory_mb, "Timeout": self.timeout_s, "Description": self.description,
                "Environment": {"Variables": dict(self.env)}}


@dataclass(frozen=True, slots=True)
class DeployResult:
    """What happened to one function: ``created``, ``updated`` (code and/or
    configuration, see ``changed``) or ``unchanged``."""

    name: str
    action: Literal["created", "updated", "unchanged"]
    arn: str
    code_sha256: str
    changed: tuple[str, ...] = ()


def _differs(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    out = []
    for key, value in wanted.items():
        have = current.get(key)
        if key == "Environment":
            have = (have or {}).get("Variables") or {}
            value = value["Variables"]
        elif key == "Description":
            have = have or ""
        if have != value:
            out.append(key)
    return out


def deploy_storage_functions(
    client: Any = None,
    *,
    count: int,
    config: StorageFunctionConfig,
    prefix: str = DEFAULT_PREFIX,
    zip_bytes: bytes | None = None,
    region_name: str | None = None,
    endpoint_url: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    wait_s: float = 120.0,
) -> list[DeployResult]:
    """Create or update functions ``<prefix>0`` .. ``<prefix>count-1``.
    Idempotent: a second run with the same zip and config changes nothing."""
    if not isinstance(count, int) or count < 1:
        raise DeployError(f"count must be an int >= 1, got {count!r}")
    if not _PREFIX.match(prefix) or len(prefix) + len(str(count - 1)) > 64:
        raise DeployError(f"function name prefix {prefix!r}: use letters, digits, '-' and '_', "
                          "so that prefix + index stays within 64 characters")
    if client is None:
        import boto3

        client = boto3.client("lambda", region_name=region_name, endpoint_url=endpoint_url)
    from botocore.exceptions import ClientError

    code = zip_bytes if zip_bytes is not None else build_zip()
    wanted = config.configuration()
    results: list[DeployResult] = []
    for i in range(count):
        name = f"{prefix}{i}"
        try:
            results.append(upsert_function(client, name, code, wanted, architecture=config.architecture,
                                           sleep=sleep, wait_s=wait_s))
        except ClientError as exc:
            err = exc.response.get("Error", {})
            done = ", ".join(f"{r.name} {r.action}" for r in results) or "none"
            raise DeployError(f"deploying storage function {name}: {err.get('Code')}: {err.get('Message')} "
                              f"(done before it: {done})") from exc
    return results


def upsert_function(client: Any, name: str, code: bytes, wanted: Mapping[str, Any], *,
                    architecture: str = "x86_64", sleep: Callable[[float], None] = time.sleep,
                    wait_s: float = 120.0) -> DeployResult:
    """Create Lambda ``name`` from ``code`` with configuration ``wanted`` (the keyword
    arguments of ``create_function``), or update its code and configuration where they
    differ. Raises botocore's ``ClientError``; callers name what they were deploying."""
    from botocore.exceptions import ClientError

    sha = code_sha256(code)
    try:
        current = client.get_function(FunctionName=name)["Configuration"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        created = client.create_function(FunctionName=name, Code={"ZipFile": code}, Publish=False,
                                         Architectures=[architecture], **wanted)
        return DeployResult(name, "created", created["FunctionArn"], sha)
    changed = []
    if current.get("CodeSha256") != sha or current.get("Architectures", [architecture]) != [architecture]:
        client.update_function_code(FunctionName=name, ZipFile=code, Architectures=[architecture])
        changed.append("Code")
        _wait_updated(client, name, sleep, wait_s)
    diff = _differs(current, wanted)
    if diff:
        client.update_function_configuration(FunctionName=name, **wanted)
        changed += diff
        _wait_updated(client, name, sleep, wait_s)
    return DeployResult(name, "updated" if changed else "unchanged", current["FunctionArn"], sha, tuple(changed))


def _wait_updated(client: Any, name: str, sleep: Callable[[float], None], wait_s: float) -> None:
    """Lambda refuses a second update while one is in progress."""
    waited = 0.0
    while True:
        status = client.get_function_configuration(FunctionName=name).get("LastUpdateStatus", "Successful")
        if status == "Successful":
            return
        if status == "Failed":
            raise DeployError(f"updating storage function {name} failed (LastUpdateStatus=Failed)")
        if waited >= wait_s:
            raise DeployError(f"storage function {name} still updating after {wait_s:g} s")
        sleep(1.0)
        waited += 1.0
