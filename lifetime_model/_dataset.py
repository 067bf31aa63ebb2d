"""Lifetime datasets: one CSV file per application category, a row per intermediate object
of a finished run, appended as runs end. No torch, no numpy.

File ``<dir>/<category>.csv``; lines starting with ``#`` are comments, the first
other line is the header ``run,workflow,object,F_stage,T_read,N_functions,D_stage,
M_path,size,lifetime_ms``, then one row per object:

- ``run``: the run id (``r-17``), unique per metadata server; together with the
  server's start (``session``, folded into ``run`` as ``<session>/<run>``) it
  tells runs apart across servers, so a split by run keeps each run whole;
- ``workflow``: the registered workflow's key (``app/workflow_id``), and ``object``
  its name: with the features, "the same object" across runs (``Row.key``), whose
  lifetimes give the 95% interval of the accuracy measure;
- the five features of FuncStore Alg. 1 (``hdag.Features``), integers;
- ``size``: bytes written; ``lifetime_ms``: the measured lifetime, from the moment
  its put finished (readable) to the commit that freed it, in milliseconds.

Only objects freed by their last reader's commit are recorded (a failed run's
or a workflow output's end-of-run release is not a lifetime). Not covered:
training (``_train``), the accuracy measure (``_measure``).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .exceptions import DatasetError

__all__ = ["FEATURES", "COLUMNS", "Row", "append_rows", "load_rows", "categories", "dataset_path",
           "check_category", "HEADER_COMMENT"]

FEATURES = ("F_stage", "T_read", "N_functions", "D_stage", "M_path")
COLUMNS = ("run", "workflow", "object", *FEATURES, "size", "lifetime_ms")
HEADER_COMMENT = (
    "# funcsion lifetime dataset v1: one row per intermediate object of a finished run\n"
    "# run: <server session>/<run id>; workflow: app/workflow_id; object: its name in the WDS\n"
    "# F_stage,T_read,N_functions,D_stage,M_path: FuncStore's lifetime features (hdag.Features)\n"
    "# size: bytes; lifetime_ms: from its put finishing to the commit that freed it\n"
)
_CATEGORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Row:
    run: str
    workflow: str
    object: str
    features: tuple[int, int, int, int, int]
    size: int
    lifetime_ms: float

    @property
    def key(self) -> tuple[str, str, tuple[int, ...]]:
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


def append_rows(directory: str | Path, category: str, rows: Iterable[Row]) -> int:
    """Append ``rows`` to the category's file (created private, 0600 in a 0700 directory,
    with its header); one write, so concurrent writers' runs do not interleave. Returns
    how many rows were written."""
    rows = list(rows)
    if not rows:
        return 0
    path = dataset_path(directory, category)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow([r.run, r.workflow, r.object, *r.features, r.size, f"{r.lifetime_ms:.3f}"])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size == 0:
            os.write(fd, (HEADER_COMMENT + ",".join(COLUMNS) + "\n").encode())
        os.write(fd, buf.getvalue().encode())
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
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = next(csv.reader([line]))
        if not header_seen:
            if tuple(cells) != COLUMNS:
                raise DatasetError(f"{path}:{lineno}: the header must be {','.join(COLUMNS)}, got {line!r}")
            header_seen = True
            continue
        if len(cells) != len(COLUMNS):
            raise DatasetError(f"{path}:{lineno}: {len(cells)} cells, a row has {len(COLUMNS)} ({','.join(COLUMNS)})")
        try:
            feats = tuple(int(c) for c in cells[3:8])
            size, life = int(cells[8]), float(cells[9])
        except ValueError:
            raise DatasetError(f"{path}:{lineno}: features and size must be integers and lifetime_ms a number, "
                               f"got {line!r}") from None
        if life < 0 or size < 0:
            raise DatasetError(f"{path}:{lineno}: size and lifetime_ms must be >= 0, got {line!r}")
        out.append(Row(cells[0], cells[1], cells[2], feats, size, life))  # type: ignore[arg-type]
    return out


def categories(directory: str | Path) -> list[str]:
    """The categories that have a dataset in ``directory``."""
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.csv") if _CATEGORY.match(p.stem))
