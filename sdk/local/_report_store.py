"""Saved run reports: every run's report as ``<state_dir>/runs/<run_id>.json``
(private to its owner, like the rest of the state directory), listed by
``funcsion runs`` and read back by ``funcsion report`` and ``funcsion get``.

A run id comes from the metadata server's journal; should it start over
(the journal was deleted), the older report with the same id is kept as
``<run_id>.<its start time>.json`` rather than overwritten. ``last`` names the
most recently started run. Covers files only; not what a report holds
(``_report``) or how it is shown (``sdk.cli.report_cmd``).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from storage_functions.private_files import open_private, private_dir

from ..exceptions import FuncsionError

__all__ = ["RUNS_DIR", "ReportNotFound", "runs_dir", "save_report", "load_report", "list_reports", "LAST"]

RUNS_DIR = "runs"
LAST = "last"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ReportNotFound(FuncsionError):
    """No saved report for the run asked for (or it cannot be read)."""

    retryable = False


def runs_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / RUNS_DIR


def save_report(state_dir: str | os.PathLike[str], doc: dict[str, Any]) -> Path:
    """Write ``doc`` (a ``RunReport.to_dict()``) to ``runs/<run_id>.json`` whole (a reader sees
    the old file or the new one); returns its path."""
    run_id = str(doc["run_id"])
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} cannot name a file")
    d = private_dir(runs_dir(state_dir))
    target = d / f"{run_id}.json"
    if target.exists():
        try:
            old = json.loads(target.read_text())
        except (OSError, ValueError):
            old = {}
        if old.get("started") != doc.get("started"):  # another run of the same id: keep it aside
            os.replace(target, d / f"{run_id}.{int(old.get('started') or target.stat().st_mtime)}.json")
    tmp = d / f".{run_id}.{uuid.uuid4().hex}.tmp"
    try:
        with open_private(tmp, "xb") as fh:
            fh.write(json.dumps(doc, indent=1).encode())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target.resolve()


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ReportNotFound(f"cannot read the report {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReportNotFound(f"the report {path} is not JSON ({exc}); was it written by funcsion run?") from None
    if not isinstance(doc, dict) or "run_id" not in doc:
        raise ReportNotFound(f"{path} is not a funcsion run report (no run_id)")
    return doc


def list_reports(state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every readable saved report, oldest run first (each with ``_path``: its file)."""
    d = runs_dir(state_dir)
    out = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = _read(path)
        except ReportNotFound:
            continue
        doc["_path"] = str(path)
        out.append(doc)
    return sorted(out, key=lambda r: (float(r.get("started") or 0), r["_path"]))


def load_report(state_dir: str | os.PathLike[str], run: str) -> dict[str, Any]:
    """The report of ``run``: a run id, ``last``, or the path of a report file."""
    path = Path(run)
    if run.endswith(".json") and path.is_file():
        return _read(path)
    if run == LAST:
        reports = list_reports(state_dir)
        if not reports:
            raise ReportNotFound(f"no saved run reports in {runs_dir(state_dir)}; run a workflow first "
                                 "(funcsion run WDS)")
        return reports[-1]
    target = runs_dir(state_dir) / f"{run}.json"
    if not _RUN_ID.match(run) or not target.is_file():
        known = [r["run_id"] for r in list_reports(state_dir)]
        hint = (f"saved runs: {', '.join(known[-8:])}{' ...' if len(known) > 8 else ''}" if known
                else "none saved yet")
        raise ReportNotFound(f"no saved report for run {run!r} in {runs_dir(state_dir)} ({hint}); "
                             "`funcsion runs` lists them (give --state-dir if the run used another)")
    return _read(target)
