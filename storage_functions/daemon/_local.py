"""A whole local store in one object: a local COS directory, the local Lambda
platform with storage functions deployed on demand, and the daemon. Used by
``funcsion serve daemon`` (local mode), the benchmark and the tests; not for
AWS (there the functions are deployed by ``funcsion deploy storage`` and the
daemon gets an AWS invoker)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from dataclasses import replace
from typing import Any

from ._config import DaemonConfig
from ._server import Daemon

__all__ = ["LocalStore", "RUNTIME_HANDLER", "runtime_preload"]

RUNTIME_HANDLER = "storage_functions.runtime:handler"
#: what a storage-function instance imports, once, in the platform's fork server: a replacement
#: instance (after a kill) then costs this machine a fork, not an interpreter start and a boto3
#: import; on AWS a cold start runs on another machine (its latency: ``cold_start_s``)
RUNTIME_PRELOAD = ("storage_functions.runtime", "storage_functions.cos")
#: ... and, when COS is S3 (the runtime opens COS by its URL, and imports boto3 only for S3)
S3_PRELOAD = ("boto3", "botocore.session")


def runtime_preload(cos_url: str | None) -> tuple[str, ...]:
    """The fork server's modules for a storage function whose COS is ``cos_url``: boto3 only
    for S3, so a local stack (file:// COS) runs without the ``aws`` extra."""
    return RUNTIME_PRELOAD + (S3_PRELOAD if (cos_url or "").startswith("s3://") else ())


class LocalStore:
    """``with LocalStore(memory_mb=256) as st: StoreClient(st.address, st.token)``.

    ``root`` holds ``cos/`` and ``buffer/`` (a temporary directory when
    omitted, removed on stop). ``config`` fields may be overridden by keyword.
    """

    def __init__(self, root: str | None = None, *, config: DaemonConfig | None = None, platform: Any = None,
                 platform_config: Any = None, cos: Any = None, function_timeout_s: float = 900.0,
                 **overrides: Any) -> None:
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="sion-local-")
        base = config or DaemonConfig()
        fields: dict[str, Any] = {"token": base.token or secrets.token_hex(16)}
        if base.cos_url is None and cos is None:
            fields["cos_url"] = "file://" + os.path.join(self.root, "cos")
        if base.buffer_dir is None:
            fields["buffer_dir"] = os.path.join(self.root, "buffer")
        fields.update(overrides)
        self.config = replace(base, **fields)
        self._own_platform = platform is None
        if platform is None:
            from ..local import LocalPlatform, PlatformConfig

            platform = LocalPlatform(platform_config or PlatformConfig(log_dir=os.path.join(self.root, "logs")))
        self.platform = platform
        self.function_timeout_s = function_timeout_s
        self.daemon = Daemon(self.config, platform, cos=cos, on_new_function=self._deploy)

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def address(self) -> tuple[str, int]:
        return self.daemon.address

    @property
    def cos(self) -> Any:
        return self.daemon.cos

    def _deploy(self, name: str) -> None:
        self.platform.deploy(name, RUNTIME_HANDLER, memory_mb=self.config.function_memory_mb,
                             timeout_s=self.function_timeout_s, reserved_concurrency=1,
                             preload=runtime_preload(self.config.cos_url))

    def start(self) -> LocalStore:
        self.daemon.start()
        return self

    def stop(self) -> None:
        try:
            self.daemon.stop()
        finally:
            if self._own_platform:
                self.platform.shutdown()
            if self.daemon.cos is not None and hasattr(self.daemon.cos, "close"):
                self.daemon.cos.close()
            if self._own_root:
                shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
