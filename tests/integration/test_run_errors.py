"""Bad input to `funcsion run` gets a clear error naming what is wrong, and loses nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import InputError, run_workflow
from sdk.local._stack import Stack

BAD = Path(__file__).resolve().parent / "badwf"
ONE_TRY = ExecutorOptions(max_attempts=1, progress=False)


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    d = tmp_path / "wf"
    shutil.copytree(BAD, d)
    (d / "src.txt").write_text("payload")
    return d


def run_mode(stack: Stack, wf: Path, mode: str):  # type: ignore[no-untyped-def]
    (wf / "BAD_MODE").write_text(mode)
    return run_workflow(wf / "bad.wds.json", config=stack.config, stack=stack,
                        inputs={"src": str(wf / "src.txt")}, options=ONE_TRY)


def test_a_good_run_of_the_same_workflow(stack: Stack, workflow: Path) -> None:
    r = run_mode(stack, workflow, "ok")
    assert r.status == "succeeded" and r.memory["leaked_bytes"] == 0


@pytest.mark.parametrize(("mode", "task", "needle"), [
    ("undeclared_write", "producer", "UndeclaredOutput: wrote 'not_declared', which workflow bad/1 does not declare"),
    ("undeclared_read", "consumer", "read 'side', which its WDS entry does not list as input"),
    ("missing_output", "producer", "without writing its declared output(s) 'side'"),
    ("read_after_commit", "consumer", "after writing its last output 'result'"),
])
def test_rule_breaking_handlers(stack: Stack, workflow: Path, mode: str, task: str, needle: str) -> None:
    r = run_mode(stack, workflow, mode)
    assert r.status == "failed"
    assert r.failed_task == task
    assert needle in (r.error or "")
    assert f"task {task} of run {r.run_id}" in (r.error or "")
    assert r.memory["leaked_bytes"] == 0  # the failed run was ended and freed


RETRIES = ExecutorOptions(max_attempts=3, retry_interval_s=0.05, progress=False)


@pytest.mark.parametrize(("mode", "needle"), [
    ("missing_output", "failed: MissingOutputs: returned without writing"),
    # the last output committed, so a retry would find the task "committed in an earlier attempt",
    # succeed, and leave the consumer to fail on the never-written 'mid'
    ("missing_middle_output", "failed: MissingOutputs: returned without writing"),
    ("undeclared_write", "UndeclaredOutput: wrote 'not_declared'"),
    ("codec", "CodecError"),
    ("bad_return", "Runtime.MarshalError"),
])
def test_errors_no_retry_can_fix_fail_the_run_at_once(stack: Stack, workflow: Path, mode: str,
                                                      needle: str) -> None:
    (workflow / "BAD_MODE").write_text(mode)
    r = run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(workflow / "src.txt")}, options=RETRIES)
    assert r.status == "failed"
    assert r.failed_task == "producer", r.error  # the writer, not the reader that found nothing
    assert r.tasks["producer"]["attempts"] == 1, r.tasks["producer"]["errors"]
    assert needle in (r.error or "")
    assert "consumer" not in r.tasks or r.tasks["consumer"]["attempts"] == 0
    assert r.memory["leaked_bytes"] == 0


def test_reading_a_freed_object_names_its_reads(stack: Stack, workflow: Path) -> None:
    from sdk.exceptions import ObjectExpired

    with stack.client() as c:
        key = c.register_workflow((workflow / "bad.wds.json").read_text())
        run = c.start_run(key)
        run.put("src", "payload")
        producer = run.bind(function="producer")
        assert producer.get("src") == "payload"
        assert producer.put_many({"mid": "m", "side": "s"}) is True  # last output: commits, frees src
        with pytest.raises(ObjectExpired) as err:
            run.get("src")
        msg = str(err.value)
        assert "'src'" in msg and run.run_id in msg and "producer" in msg
        run.end_run("failed")
        run.close()


def test_missing_input_and_unknown_input(stack: Stack, workflow: Path) -> None:
    (workflow / "BAD_MODE").write_text("ok")
    with pytest.raises(InputError, match="no value for workflow input"):
        run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack, options=ONE_TRY)
    with pytest.raises(InputError, match="does not read as input"):
        run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(workflow / "src.txt"), "other": "x"}, options=ONE_TRY)
    with pytest.raises(InputError, match="cannot read the file"):
        run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(workflow / "nope.txt")}, options=ONE_TRY)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


def test_cli_handler_module_that_cannot_be_imported(workflow: Path) -> None:
    """Refused before the run starts (exit 2, no report), naming the task whose handler it is."""
    (workflow / "handlers.py").write_text("import does_not_exist_anywhere\n")
    proc = cli("run", str(workflow / "bad.wds.json"), "--input", f"src={workflow / 'src.txt'}", "--json",
               cwd=workflow)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert "handler 'handlers:producer' of task producer cannot be loaded" in proc.stderr
    assert "ModuleNotFoundError: No module named 'does_not_exist_anywhere' (handlers.py, line 1)" in proc.stderr


def test_cli_invalid_wds_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"app": "x"}')
    proc = cli("run", str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "missing required field 'spec'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_entrys_max_attempts_bounds_its_retries(stack: Stack, workflow: Path) -> None:
    import json

    (workflow / "BAD_MODE").write_text("raises")  # a retryable error, every attempt
    doc = json.loads((workflow / "bad.wds.json").read_text())
    doc["spec"]["s0"]["functions"][0]["max_attempts"] = 2  # the executor's options allow 3
    (workflow / "bad.wds.json").write_text(json.dumps(doc))
    r = run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(workflow / "src.txt")}, options=RETRIES)
    assert r.status == "failed" and r.failed_task == "producer"
    assert r.tasks["producer"]["attempts"] == 2, r.tasks["producer"]["errors"]
    assert r.memory["leaked_bytes"] == 0
