"""``funcsion inspect`` and ``funcsion bench hdag`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["wordcount", "gg_compile", "video"])
def test_inspect_every_example(name: str, example_paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(example_paths[name])]) == 0
    out = capsys.readouterr().out
    for heading in ("Stages", "Functions", "Objects", "M_path"):
        assert heading in out


def test_inspect_json_document(fig9_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(fig9_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a = doc["objects"]["a"]
    assert a["producer"] == "F1" and a["readers"] == ["F3", "F6"] and a["read_count"] == 2
    assert a["features"] == {"F_stage": 3, "T_read": 2, "N_functions": 4, "D_stage": 2, "M_path": 4, "W_write": 0, "W_read": 0}
    assert doc["functions"]["F2"]["last_output"] == "b2"
    assert doc["workflow"]["app"] == "fig9"


def test_inspect_params_png_and_dot(example_paths: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png, dot = tmp_path / "wc.png", tmp_path / "wc.dot"
    assert main(["inspect", str(example_paths["wordcount"]), "--param", "mappers=16",  # type: ignore[index]
                 "--png", str(png), "--dot", str(dot), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len([f for f in doc["functions"] if f.startswith("mapper_")]) == 16
    assert png.read_bytes()[:4] == b"\x89PNG" and dot.read_text().startswith("digraph")


def test_invalid_wds_exits_2_with_every_error_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"app": "x", "workflow_id": 1, "category": "c", "spec": {
        "s": {"stage_id": 1, "functions": [
            {"start": False, "name": "a", "input": ["ghost"], "output": ["o"], "next": ["zzz"]}]}}}))
    proc = run_cli("inspect", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "no function has \"start\": true" in proc.stderr
    assert "next names unknown function 'zzz'" in proc.stderr
    assert str(bad) in proc.stderr and "$.spec.s.functions[0]" in proc.stderr


def test_malformed_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"app": "x",\n "spec": [}')
    proc = run_cli("inspect", str(bad))
    assert proc.returncode == 2 and f"{bad}:2:" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("inspect", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "cannot read the file" in proc.stderr


def test_bad_param_syntax_is_a_usage_error(example_paths: dict[str, Path]) -> None:
    proc = run_cli("inspect", str(example_paths["wordcount"]), "--param", "mappers")
    assert proc.returncode == 2 and "NAME=N" in proc.stderr and "Traceback" not in proc.stderr


def test_bench_hdag_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "hdag", "--functions", "300", "--repeat", "1", "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["functions"] == 300 and result["features_ms"] >= 0
