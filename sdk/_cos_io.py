"""The SDK's own COS objects, next to the store's (which the daemon owns).

Three kinds, each under its own prefix of the stack's COS (``cos_url``):

- ``tier/<run_id>/<name>``: objects the metadata server placed in the COS tier
  instead of function memory (a run started with ``latency_sensitive=False``,
  or over its capacity hint or the stack's memory budget). The encoded frame
  (codec byte + payload); deleted when the object is freed.
- ``persisted/<run_id>/<name>``: ``put(..., persist=True)`` copies (Pocket's
  PERSIST flag): the frame, kept after the run until ``Client.delete``.
- ``outputs/<run_id>/<name>``: workflow outputs, copied after a successful run;
  the payload only (no codec byte), so other tools can read the file as is.

Covers the key layout and a lazily opened COS handle; not the store.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["CosAccess", "tier_key", "persist_key", "output_key", "TIER_PREFIX", "PERSIST_PREFIX",
           "OUTPUT_PREFIX"]

TIER_PREFIX = "tier"
PERSIST_PREFIX = "persisted"
OUTPUT_PREFIX = "outputs"


def tier_key(run_id: str, name: str) -> str:
    return f"{TIER_PREFIX}/{run_id}/{name}"


def persist_key(run_id: str, name: str) -> str:
    return f"{PERSIST_PREFIX}/{run_id}/{name}"


def output_key(run_id: str, name: str) -> str:
    return f"{OUTPUT_PREFIX}/{run_id}/{name}"


class CosAccess:
    """A COS handle opened on first use (most tasks never touch COS directly)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._cos: Any = None
        self._lock = threading.Lock()

    def get_cos(self, why: str) -> Any:
        if not self.url:
            from ._config import ConfigError

            raise ConfigError(f"{why} needs the stack's object store, but no cos_url is known: start the stack "
                              "with `funcsion up` or pass Endpoints(cos_url=...)")
        with self._lock:
            if self._cos is None:
                from storage_functions.cos import open_cos

                self._cos = open_cos(self.url)
            return self._cos

    def location(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"

    def close(self) -> None:
        with self._lock:
            cos, self._cos = self._cos, None
        if cos is not None:
            cos.close()
