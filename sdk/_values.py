"""File-like values: ``sdk.put(name, open(path, "rb"))`` and ``sdk.get(name, stream=True)``.

A file-like value is stored as raw bytes (the ``bytes`` codec) without being
read into memory: ``Upload`` measures it and computes its checksum in one
pass (a source that cannot seek is first spooled to a temporary file, on disk
past 64 MiB), then ``StoreClient.put_stream`` pulls it one stripe at a time.
``ValueStream`` is what a streamed get returns: the object's payload as a
readable binary file and an iterator of bytes-like pieces in stripe order.
Covers the value side only; the wire is ``_stream``/``_store_client``.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Upload", "ValueStream", "is_file_like", "SPOOL_BYTES"]

SPOOL_BYTES = 64 << 20
_BLOCK = 1 << 20


def is_file_like(value: Any) -> bool:
    return callable(getattr(value, "read", None)) and not isinstance(value, (bytes, bytearray, memoryview, str))


class Upload:
    """A file-like value ready to be streamed: ``size`` bytes from offset ``start`` of
    ``src``, and the checksum of ``prefix`` + those bytes (what ``put`` of the same bytes
    in memory would compute, so a retry either way is the same write)."""

    def __init__(self, name: str, value: Any, prefix: bytes) -> None:
        self.name = name
        self.prefix = prefix
        self._spool: Any = None
        src = value
        try:
            seekable = bool(src.seekable())
        except (AttributeError, OSError, ValueError):
            seekable = False
        if not seekable:
            self._spool = src = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
            shutil.copyfileobj(_BinaryReader(name, value), src, _BLOCK)
            src.seek(0)
        self.src = src
        self.start = src.tell()
        self.size = src.seek(0, io.SEEK_END) - self.start
        h = hashlib.blake2b(prefix, digest_size=16)
        src.seek(self.start)
        reader = _BinaryReader(name, src)
        while block := reader.read(_BLOCK):
            h.update(block)
        self.checksum = h.hexdigest()

    def read_from_start(self) -> Any:
        """Rewind to the value's first byte; returns its ``read``."""
        self.src.seek(self.start)
        return _BinaryReader(self.name, self.src).read

    def read_all(self) -> bytes:
        """``prefix`` + the whole value, in memory (for the COS paths, which take bytes)."""
        return self.prefix + bytes(self.read_from_start()(self.size))

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


class _BinaryReader:
    """``read`` that insists on bytes: a file opened in text mode is a clear error."""

    def __init__(self, name: str, src: Any) -> None:
        self.name, self.src = name, src

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if isinstance(data, str):
            from ._codecs import CodecError

            raise CodecError(f"put of {self.name!r}: the file-like value gives str; open the file in binary "
                             "mode (open(path, 'rb')) or pass the text itself")
        return data  # type: ignore[no-any-return]


class ValueStream:
    """A stored object's payload as a stream: ``read``/``readinto`` it like a binary file,
    or iterate it for bytes-like pieces in order. ``size`` is the payload's size and
    ``codec`` the codec its writer chose (the bytes are not decoded). Close it, or use
    ``with``, when stopping early. ``on_close`` runs once, after the first ``close``
    (the client frees an object this read was the last reader of: under ``oracle`` its
    bytes leave function memory once the reader has them)."""

    def __init__(self, inner: Any, size: int, codec: str, on_close: Callable[[], None] | None = None) -> None:
        self._inner = inner
        self.size = size
        self.codec = codec
        self._on_close = on_close

    def readable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    def read(self, n: int | None = -1) -> bytes:
        return self._inner.read(n)  # type: ignore[no-any-return]

    def readinto(self, b: Any) -> int:
        return self._inner.readinto(b)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self._inner, io.BytesIO):
            return iter(lambda: self._inner.read(8 << 20), b"")
        return iter(self._inner)

    def close(self) -> None:
        self._inner.close()
        done, self._on_close = self._on_close, None
        if done is not None:
            done()

    def __enter__(self) -> ValueStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
