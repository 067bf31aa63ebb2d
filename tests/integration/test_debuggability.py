"""Finding out why a task failed (issue 16 item 2): the report carries each failed attempt's
traceback (the handler's frames) and request id, the task's log file has that request id on
its START/END/REPORT lines and its output, the CLI prints the traceback and the log path, and
a handler that cannot be imported is refused before the run starts, naming its entry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions, HandlerImportError
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

BAD = Path(__file__).resolve().parent / "badwf"
RETRIES = ExecutorOptions(max_attempts=2, retry_interval_s=0.05, progress=False)

SQUARES = {"app": "squares", "workflow_id": 1, "category": "test", "params": {"n": 3}, "spec": {
    "sq": {"stage_id": 0, "functions": [{"start": True, "replicas": "n", "name": "square_{i}", "input": ["x_{i}"],
                                         "output": ["y_{i}"], "next": []}]}}}


@pytest.fixture
def badwf(tmp_path: Path) -> Path:
    d = tmp_path / "wf"
    shutil.copytree(BAD, d)
    (d / "src.txt").write_text("payload")
    (d / "BAD_MODE").write_text("raises")
    return d


def test_a_failing_handlers_report_carries_its_traceback(stack: Stack, badwf: Path) -> None:
    r = run_workflow(badwf / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(badwf / "src.txt")}, options=RETRIES)
    assert r.status == "failed" and r.failed_task == "producer"
    task = r.tasks["producer"]
    assert [e["attempt"] for e in task["errors"]] == [1, 2]
    for err in task["errors"]:
        assert err["error"] == "ZeroDivisionError: division by zero"
        tb = err["traceback"]
        assert tb.startswith("Traceback (most recent call last):")
        assert f'File "{badwf / "handlers.py"}", line 21, in producer' in tb
        assert f'File "{badwf / "handlers.py"}", line 13, in _divide' in tb
        assert tb.rstrip().endswith("ZeroDivisionError: division by zero")
        assert "_worker.py" not in tb and "middleware_factory" not in tb  # the handler's frames only
    tries = task["tries"]
    assert [(t["attempt"], t["outcome"]) for t in tries] == [(1, "error"), (2, "error")]
    assert [t["request_id"] for t in tries] == [e["request_id"] for e in task["errors"]]
    assert all(t["billed_ms"] >= 1 and t["max_memory_mb"] > 0 for t in tries)
    log = Path(task["log"])
    assert log.name == "bad-producer.log" and log.parent == Path(stack.config.state_dir).resolve() / "logs"
    text = log.read_text()
    for err in task["errors"]:
        rid = err["request_id"]
        assert f"START RequestId: {rid} Version: $LATEST" in text and f"END RequestId: {rid}" in text
        assert re.search(rf"REPORT RequestId: {rid}\tDuration: [\d.]+ ms\tBilled Duration: \d+ ms", text)
        assert f"{rid}\tabout to divide" in text
        assert f"{rid}\t[ERROR] ZeroDivisionError: division by zero" in text
    assert "[funcsion] task producer of run" in text  # the decorator says which task and run it is
    saved = json.loads(Path(r.saved_to or "").read_text())
    assert saved["tasks"]["producer"]["errors"][0]["traceback"] == task["errors"][0]["traceback"]


def test_cli_prints_the_traceback_and_the_log_path(badwf: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(badwf / "bad.wds.json"), "--input",
                           f"src={badwf / 'src.txt'}", "--state-dir", str(tmp_path / "state"), "--no-progress"],
                          capture_output=True, text=True, timeout=180, cwd=badwf)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.splitlines()
    assert err[0] == "funcsion run: task producer of run r-1 failed: ZeroDivisionError: division by zero"
    assert "  Traceback (most recent call last):" in err and "  ZeroDivisionError: division by zero" in err
    log = tmp_path / "state" / "logs" / "bad-producer.log"
    assert re.fullmatch(rf"  log of producer: {re.escape(str(log))} \(request id \S+, attempt 3\)", err[-1])
    rid = re.search(r"request id (\S+),", err[-1]).group(1)  # type: ignore[union-attr]
    assert f"{rid}\t[ERROR] ZeroDivisionError" in log.read_text()
    assert f"report saved: {tmp_path / 'state' / 'runs' / 'r-1.json'}" in proc.stdout


def write_squares(d: Path, handlers: str) -> Path:
    d.mkdir(exist_ok=True)
    (d / "squares.wds.json").write_text(json.dumps(SQUARES))
    (d / "handlers.py").write_text(handlers)
    return d / "squares.wds.json"


def test_a_handler_that_cannot_be_imported_is_refused_before_the_run_starts(stack: Stack, tmp_path: Path) -> None:
    wds = write_squares(tmp_path / "sq", "import sdk\n\nimport no_such_module_anywhere\n")
    with stack.client() as c:
        runs_before = len(c.metadata.stats()["runs"])
    with pytest.raises(HandlerImportError) as info:
        run_workflow(wds, config=stack.config, stack=stack, options=RETRIES,
                     inputs={f"x_{i}": str(wds) for i in range(3)})
    assert str(info.value) == (
        f"handler 'handlers:square' of square_{{i}} (tasks square_0, square_1, square_2) cannot be loaded from "
        f"{tmp_path / 'sq'}: ModuleNotFoundError: No module named 'no_such_module_anywhere' (handlers.py, line 3)")
    with stack.client() as c:
        assert len(c.metadata.stats()["runs"]) == runs_before  # no run was started


BREAKS_AFTER_FIRST_IMPORT = '''
import os
import time
from pathlib import Path

import sdk

try:  # loads once (the executor's warm worker), then every new worker fails to (atomically: workers start at once)
    os.close(os.open(Path(__file__).parent / "imported", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
except FileExistsError:
    raise ImportError("only one worker may load this module") from None


@sdk.task
def square(event, context):
    time.sleep(0.5)  # hold the warm worker so the other replicas need workers of their own
    (x,) = sdk.inputs()
    sdk.put(sdk.outputs()[0], int(sdk.get(x)) ** 2)
'''


def test_a_task_whose_worker_cannot_load_is_the_one_its_error_names(stack: Stack, tmp_path: Path) -> None:
    """Once the failed task was one replica and its error named another (``failed task:
    square_1: handler 'handlers:square' of task square_0 cannot be loaded``)."""
    d = tmp_path / "sq"
    wds = write_squares(d, BREAKS_AFTER_FIRST_IMPORT)
    for i in range(3):
        (d / f"x{i}").write_text(str(i))
    r = run_workflow(wds, config=stack.config, stack=stack, inputs={f"x_{i}": str(d / f"x{i}") for i in range(3)},
                     options=ExecutorOptions(max_attempts=1, concurrency=3, progress=False))
    assert r.status == "failed" and r.failed_task in ("square_1", "square_2"), r.error
    assert r.error == r.tasks[r.failed_task]["errors"][0]["error"]
    assert "handler 'handlers:square' of square_{i} (tasks square_0, square_1, square_2) cannot be loaded" in r.error
    assert "ImportError: only one worker may load this module (handlers.py, line 11)" in r.error
