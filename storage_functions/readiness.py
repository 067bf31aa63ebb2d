"""Waiting for file descriptors to become readable with ``poll(2)``, not
``select(2)``: select cannot take a descriptor numbered 1024 or more
(``ValueError: filedescriptor out of range``), which a long-lived process that
holds many sockets (a stack serving several jobs, a test session) reaches."""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from typing import Protocol, Union

__all__ = ["readable"]


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileLike = Union[int, _HasFileno]


def readable(files: Sequence[FileLike], timeout: float | None = None) -> list[int]:
    """The descriptors of ``files`` that are readable (or at end of file, hung up or
    in error, which a read reports) within ``timeout`` seconds (None: wait until one
    is; 0: just look), as numbers; [] when the time ran out."""
    p = select.poll()
    for f in files:
        p.register(f, select.POLLIN | select.POLLPRI)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    while True:
        try:
            return [fd for fd, _ in p.poll(ms)]
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for signal handlers that raise
            continue
