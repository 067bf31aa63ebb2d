"""Saved run reports on disk (``<state_dir>/runs/<run_id>.json``) and the COS locations a report
prints: a local output's location is the file that holds it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sdk._cos_io import cos_location, output_key
from sdk.local._report_store import (
    ReportNotFound,
    list_reports,
    load_report,
    save_report,
)
from storage_functions.cos import LocalCOS


def test_saved_reports_are_listed_and_loaded(tmp_path: Path) -> None:
    a = save_report(tmp_path, {"run_id": "r-1", "started": 100.0, "status": "failed"})
    save_report(tmp_path, {"run_id": "r-2", "started": 200.0, "status": "succeeded"})
    assert a == (tmp_path / "runs" / "r-1.json").resolve()
    assert stat.S_IMODE(a.stat().st_mode) == 0o600 and stat.S_IMODE(a.parent.stat().st_mode) == 0o700
    assert [r["run_id"] for r in list_reports(tmp_path)] == ["r-1", "r-2"]
    assert load_report(tmp_path, "r-1")["status"] == "failed"
    assert load_report(tmp_path, "last")["run_id"] == "r-2"
    assert load_report(tmp_path, str(a))["run_id"] == "r-1"  # a report file's path works too
    assert not list((tmp_path / "runs").glob(".*.tmp"))


def test_a_run_id_used_again_keeps_the_older_report(tmp_path: Path) -> None:
    """Run ids restart when the metadata journal is deleted; the older report stays."""
    save_report(tmp_path, {"run_id": "r-1", "started": 100.0, "status": "failed"})
    save_report(tmp_path, {"run_id": "r-1", "started": 100.0, "status": "failed", "again": True})  # same run
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r-1.json"]
    save_report(tmp_path, {"run_id": "r-1", "started": 300.0, "status": "succeeded"})  # another run
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r-1.100.json", "r-1.json"]
    assert load_report(tmp_path, "r-1")["status"] == "succeeded"


def test_unknown_runs_and_bad_files_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFound, match="no saved run reports in .*; run a workflow first"):
        load_report(tmp_path, "last")
    save_report(tmp_path, {"run_id": "r-1", "started": 1.0})
    with pytest.raises(ReportNotFound, match=r"no saved report for run 'r-9' in .* \(saved runs: r-1\); "
                                             r"`funcsion runs` lists them"):
        load_report(tmp_path, "r-9")
    with pytest.raises(ReportNotFound, match="no saved report for run '../etc'"):
        load_report(tmp_path, "../etc")
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(ReportNotFound, match="is not JSON"):
        load_report(tmp_path, str(bad))
    (tmp_path / "runs" / "junk.json").write_text("[1]")
    assert [r["run_id"] for r in list_reports(tmp_path)] == ["r-1"]  # unreadable files are skipped


@pytest.mark.parametrize("name", ["word_counts", "a b%c", "ünïcode.txt", "x.y-z_1"])
def test_a_local_outputs_location_is_the_file_that_holds_it(tmp_path: Path, name: str) -> None:
    cos = LocalCOS(tmp_path / "cos")
    key = output_key("r-1", name)
    cos.put(key, b'{"the": 3}')
    where = cos_location(cos.url, key)
    assert Path(where).read_bytes() == b'{"the": 3}'  # it exists and holds the payload as written


def test_an_s3_outputs_location_is_its_uri() -> None:
    assert cos_location("s3://bucket/pre/fix?endpoint_url=http://x", "outputs/r-1/o") == \
        "s3://bucket/pre/fix/outputs/r-1/o"
    assert cos_location("s3://bucket", "outputs/r-1/o") == "s3://bucket/outputs/r-1/o"
