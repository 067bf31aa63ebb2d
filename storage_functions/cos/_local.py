"""COS in a local directory: the embedded default.

Layout: a key's segments become directories, each percent-encoded
(``urllib.parse.quote``, so only ``[A-Za-z0-9_.~-]`` stay literal), and the
last segment is a file named ``<segment>%obj``. Since an encoded name never
holds a ``%`` that is not followed by two hex digits, ``a`` (file ``a%obj``)
and ``a/b`` (directory ``a``) never collide, and temp files in the ``%tmp``
directory never look like keys. A put writes a temp file and ``os.replace``-s
it, so readers see the old or the new object, never a part; with
``fsync=True`` the file and its directory are flushed first. Deleting the
last key of a directory removes the empty directories up to the root.
Directories it makes are 0700 and objects 0600 (``private_files``): COS
holds a workflow's data. Not here: retries and counters (``_base.py``).
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from ..exceptions import COSConfigError, COSNotFound, InvalidKey
from ..private_files import open_private, private_dir
from ._base import COS

__all__ = ["LocalCOS"]

_SUFFIX = "%obj"
_TMP = "%tmp"
_MAX_NAME = 255  # bytes in one file name on common filesystems
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT}


def _enc(seg: str) -> str:
    return quote(seg, safe="")


class LocalCOS(COS):
    """COS in the directory ``root`` (created if missing with ``create=True``)."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True, fsync: bool = False, **base: Any) -> None:
        super().__init__(**base)
        path = Path(root)
        if not path.is_absolute():
            raise COSConfigError(f"local COS root must be an absolute path, got {str(root)!r}")
        if create:
            private_dir(path)
        elif not path.is_dir():
            raise COSConfigError(f"local COS root {str(path)!r} is not a directory (pass create=True to make it)")
        self.root = path
        self.fsync = fsync
        self.url = path.as_uri()
        private_dir(path / _TMP)

    def _path(self, key: str) -> Path:
        segs = [_enc(s) for s in key.split("/")]
        segs[-1] += _SUFFIX
        for s in segs:
            if len(s.encode()) > _MAX_NAME:
                raise InvalidKey(f"COS key {key!r}: segment {unquote(s)[:40]!r}... is too long for a local directory "
                                 f"({len(s.encode())} > {_MAX_NAME} bytes once encoded)")
        return self.root.joinpath(*segs)

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        tmp = self.root / _TMP / uuid.uuid4().hex
        try:
            with open_private(tmp, "wb") as fh:
                fh.write(data)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            self._place(key, tmp)
        finally:
            if tmp.exists():
                tmp.unlink(missing_ok=True)

    def _put_file(self, key: str, path: str, offset: int, length: int) -> None:
        """A whole file is hard-linked (no byte moves; the caller never changes it again),
        a range copied in the kernel (``copy_file_range``), then placed like a put."""
        tmp = self.root / _TMP / uuid.uuid4().hex
        try:
            linked = False
            if offset == 0 and os.path.getsize(path) == length:
                try:
                    os.link(path, tmp)
                    linked = True
                except OSError:  # another filesystem, or links not allowed: copy
                    pass
            if not linked:
                with open(path, "rb") as src, open_private(tmp, "wb") as dst:
                    _copy_range(src.fileno(), dst.fileno(), offset, length)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._place(key, tmp)
        finally:
            if tmp.exists():
                tmp.unlink(missing_ok=True)

    def _place(self, key: str, tmp: Path) -> None:
        """Rename the finished temp file ``tmp`` to ``key``'s file."""
        target = self._path(key)
        for _ in range(10):  # a concurrent delete may remove an emptied parent between mkdir and replace
            try:
                if not target.parent.is_dir():
                    private_dir(target.parent)
                os.replace(tmp, target)
                break
            except FileNotFoundError:
                if not tmp.exists():
                    raise
        else:  # pragma: no cover - needs a delete storm
            raise OSError(errno.EAGAIN, f"could not place {key!r}: its directory keeps disappearing")
        if self.fsync:
            fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError):
            raise COSNotFound(f"no key {key!r} in {self.url}") from None

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as fh:
                fh.seek(start)
                return fh.read(length)
        except (FileNotFoundError, NotADirectoryError):
            raise COSNotFound(f"no key {key!r} in {self.url}") from None

    def _delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:  # not empty, or already gone
                return
            parent = parent.parent

    def _exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _list(self, prefix: str) -> list[str]:
        # walk only the directory named by the prefix's complete segments
        *dirs, _partial = prefix.split("/")
        base = self.root.joinpath(*(_enc(s) for s in dirs))
        lead = "".join(d + "/" for d in dirs)
        out: list[str] = []
        if not base.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            if rel == ".":
                dirnames[:] = [d for d in dirnames if d != _TMP]
                segs: list[str] = []
            else:
                segs = [unquote(s) for s in rel.split(os.sep)]
            for name in filenames:
                if name.endswith(_SUFFIX):
                    key = lead + "".join(s + "/" for s in segs) + unquote(name[: -len(_SUFFIX)])
                    if key.startswith(prefix):
                        out.append(key)
        return out

    def _is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    """``length`` bytes of ``src`` from ``offset`` to the start of ``dst``: in the kernel where
    ``copy_file_range`` works, else through a buffer."""
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src, dst, length - done, offset + done, done)
            if n == 0:
                break
            done += n
    except (AttributeError, OSError):  # no copy_file_range here (or not across these filesystems)
        os.lseek(dst, done, os.SEEK_SET)
        while done < length:
            piece = os.pread(src, min(length - done, 8 << 20), offset + done)
            if not piece:
                break
            os.write(dst, piece)
            done += len(piece)
    if done != length:
        raise OSError(errno.EIO, f"copied {done} of {length} bytes: the source file is shorter")
