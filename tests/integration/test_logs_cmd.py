"""``funcsion logs RUN [TASK] [--attempt N]`` (issue 30, 4): each attempt's lines between its
START and REPORT, from the log file its entry's workers share, under a header; the selection
itself, on a file where concurrent invocations' lines interleave."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import sdk
from sdk.cli import main
from sdk.cli.logs_cmd import attempt_lines

WF = Path(__file__).resolve().parent / "logwf"


def test_attempt_lines_keeps_one_invocations_lines_only() -> None:
    log = ["t1\tSTART RequestId: aaa Version: $LATEST\n", "t1\tINIT\timporting\n",
           "t2\tSTART RequestId: bbb Version: $LATEST\n", "t3\taaa\tone\n", "t3\tbbb\tother\n",
           "t4\taaa\t[ERROR] RuntimeError: boom\n", "t4\taaa\tTraceback (most recent call last):\n",
           "t5\tEND RequestId: aaa\n", "t5\tREPORT RequestId: aaa\tDuration: 1.00 ms\n", "t6\tEND RequestId: bbb\n"]
    got = attempt_lines(log, ["aaa"])
    assert got == {"aaa": ["t1\tSTART RequestId: aaa Version: $LATEST", "t3\tone", "t4\t[ERROR] RuntimeError: boom",
                           "t4\tTraceback (most recent call last):", "t5\tEND RequestId: aaa",
                           "t5\tREPORT RequestId: aaa\tDuration: 1.00 ms"]}


def test_logs_of_a_run_attempt_by_attempt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wf = tmp_path / "wf"
    shutil.copytree(WF, wf)
    (wf / "src.txt").write_text("payload")
    state = str(tmp_path / "state")
    report = sdk.run(wf / "logs.wds.json", inputs={"src": wf / "src.txt"}, state_dir=state)
    assert report.succeeded, report.error
    tries = report.raw["tasks"]["flaky"]["tries"]
    assert [t["outcome"] for t in tries] == ["error", "ok"]
    capsys.readouterr()

    assert main(["logs", report.run_id, "flaky", "--state-dir", state]) == 0
    out = capsys.readouterr().out.splitlines()
    heads = [ln for ln in out if ln.startswith("== ")]
    assert heads == [f"== task flaky, attempt 1 of 2: error ({tries[0]['started_at']} s to {tries[0]['finished_at']} s "
                     f"into run {report.run_id}), request id {tries[0]['request_id']}, "
                     f"{report.raw['tasks']['flaky']['log']}",
                     f"== task flaky, attempt 2 of 2: ok ({tries[1]['started_at']} s to {tries[1]['finished_at']} s "
                     f"into run {report.run_id}), request id {tries[1]['request_id']}, "
                     f"{report.raw['tasks']['flaky']['log']}"]
    first = out[out.index(heads[0]) + 1:out.index(heads[1])]
    assert f"START RequestId: {tries[0]['request_id']}" in first[0]
    assert any(ln.endswith("\tflaky says hello from attempt 1") for ln in first)
    assert any("[ERROR] RuntimeError: the first attempt fails on purpose" in ln for ln in first)
    assert not any("attempt 2" in ln for ln in first)  # the other attempt's lines stay under its own header
    assert any(f"REPORT RequestId: {tries[0]['request_id']}" in ln for ln in first)

    assert main(["logs", "last", "flaky", "--attempt", "2", "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "flaky says hello from attempt 2" in out and "attempt 1" not in out.replace("attempt 1 of", "")

    assert main(["logs", report.run_id, "--state-dir", state]) == 0  # every task, in the order they started
    heads = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("== ")]
    assert [h.split(" (")[0] for h in heads] == ["== task flaky, attempt 1 of 2: error",
                                                "== task flaky, attempt 2 of 2: ok",
                                                "== task quiet, attempt 1 of 1: ok"]

    assert main(["logs", report.run_id, "quite", "--state-dir", state]) == 2
    assert "has no task 'quite'; did you mean 'quiet'?" in capsys.readouterr().err
    assert main(["logs", report.run_id, "quiet", "--attempt", "3", "--state-dir", state]) == 2
    assert "task quiet of run" in capsys.readouterr().err
