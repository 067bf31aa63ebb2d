"""The COS base class: key validation, retries, counters.

A backend implements six primitives (``_put``, ``_get``, ``_get_range``,
``_delete``, ``_list``, ``_exists``) and ``_is_transient``, and may override
``_put_file`` (store a file's range without reading it into the process); it raises
``COSNotFound`` for a missing key and lets every other error escape. The base
validates keys, retries transient errors under a ``RetryPolicy`` with an
injected ``sleep``/``clock``/``rng``, wraps what is left in ``COSError``
naming the operation, key and URL, and counts calls and bytes. Not here:
URL parsing (``_open.py``), anything specific to a filesystem or to S3.

Keys are '/'-separated, like S3 keys: 1 to 1024 UTF-8 bytes, no empty, '.'
or '..' segment (so no leading, trailing or doubled '/'), no backslash and no
control character. A key is never a prefix problem: ``"a"`` and ``"a/b"`` may
both exist in every backend.
"""

from __future__ import annotations

import builtins

import os
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

from ..exceptions import COSError, COSNotFound, InvalidKey
from ._retry import RetryExhausted, RetryPolicy, call_with_retries

__all__ = ["COS", "COSStats", "validate_key", "MAX_KEY_BYTES"]

T = TypeVar("T")
MAX_KEY_BYTES = 1024


def validate_key(key: object, *, what: str = "key") -> str:
    """Return ``key`` if the object store can hold it, else raise
    ``InvalidKey`` saying what is wrong."""
    if not isinstance(key, str):
        raise InvalidKey(f"COS {what} must be a str, got {type(key).__name__}: {key!r}")
    if not key:
        raise InvalidKey(f"COS {what} is empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidKey(f"COS {what} {key[:60]!r}... is over {MAX_KEY_BYTES} UTF-8 bytes")
    for ch in key:
        if ch < " " or ch == "\x7f":
            raise InvalidKey(f"COS {what} {key!r} contains control character {ch!r}")
    if "\\" in key:
        raise InvalidKey(f"COS {what} {key!r} contains a backslash; separate segments with '/'")
    for seg in key.split("/"):
        if seg in ("", ".", ".."):
            raise InvalidKey(
                f"COS {what} {key!r} has an empty, '.' or '..' segment "
                "(no leading, trailing or doubled '/')"
            )
    return key


def _validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise InvalidKey(f"COS prefix must be a str, got {type(prefix).__name__}: {prefix!r}")
    if prefix:
        # a prefix may end in '/' or in a partial segment; its full segments must be valid
        head = prefix[:-1] if prefix.endswith("/") else prefix
        validate_key(head, what="prefix")
    return prefix


@dataclass(slots=True)
class COSStats:
    """Counters of one COS adapter (calls that succeeded, and their bytes)."""

    puts: int = 0
    gets: int = 0
    deletes: int = 0
    lists: int = 0
    bytes_put: int = 0
    bytes_got: int = 0
    retries: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class COS(ABC):
    """An object store: bytes under string keys. Thread-safe.

    ``url`` names the store so that ``open_cos(cos.url)`` opens the same one
    (a storage function gets it in its event). ``stats`` counts what was done.
    """

    url: str

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.retry = retry if retry is not None else RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._stats = COSStats()

    # -- public API ---------------------------------------------------------

    @property
    def stats(self) -> COSStats:
        """A snapshot of the counters."""
        with self._lock:
            return COSStats(**self._stats.as_dict())

    def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` under ``key``, replacing what was there; readers see
        the old or the new object, never a part."""
        validate_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"COS put of {key!r}: data must be bytes-like, got {type(data).__name__}")
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        self._call("put", key, lambda: self._put(key, data))
        self._count(puts=1, bytes_put=size)

    def put_file(self, key: str, path: str | os.PathLike[str], offset: int = 0, length: int | None = None) -> None:
        """Store ``length`` bytes of the file at ``path`` from ``offset`` (default: to its end)
        under ``key``, like :meth:`put`, without reading them into this process where the
        backend can: a local directory hard-links a whole file or copies in the kernel, S3
        uploads from the file (multipart past boto3's threshold). The file must not change
        while (or, for a link, after) it is stored."""
        validate_key(key)
        src = os.fspath(path)
        if not isinstance(offset, int) or offset < 0 or (length is not None and (not isinstance(length, int)
                                                                                 or length < 0)):
            raise ValueError(f"COS put_file of {key!r}: offset and length must be ints >= 0, "
                             f"got {offset!r}, {length!r}")
        try:
            size = os.path.getsize(src) - offset if length is None else length
        except OSError as exc:
            self._count(errors=1)
            raise COSError(f"COS put_file of {key!r} in {self.url}: cannot read {src}: {exc.strerror}") from None
        self._call("put", key, lambda: self._put_file(key, src, offset, size))
        self._count(puts=1, bytes_put=size)

    def get(self, key: str) -> bytes:
        """The whole object; ``COSNotFound`` if there is none."""
        validate_key(key)
        data = self._call("get", key, lambda: self._get(key))
        self._count(gets=1, bytes_got=len(data))
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)`` of the object, cut at its end (so
        a range past the end gives ``b""``); ``COSNotFound`` if there is none."""
        validate_key(key)
        if not isinstance(start, int) or not isinstance(length, int) or start < 0 or length < 0:
            raise ValueError(f"COS get_range of {key!r}: start and length must be ints >= 0, got {start!r}, {length!r}")
        data = self._call("get_range", key, lambda: self._get_range(key, start, length))
        self._count(gets=1, bytes_got=len(data))
        return data

    def delete(self, key: str) -> None:
        """Remove ``key``; deleting a missing key is not an error."""
        validate_key(key)
        self._call("delete", key, lambda: self._delete(key))
        self._count(deletes=1)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key starting with ``prefix`` (a non-empty string);
        return how many were removed."""
        _validate_prefix(prefix)
        if not prefix:
            raise InvalidKey("COS delete_prefix('') would delete the whole store; pass a non-empty prefix")
        keys = self.list(prefix)
        n = self._call("delete_prefix", prefix, lambda: self._delete_many(keys))
        self._count(deletes=n)
        return n

    def list(self, prefix: str = "") -> list[str]:
        """Sorted keys starting with ``prefix`` (plain string prefix, as S3)."""
        _validate_prefix(prefix)
        keys = self._call("list", prefix, lambda: self._list(prefix))
        self._count(lists=1)
        return sorted(keys)

    def exists(self, key: str) -> bool:
        validate_key(key)
        return self._call("exists", key, lambda: self._exists(key))

    def close(self) -> None:  # noqa: B027 - an optional hook: most backends hold nothing
        """Release what the backend holds (nothing by default)."""

    def __enter__(self) -> COS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None: ...

    @abstractmethod
    def _get(self, key: str) -> bytes: ...

    @abstractmethod
    def _get_range(self, key: str, start: int, length: int) -> bytes: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> builtins.list[str]: ...

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _is_transient(self, exc: BaseException) -> bool:
        """True if retrying the same call may succeed."""

    def _put_file(self, key: str, path: str, offset: int, length: int) -> None:
        """Default: read the range and ``_put`` it (a backend overrides this to avoid the copy)."""
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)
        if len(data) != length:
            raise OSError(f"{path}: {length} bytes from offset {offset} asked, {len(data)} there")
        self._put(key, data)

    def _delete_many(self, keys: builtins.list[str]) -> int:
        for key in keys:
            self._delete(key)
        return len(keys)

    # -- machinery ----------------------------------------------------------

    def _count(self, **incr: int) -> None:
        with self._lock:
            for name, n in incr.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    def _on_retry(self, attempt: int, exc: BaseException, delay: float) -> None:
        self._count(retries=1)

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        try:
            return call_with_retries(
                fn, policy=self.retry, is_transient=self._is_transient,
                sleep=self._sleep, clock=self._clock, rng=self._rng, on_retry=self._on_retry,
            )
        except COSNotFound:
            raise
        except RetryExhausted as exc:
            self._count(errors=1)
            raise COSError(
                f"COS {op} of {key!r} in {self.url} failed after {exc.attempts} attempts: "
                f"{type(exc.last).__name__}: {exc.last}"
            ) from exc.last
        except COSError:
            self._count(errors=1)
            raise
        except Exception as exc:
            self._count(errors=1)
            raise COSError(f"COS {op} of {key!r} in {self.url} failed: {type(exc).__name__}: {exc}") from exc


