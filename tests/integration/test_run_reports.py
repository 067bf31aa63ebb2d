"""Run reports you can look at (issue 16 item 3), on the word-count run: the report is saved
under ``<state_dir>/runs``, ``funcsion runs`` lists it, ``funcsion report`` prints it and draws
memory over time and the task timeline (``--png``), ``funcsion get`` decodes an output, and the
location the report prints is a file holding the value as the handler wrote it."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from sdk.cli import main
from sdk.local._executor import ExecutorOptions
from sdk.local._run import RunReport, run_workflow
from sdk.local._stack import Stack

WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


@pytest.fixture(scope="module")
def wordcount(stack: Stack) -> RunReport:
    return run_workflow(WC, config=stack.config, stack=stack, options=ExecutorOptions(progress=False))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_report_is_saved_with_memory_over_time(stack: Stack, wordcount: RunReport) -> None:
    assert wordcount.status == "succeeded"
    path = Path(stack.config.state_dir).resolve() / "runs" / f"{wordcount.run_id}.json"
    assert wordcount.saved_to == str(path)
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(wordcount.to_dict()))
    series = saved["memory"]["series"]
    assert series[0][0] >= 0 and series[-1][0] <= saved["wall_s"] + 0.5
    assert [p[0] for p in series] == sorted(p[0] for p in series)
    assert 0 < max(p[1] for p in series) <= saved["memory"]["peak_bytes"]  # allocated, sampled
    assert 0 < max(p[2] for p in series) <= saved["memory"]["peak_live_bytes"]  # live
    assert series[-1][1:] == [0, 0]  # the run ended: nothing held
    assert saved["memory"]["series_source"].startswith("storage functions")  # the daemon's ledger: physical
    assert {t["stage_name"] for t in saved["tasks"].values()} == {"split_stage", "map_stage", "reduce_stage",
                                                                  "merge_stage"}
    assert all(t["tries"] and t["tries"][0]["request_id"] for t in saved["tasks"].values())


def test_runs_lists_it(stack: Stack, wordcount: RunReport, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "runs", "--state-dir", stack.config.state_dir)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["run", "started", "workflow", "status"]
    [row] = [r for r in rows if r.split()[0] == wordcount.run_id]
    assert "word-count/1" in row and "succeeded" in row
    code, out, _ = cli(capsys, "runs", "--state-dir", stack.config.state_dir, "--json")
    assert any(r["run_id"] == wordcount.run_id and r["report"] == wordcount.saved_to for r in json.loads(out))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_prints_the_summary_and_draws_a_png(stack: Stack, wordcount: RunReport, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "run.png"
    code, out, err = cli(capsys, "report", wordcount.run_id, "--png", str(png), "--state-dir", stack.config.state_dir)
    assert code == 0, err
    assert out.startswith(f"run {wordcount.run_id} of word-count/1: succeeded in ")
    assert f"  output word_counts: {wordcount.outputs['word_counts']}" in out
    stages = [ln.split()[0] for ln in out.splitlines() if ln.strip().split(" ")[0].endswith("_stage")]
    assert stages == ["split_stage", "map_stage", "reduce_stage", "merge_stage"]
    width, height = png_size(png)
    assert width >= 1000 and height >= 500
    assert png.stat().st_size > 30_000  # two panels with content, not a blank canvas
    code, out, _ = cli(capsys, "report", "last", "--json", "--state-dir", stack.config.state_dir)
    assert json.loads(out)["run_id"] == wordcount.run_id


def test_get_decodes_an_output_and_the_printed_location_holds_it(
        stack: Stack, wordcount: RunReport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = Path(wordcount.outputs["word_counts"])
    assert where.is_file()  # once it printed file://.../word_counts while the file was word_counts%obj
    counts = json.loads(where.read_bytes())  # the merger wrote it with the default codec, json
    assert wordcount.to_dict()["output_codecs"] == {"word_counts": "json"}
    assert counts["the"] > 100 and list(counts.values()) == sorted(counts.values(), reverse=True)
    out_file = tmp_path / "counts.json"
    code, _, err = cli(capsys, "get", wordcount.run_id, "word_counts", "-o", str(out_file),
                       "--state-dir", stack.config.state_dir)
    assert code == 0 and f"to {out_file}" in err
    assert json.loads(out_file.read_text()) == counts
    code, out, _ = cli(capsys, "get", wordcount.run_id, "word_counts", "--state-dir", stack.config.state_dir)
    assert json.loads(out) == counts
    code, _, err = cli(capsys, "get", wordcount.run_id, "chunk_00", "--state-dir", stack.config.state_dir)
    assert code == 2 and err.strip() == (f"funcsion get: run {wordcount.run_id} kept no output 'chunk_00'; "
                                         "it kept: word_counts")


def test_report_png_without_matplotlib_names_the_extra(stack: Stack, wordcount: RunReport, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    code, out, err = cli(capsys, "report", wordcount.run_id, "--png", str(tmp_path / "x.png"),
                         "--state-dir", stack.config.state_dir)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "install it with: pip install 'funcsion[plot]'" in err and "matplotlib" in err
    assert not (tmp_path / "x.png").exists()


def test_the_report_has_the_measured_cost_account(stack: Stack, wordcount: RunReport,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cost = wordcount.to_dict()["cost"]
    ln = cost["lines"]
    assert ln["tasks"]["invocations"] == wordcount.billing["invocations"] == 8
    assert ln["tasks"]["gb_s"] == pytest.approx(wordcount.billing["gb_seconds"], abs=1e-6)
    # the put path invoked storage functions and the buffer uploaded the objects to COS
    assert ln["storage_io"]["invocations"] >= 1 and ln["storage_io"]["gb_s"] > 0
    assert ln["cos_requests"]["puts"] >= 1 and ln["cos_storage"]["gb_months"] > 0
    assert cost["total_usd"] == pytest.approx(sum(v["usd"] for v in ln.values()))
    assert "platform" in cost["sources"]["storage_functions"] and "adapter" in cost["sources"]["cos"]
    assert cost["static_pool"]["functions"] >= 1 and cost["always_on"]["usd_per_hour"] > 0
    code, out, _ = cli(capsys, "report", wordcount.run_id, "--state-dir", stack.config.state_dir)
    assert code == 0 and "cost at AWS prices" in out and "static pool of" in out
