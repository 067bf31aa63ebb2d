"""Files and directories only their owner may read or list: directories made
0700 (every level this creates), files 0600. A workflow's intermediate data,
its COS copies, buffer files and logs are the user's data; on a shared
machine they must not be world-readable whatever the umask. Stdlib only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "open_private"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str | os.PathLike[str], *, tighten: bool = False) -> Path:
    """Make ``path`` and any missing parents, each 0700; ``tighten``: also make an existing
    ``path`` 0700 (for directories that are ours alone, like a state directory)."""
    p = Path(path)
    missing: list[Path] = []
    q = p
    while not q.exists() and q != q.parent:
        missing.append(q)
        q = q.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by someone else: keep theirs
            continue
        os.chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask; this is not
    if tighten and p.is_dir() and (p.stat().st_mode & 0o777) != DIR_MODE:
        os.chmod(p, DIR_MODE)
    return p


def open_private(path: str | os.PathLike[str], mode: str = "wb") -> IO[Any]:
    """``open(path, mode)`` for a binary write or append mode, the file 0600 (also one that existed)."""
    flags = {"wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             "xb": os.O_WRONLY | os.O_CREAT | os.O_EXCL}[mode]
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o777 != FILE_MODE and st.st_uid == os.getuid():
            os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise
