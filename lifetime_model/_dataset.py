"""Lifetime datasets: one CSV file per application category, a row per intermediate object
of a finished run, appended as runs end. No torch, no numpy.

File ``<dir>/<category>.csv`` (format version 3, ``VERSION``); lines starting with
``#`` are comments, the first of them names the format and its version, the first
other line is the header ``run,workflow,object,F_stage,T_read,N_functions,D_stage,
M_path,W_write,W_read,input_bytes,width,size,lifetime_ms``, then one row per object:

- ``run``: the run id (``r-17``), unique per metadata server; together with the
  server's start (``session``, folded into ``run`` as ``<session>/<run>``) it
  tells runs apart across servers, so a split by run keeps each run whole;
- ``workflow``: the registered workflow's key (``app/workflow_id``), and ``object``
  its name: with the features, "the same object" across runs (``Row.key``), whose
  lifetimes give the 95% interval of the accuracy measure;
- the five features of FuncStore Alg. 1, integers, and the writer's and the last
  reader's place in their stage in waves of the run's concurrency (``W_write``,
  ``W_read``, numbers with 3 decimals; ``hdag.Features`` defines all seven);
- ``input_bytes``: the bytes of the run's inputs, which its driver passed to
  ``start_run`` (0: unknown, a driver before that hint), and ``width``: the functions of
  the run's widest stage (its fan-out, from its graph; 0: unknown); the same on every row
  of a run;
- ``size``: bytes written; ``lifetime_ms``: the measured lifetime, from the moment
  its put finished (readable) to the commit that freed it, in milliseconds.

Only objects freed by their last reader's commit are recorded (a failed run's
or a workflow output's end-of-run release is not a lifetime). A file of format
version 2 (no ``input_bytes``, ``width``) reads with both unknown (0), and
``append_rows`` upgrades it in place to version 3 before it appends (its rows keep
0). A file of format version 1 (five features, no wave features) cannot be read
(``DatasetError`` says so); ``append_rows`` moves one aside to
``<category>.csv.v1`` before it starts a new file, ``move_aside`` does it on
demand. Not covered: training (``_train``), the accuracy measure (``_measure``).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hdag._features import NAMES

from .exceptions import DatasetError

__all__ = ["FEATURES", "COLUMNS", "VERSION", "Row", "append_rows", "load_rows", "categories", "dataset_path",
           "check_category", "dataset_version", "move_aside", "upgrade", "HEADER_COMMENT", "INPUT_BYTES"]

log = logging.getLogger("funcsion.lifetime")

VERSION = 3
FEATURES: tuple[str, ...] = NAMES
#: The run's input size and width columns (``Row.input_bytes``, ``Row.width``), after the graph features.
INPUT_BYTES = "input_bytes"
RUN_COLUMNS = (INPUT_BYTES, "width")
COLUMNS = ("run", "workflow", "object", *FEATURES, *RUN_COLUMNS, "size", "lifetime_ms")
#: The header of format version 2 (no input size, no width): read with 0s, upgraded by ``append_rows``.
COLUMNS_V2 = ("run", "workflow", "object", *FEATURES, "size", "lifetime_ms")
#: The header of format version 1 (five features): refused, moved aside by ``append_rows``.
COLUMNS_V1 = ("run", "workflow", "object", *FEATURES[:5], "size", "lifetime_ms")
HEADER_COMMENT = (
    f"# funcsion lifetime dataset v{VERSION}: one row per intermediate object of a finished run\n"
    "# run: <server session>/<run id>; workflow: app/workflow_id; object: its name in the WDS\n"
    "# F_stage,T_read,N_functions,D_stage,M_path: FuncStore's lifetime features (hdag.Features)\n"
    "# W_write,W_read: the writer's and the last reader's index in their stage / the run's concurrency\n"
    "# input_bytes: the bytes of the run's inputs; width: the functions of its widest stage (0: unknown)\n"
    "# size: bytes; lifetime_ms: from its put finishing to the commit that freed it\n"
)
_NF = len(FEATURES)
_CATEGORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Row:
    run: str
    workflow: str
    object: str
    features: tuple[float, ...]
    size: int
    lifetime_ms: float
    input_bytes: int = 0            # the run's input size (0: unknown)
    width: int = 0                  # the functions of the run's widest stage (0: unknown)

    @property
    def key(self) -> tuple[str, str, tuple[float, ...]]:
        """The object's identity across runs: the same object of the same workflow in the
        same place of the graph (its features: a different fan-out is another object)."""
        return (self.workflow, self.object, self.features)


def check_category(category: str) -> str:
    """A category names a file: letters, digits, ``_.-``, at most 64 characters."""
    if not _CATEGORY.match(category or ""):
        raise DatasetError(f"category {category!r} cannot name a dataset or model file: use 1 to 64 letters, "
                           "digits, '_', '.' or '-', starting with a letter or digit (the WDS \"category\")")
    return category


def dataset_path(directory: str | Path, category: str) -> Path:
    return Path(directory) / f"{check_category(category)}.csv"


def dataset_version(path: str | Path) -> int | None:
    """The format version of a dataset file from its header (1, 2 or ``VERSION``; 0: not a
    dataset header), None when there is no file or no header yet."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip() or line.startswith("#"):
                    continue
                cells = tuple(next(csv.reader([line])))
                return VERSION if cells == COLUMNS else 2 if cells == COLUMNS_V2 else 1 if cells == COLUMNS_V1 else 0
    except FileNotFoundError:
        return None
    return None


def move_aside(directory: str | Path, category: str) -> Path | None:
    """Rename the category's dataset when this format version cannot continue it (to
    ``<category>.csv.v<N>``, numbered on when taken) so a new one can start; returns where
    it went, or None when there was nothing to move (no file, this version, or version 2,
    which ``upgrade`` continues)."""
    path = dataset_path(directory, category)
    v = dataset_version(path)
    if v is None or v in (VERSION, 2):
        return None
    n, dest = 0, path.with_name(f"{path.name}.v{v}")
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.v{v}.{n}")
    os.replace(path, dest)
    log.warning("lifetime dataset %s is of format version %d (this funcsion writes %d, with the wave features): "
                "moved aside to %s; a new one starts (re-collect with `funcsion collect`)", path, v, VERSION, dest)
    return dest


def upgrade(directory: str | Path, category: str) -> bool:
    """Rewrite the category's dataset of format version 2 as version 3 (its rows' input size
    and width 0: unknown), atomically; True when it did."""
    path = dataset_path(directory, category)
    if dataset_version(path) != 2:
        return False
    rows = load_rows(directory, category)
    tmp = path.with_name(f".{path.name}.upgrade")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (HEADER_COMMENT + ",".join(COLUMNS) + "\n" + _lines(rows)).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    log.info("lifetime dataset %s upgraded to format version %d (input_bytes, width 0 on its %d rows: unknown)",
             path, VERSION, len(rows))
    return True


def _lines(rows: Iterable[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        if len(r.features) != _NF:
            raise DatasetError(f"a row of {r.object!r} has {len(r.features)} features, the dataset {_NF} "
                               f"({','.join(FEATURES)})")
        w.writerow([r.run, r.workflow, r.object, *map(_cell, r.features), int(r.input_bytes), int(r.width),
                    r.size, f"{r.lifetime_ms:.3f}"])
    return buf.getvalue()


def _cell(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}".rstrip("0")


def append_rows(directory: str | Path, category: str, rows: Iterable[Row]) -> int:
    """Append ``rows`` to the category's file (created private, 0600 in a 0700 directory,
    with its header; a file of version 2 is upgraded first, ``upgrade``, one of another format
    version moved aside, ``move_aside``); one write, so concurrent writers' runs do not
    interleave. Returns how many rows were written."""
    rows = list(rows)
    if not rows:
        return 0
    path = dataset_path(directory, category)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    move_aside(directory, category)
    upgrade(directory, category)
    text = _lines(rows)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size == 0:
            os.write(fd, (HEADER_COMMENT + ",".join(COLUMNS) + "\n").encode())
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return len(rows)


def load_rows(directory: str | Path, category: str) -> list[Row]:
    """Every row of the category's file; ``DatasetError`` naming the line that is wrong."""
    path = dataset_path(directory, category)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"no dataset for category {category!r}: {path} does not exist; record runs with "
                           "`funcsion collect` (or any `funcsion run`) first") from None
    out: list[Row] = []
    header_seen = False
    columns = COLUMNS
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = next(csv.reader([line]))
        if not header_seen:
            if tuple(cells) == COLUMNS_V1:
                raise DatasetError(f"{path} is a lifetime dataset of format version 1 (five features); this "
                                   f"funcsion reads version {VERSION}, with the wave features W_write and W_read, "
                                   "which version 1 cannot give. Re-collect: `funcsion collect` (or any run) moves "
                                   f"it aside to {path.name}.v1 and starts a new one")
            if tuple(cells) not in (COLUMNS, COLUMNS_V2):
                raise DatasetError(f"{path}:{lineno}: the header must be {','.join(COLUMNS)}, got {line!r}")
            columns = tuple(cells)
            header_seen = True
            continue
        if len(cells) != len(columns):
            raise DatasetError(f"{path}:{lineno}: {len(cells)} cells, a row has {len(columns)} ({','.join(columns)})")
        extra = len(columns) - len(COLUMNS_V2)          # the run cells of version 3 (RUN_COLUMNS)
        try:
            feats = tuple(float(c) for c in cells[3:3 + _NF])
            given, width = (int(cells[3 + _NF]), int(cells[4 + _NF])) if extra else (0, 0)
            size, life = int(cells[3 + _NF + extra]), float(cells[4 + _NF + extra])
        except ValueError:
            raise DatasetError(f"{path}:{lineno}: features and lifetime_ms must be numbers, input_bytes, width and "
                               f"size integers, got {line!r}") from None
        if life < 0 or size < 0 or given < 0 or width < 0 or not all(math.isfinite(f) for f in feats):
            raise DatasetError(f"{path}:{lineno}: input_bytes, width, size and lifetime_ms must be >= 0 and "
                               f"features finite, got {line!r}")
        out.append(Row(cells[0], cells[1], cells[2], feats, size, life, given, width))
    return out


def categories(directory: str | Path) -> list[str]:
    """The categories that have a dataset in ``directory``."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.csv") if _CATEGORY.match(p.stem))
