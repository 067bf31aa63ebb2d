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


def _log_of(path: str | None, request_id: str) -> list[str]:
    """The lines the attempt ``request_id`` logged (its tag stripped)."""
    tag = f"\t{request_id}\t"
    return [ln.split(tag, 1)[1] for ln in Path(path or "").read_text().splitlines() if tag in ln]


@pytest.mark.parametrize(("mode", "task", "said", "frame"), [
    ("undeclared_write", "producer", "UndeclaredOutput: wrote 'not_declared'", 'line 23, in producer'),
    ("undeclared_read", "consumer", "UndeclaredRead: read 'side'", 'line 42, in consumer'),
    # found after the handler returned: no frame is the handler's, so the message says where it is
    ("missing_output", "producer", "MissingOutputs: returned without writing its declared output(s) 'side'; "
                                   "call sdk.put for each before handler producer (handlers.py, line 16) returns",
     None),
    ("bad_return", "producer", "Runtime.MarshalError: Unable to marshal response: Object of type set is not JSON "
                               "serializable (result['not json'] is a set); return only JSON types", None),
])
def test_a_rule_error_is_said_once_with_the_handlers_frames_only(stack: Stack, workflow: Path, mode: str, task: str,
                                                                  said: str, frame: str | None) -> None:
    """The report's error, its traceback and the task's log say the error once, and show only
    frames of the handler's own code: none of the SDK, the wire client, powertools or json."""
    r = run_mode(stack, workflow, mode)
    assert r.status == "failed" and r.failed_task == task
    assert said in (r.error or "")
    [err] = r.tasks[task]["errors"]
    trace = err["traceback"] or ""
    for internal in ("sdk/", "funcsion_rpc", "aws_lambda_powertools", "json/", "_worker.py", "direct cause"):
        assert internal not in trace, trace
    if frame is None:
        assert trace == ""  # no frame of the handler's: a traceback would only say the message again
    else:
        assert trace.count("Traceback (most recent call last):") == 1
        assert f'File "{workflow / "handlers.py"}", {frame}' in trace
        assert trace.count(said) == 1
    logged = _log_of(r.tasks[task]["log"], err["request_id"])
    assert sum(said in ln for ln in logged) == 1, logged  # the [ERROR] line only
    assert not any(internal in ln for ln in logged for internal in ("sdk/", "aws_lambda_powertools", "json/"))


def test_cli_says_a_rule_error_once(workflow: Path, tmp_path: Path) -> None:
    (workflow / "BAD_MODE").write_text("undeclared_write")
    proc = cli("run", str(workflow / "bad.wds.json"), "--input", f"src={workflow / 'src.txt'}", "--no-progress",
               "--state-dir", str(tmp_path / "state"), cwd=workflow)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.splitlines()
    assert err[0].startswith("funcsion run: task producer of run r-1 failed: UndeclaredOutput: wrote 'not_declared'")
    assert proc.stderr.count("wrote 'not_declared'") == 1, proc.stderr
    assert err[1:4] == ["  Traceback (most recent call last):",
                        f'    File "{workflow / "handlers.py"}", line 23, in producer',
                        '      sdk.put("not_declared", "x")']
    assert err[4].startswith("  log of producer: ")


def test_a_handler_without_the_task_decorator_is_not_retried(stack: Stack, workflow: Path) -> None:
    (workflow / "BAD_MODE").write_text("no_task")
    r = run_workflow(workflow / "bad.wds.json", config=stack.config, stack=stack,
                     inputs={"src": str(workflow / "src.txt")}, options=RETRIES)
    assert r.status == "failed" and r.failed_task == "producer"
    assert r.tasks["producer"]["attempts"] == 1, r.tasks["producer"]["errors"]
    assert "NoRunContext" in (r.error or "") and "decorate the handler with @sdk.task" in (r.error or "")
    assert r.memory["leaked_bytes"] == 0


def test_cli_handler_with_a_syntax_error_names_the_place_once(workflow: Path) -> None:
    (workflow / "handlers.py").write_text("import sdk\n\n\n@sdk.task\ndef producer(event, context):\n"
                                          "    x = (1,\n    return {}\n")
    proc = cli("run", str(workflow / "bad.wds.json"), "--input", f"src={workflow / 'src.txt'}", cwd=workflow)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cannot be loaded" in proc.stderr and "SyntaxError: '(' was never closed" in proc.stderr
    assert proc.stderr.count("(handlers.py, line 6)") == 1, proc.stderr


def test_cli_refuses_a_wordcount_input_that_is_not_utf8_before_the_run(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLES

    latin = tmp_path / "latin.txt"
    latin.write_bytes("café\n".encode("latin-1"))
    proc = cli("run", str(EXAMPLES / "wordcount" / "wordcount.wds.json"), "--input", f"raw_text={latin}",
               "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"--input raw_text={latin}: not utf-8 text: byte 0xe9 at offset 3 (line 1)" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "state" / "runs").exists()  # no run was started


def test_get_refuses_to_write_a_binary_output_to_a_terminal(workflow: Path, tmp_path: Path) -> None:
    """As curl does: a binary value (here an ELF, passed through the workflow as bytes) is not
    written to a terminal; -o FILE and a redirection get it byte for byte."""
    import os
    import pty
    import threading

    elf = Path(sys.executable).resolve().read_bytes()[:20_000]  # a small stub when libpython is shared
    assert elf.startswith(b"\x7fELF")
    (workflow / "prog").write_bytes(elf)
    (workflow / "BAD_MODE").write_text("ok")
    state = str(tmp_path / "state")
    proc = cli("run", str(workflow / "bad.wds.json"), "--input", f"src={workflow / 'prog'}", "--no-progress",
               "--state-dir", state, cwd=workflow)
    assert proc.returncode == 0, proc.stderr
    leader, follower = pty.openpty()
    shown: list[bytes] = []

    def drain() -> None:  # what the terminal shows (a full pty would block the writer)
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # EIO: the last writer closed
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        on_tty = subprocess.run([sys.executable, "-m", "sdk.cli", "get", "last", "result", "--state-dir", state],
                                stdout=follower, stderr=subprocess.PIPE, text=True, timeout=60, cwd=workflow)
    finally:
        os.close(follower)
    reader.join(10)
    os.close(leader)
    assert on_tty.returncode == 2 and b"".join(shown) == b"", on_tty.stderr
    assert on_tty.stderr.strip() == (f"funcsion get: output 'result' of run r-1 is binary ({len(elf):,} bytes, an "
                                     "ELF file): binary output can mess up your terminal; write it to a file with "
                                     "-o FILE (or --raw > FILE)")
    out = tmp_path / "result.bin"
    to_file = cli("get", "last", "result", "--state-dir", state, "-o", str(out), cwd=workflow)
    assert to_file.returncode == 0 and out.read_bytes() == elf.upper()
    piped = subprocess.run([sys.executable, "-m", "sdk.cli", "get", "last", "result", "--state-dir", state],
                           capture_output=True, timeout=60, cwd=workflow)
    assert piped.returncode == 0 and piped.stdout == elf.upper()


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
