"""``funcsion offload plan`` as a user runs it: the table, the ``--json`` document, pictures,
and bad definitions (exit 2, one line with the JSON path and the fix, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "offload"


def test_table_lists_every_task_state_with_its_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offload", "plan", str(EXAMPLES / "parallel_fanout.asl.json")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["state", "reads", "readers", "kept", "until", "end", "why"]
    produce = next(line for line in lines if line.startswith("Produce "))
    assert produce.split()[:5] == ["Produce", "3", "Checksum,", "Compress,", "Index"]
    assert " no " in produce
    merge = next(line for line in lines if line.startswith("Merge "))
    assert merge.split()[:4] == ["Merge", "0", "-", "yes"]


def test_json_document_has_exactly_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    for path in sorted(EXAMPLES.glob("*.asl.json")):
        assert main(["offload", "plan", str(path), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert list(doc) == ["states"]
        tasks = [n for n, s in json.loads(path.read_text())["States"].items() if s["Type"] == "Task"]
        assert set(tasks) <= set(doc["states"])
        for entry in doc["states"].values():
            assert set(entry) == {"read_count", "readers", "kept_until_end", "why"}
            assert entry["read_count"] is None or isinstance(entry["read_count"], int)
            assert isinstance(entry["readers"], list) and all(isinstance(r, str) for r in entry["readers"])
            assert isinstance(entry["kept_until_end"], bool) and entry["why"]


def test_json_null_where_the_flow_is_not_static(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asl = tmp_path / "dist.json"
    asl.write_text(json.dumps({"StartAt": "A", "States": {
        "A": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:a", "ResultPath": "$.a", "Next": "M"},
        "M": {"Type": "Map", "ItemReader": {"Resource": "arn:aws:states:::s3:getObject"}, "End": True,
              "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"}, "StartAt": "I", "States": {
                  "I": {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:1:function:i", "End": True}}}}}}))
    assert main(["offload", "plan", str(asl), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["states"]["A"]["read_count"] is None and doc["states"]["A"]["kept_until_end"] is True
    assert "Distributed Map 'M'" in doc["states"]["A"]["why"]


def test_pictures_png_svg_and_dot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asl = str(EXAMPLES / "catch_path.asl.json")
    png, svg, dot = tmp_path / "p.png", tmp_path / "p.svg", tmp_path / "p.dot"
    for pic in (png, svg, dot):
        assert main(["offload", "plan", asl, "--picture", str(pic)]) == 0
        assert f"picture written to {pic}" in capsys.readouterr().out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert b"<svg" in svg.read_bytes()[:500]
    text = dot.read_text()
    assert text.startswith("digraph") and '"Fetch" -> "Transform"' in text and '"Fetch" -> "Recover"' in text


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "line 1 column 2: not JSON"),
    ('{"States": {"A": {"Type": "Succeed"}}}', '$.StartAt: missing; add "StartAt"'),
    ('{"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}}',
     "$.States.A.Next: 'B' names no state in this state machine (its states: 'A'); name one of them or add a state 'B'"),
    ('{"StartAt": "A", "States": {"A": {"End": true}}}', '$.States.A.Type: missing; add "Type": one of Task'),
    ('{"StartAt": "A", "States": {"A": {"Type": "Succeed"}, "B": {"Type": "Succeed"}}}',
     "$.States.B: unreachable"),
    ('{"StartAt": "A", "States": {"A": {"Type": "Succeed"}, "A": {"Type": "Fail"}}}',
     "$.States.A: the key 'A' is written twice"),
])
def test_bad_definitions_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                              message: str) -> None:
    asl = tmp_path / "bad.json"
    asl.write_text(text)
    assert main(["offload", "plan", str(asl)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith(f"funcsion offload: {message}") and "\n" not in err


def test_missing_file_and_bad_picture_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offload", "plan", str(tmp_path / "nope.json")]) == 2
    assert "cannot read the file" in capsys.readouterr().err
    assert main(["offload", "plan", str(EXAMPLES / "large_result.asl.json"), "--picture", str(tmp_path / "p.gif")]) == 2
    assert "name the picture with one of .png, .svg, .dot" in capsys.readouterr().err


def test_as_a_process_no_traceback(tmp_path: Path) -> None:
    asl = tmp_path / "bad.json"
    asl.write_text('{"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "x"}}}')
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "offload", "plan", str(asl)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ('funcsion offload: $.States.A: has neither "Next" nor "End": true; '
                                   'add "Next": "<state>" or "End": true')
