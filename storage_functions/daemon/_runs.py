"""A run's data in the daemon, found by its keys (``<run_id>/<name>``): what the
object table holds per run, and dropping everything a run left in COS and in
the persistent buffer when it ended or expired -- also what an earlier
daemon process left (killed with -9: its object table is gone, its COS copies
``<cos_prefix>/objects/k-<quoted key>/<version>`` and buffer files
``<cos key with / as _>.buf`` are not). ``sweep`` does that at start for
every run the caller does not keep. Not here: freeing function memory
(``Daemon.free``), deciding which runs ended (the metadata server's).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

from ._objects import ObjectVersion

__all__ = ["run_of", "held_by_run", "cos_run_prefix", "drop_run_files", "sweep_files"]

log = logging.getLogger("storage_functions.daemon")

_BUF = ".buf"


def run_of(key: str) -> str | None:
    """The run a store key belongs to (``r-3/counts_00`` -> ``r-3``), None for other keys."""
    run, sep, name = key.partition("/")
    return run if sep and run and name else None


def held_by_run(objs: Iterable[ObjectVersion]) -> dict[str, dict[str, int]]:
    """{run_id: {"objects", "bytes"}} over the versions the table holds."""
    out: dict[str, dict[str, int]] = {}
    for o in objs:
        run = run_of(o.key)
        if run is not None:
            row = out.setdefault(run, {"objects": 0, "bytes": 0})
            row["objects"] += 1
            row["bytes"] += o.size
    return out


def _objects_prefix(cos_prefix: str) -> str:
    return f"{cos_prefix}/objects/k-"


def cos_run_prefix(cos_prefix: str, run_id: str) -> str:
    """The COS prefix of every version of every key of ``run_id`` (see ``cos_object_key``)."""
    return _objects_prefix(cos_prefix) + quote(f"{run_id}/", safe="")


def _buffer_prefix(cos_prefix: str, run_id: str) -> str:
    return cos_run_prefix(cos_prefix, run_id).replace("/", "_")  # as PersistentBuffer.path_for names files


def drop_run_files(cos: Any, cos_prefix: str, buffer_dir: str, run_id: str) -> tuple[int, int]:
    """Delete the COS copies and buffer files of ``run_id``; returns (COS objects, files) deleted."""
    files = _unlink_matching(buffer_dir, lambda name: name.startswith(_buffer_prefix(cos_prefix, run_id)))
    copies = 0
    if cos is not None:
        for key in cos.list(cos_run_prefix(cos_prefix, run_id)):
            try:
                cos.delete(key)
                copies += 1
            except Exception as exc:  # noqa: BLE001 - one stuck copy must not keep the others
                log.warning("COS delete of %s (run %s ended) failed: %r", key, run_id, exc)
    return copies, files


def sweep_files(cos: Any, cos_prefix: str, buffer_dir: str, keep: Callable[[str], bool]) -> list[str]:
    """Drop the COS copies and buffer files of every run ``keep`` says no to (at start, before
    any PUT: an earlier process left them); returns those runs."""
    runs: set[str] = set()
    head = _objects_prefix(cos_prefix)
    if cos is not None:
        for key in cos.list(head):
            run = run_of(unquote(key[len(head):].partition("/")[0]))
            if run is not None:
                runs.add(run)
    buf_head = head.replace("/", "_")
    try:
        names = os.listdir(buffer_dir)
    except FileNotFoundError:
        names = []
    for name in names:
        if name.startswith(buf_head) and name.endswith(_BUF):
            quoted = name[len(buf_head):-len(_BUF)].rpartition("_")[0]  # drop the _<version>
            run = run_of(unquote(quoted))
            if run is not None:
                runs.add(run)
    dropped = sorted(r for r in runs if not keep(r))
    for run in dropped:
        copies, files = drop_run_files(cos, cos_prefix, buffer_dir, run)
        log.info("run %s: dropped %d COS copies and %d buffer files an earlier daemon left", run, copies, files)
    return dropped


def _unlink_matching(directory: str, match: Callable[[str], bool]) -> int:
    n = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(_BUF) and match(name):
            try:
                os.unlink(os.path.join(directory, name))
                n += 1
            except FileNotFoundError:
                pass
    return n
