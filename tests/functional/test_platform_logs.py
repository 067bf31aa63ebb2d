"""What a local Lambda leaves to debug with: CloudWatch-style START/END/REPORT lines and
request-id-tagged output in the function's log file, tracebacks of the handler's own frames
(causes included, never the worker's), and handlers loaded up front (``prewarm``)."""

from __future__ import annotations

import re
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_functions.exceptions import InvocationFailed
from storage_functions.local import LocalPlatform, PlatformConfig

SOURCE = textwrap.dedent('''
    import sys
    print("module loading")

    class Immutable(Exception):
        def __setattr__(self, name, value):
            raise TypeError("can't modify immutable instance")

    def inner(x):
        return 1 / x

    def wrapped(event, context):
        try:
            inner(0)
        except ZeroDivisionError as exc:
            raise ValueError("could not divide") from exc

    def frozen(event, context):
        raise Immutable("thrift-style")

    def chatty(event, context):
        print("line one")
        print("line two", file=sys.stderr)
        print("no newline", end="")
        return event["n"]
''')


@pytest.fixture
def code(tmp_path: Path) -> Path:
    d = tmp_path / "code"
    d.mkdir()
    (d / "logs_handlers.py").write_text(SOURCE)
    (d / "broken.py").write_text("x = 1\nimport not_there_at_all\n")
    return d


@pytest.fixture
def platform(tmp_path: Path, code: Path) -> Iterator[LocalPlatform]:
    with LocalPlatform(PlatformConfig(log_dir=str(tmp_path / "logs"), seed=1), environ={}) as p:
        for name in ("wrapped", "frozen", "chatty"):
            p.deploy(name, f"logs_handlers:{name}", code_paths=[code], memory_mb=256)
        p.deploy("broken", "broken:handler", code_paths=[code])
        yield p


def test_traceback_holds_the_handlers_frames_and_causes(platform: LocalPlatform, code: Path) -> None:
    with pytest.raises(InvocationFailed) as info:
        platform.invoke("wrapped", {})
    trace = info.value.stack_trace
    assert trace.startswith("Traceback (most recent call last):")
    assert f'File "{code / "logs_handlers.py"}", line 10, in inner' in trace
    assert "ZeroDivisionError: division by zero" in trace and "direct cause" in trace
    assert trace.rstrip().endswith("ValueError: could not divide")
    assert "_worker.py" not in trace


def test_an_exception_that_cannot_be_changed_still_reports(platform: LocalPlatform) -> None:
    """Thrift's exceptions refuse attribute writes; formatting must not need any (it once
    killed the worker: 'exit status 1')."""
    with pytest.raises(InvocationFailed) as info:
        platform.invoke("frozen", {})
    assert info.value.reason == "error" and info.value.error_type == "Immutable"
    assert "Immutable: thrift-style" in info.value.stack_trace
    assert platform.invoke("chatty", {"n": 1}) == 1  # and the platform carries on


def test_log_lines_carry_the_request_id_and_report_lines_frame_each_invocation(
        platform: LocalPlatform, tmp_path: Path) -> None:
    threads = [threading.Thread(target=platform.invoke, args=("chatty", {"n": k}),
                                kwargs={"request_id": f"req-{k}"}) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (tmp_path / "logs" / "chatty.log").read_text().splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert all(re.match(stamp + "\t", ln) for ln in lines), lines
    body = [ln.split("\t", 1)[1] for ln in lines]
    assert body.count("INIT\tmodule loading") >= 1  # import-time output of each instance
    for k in range(3):
        rid = f"req-{k}"
        mine = [b for b in body if rid in b]
        assert mine[0] == f"START RequestId: {rid} Version: $LATEST"
        assert f"{rid}\tline one" in mine and f"{rid}\tline two" in mine
        assert f"{rid}\tno newline" in mine  # a partial line is written when the invocation ends
        assert mine[-2] == f"END RequestId: {rid}"
        report = mine[-1]
        assert re.fullmatch(rf"REPORT RequestId: {rid}\tDuration: \d+\.\d\d ms\tBilled Duration: \d+ ms\t"
                            r"Memory Size: 256 MB\tMax Memory Used: \d+ MB(\tInit Duration: \d+\.\d\d ms)?",
                            report), report
    billed = {r.request_id: r.billed_ms for r in platform.records("chatty")}
    for b in body:
        m = re.match(r"REPORT RequestId: (\S+)\t.*Billed Duration: (\d+) ms", b)
        if m:
            assert int(m.group(2)) == billed[m.group(1)]  # the same figure the billing meter charged


def test_an_error_is_logged_with_its_traceback(platform: LocalPlatform, tmp_path: Path) -> None:
    with pytest.raises(InvocationFailed):
        platform.invoke("wrapped", {}, request_id="boom-1")
    text = (tmp_path / "logs" / "wrapped.log").read_text()
    assert "boom-1\t[ERROR] ValueError: could not divide\n" in text
    assert "boom-1\tZeroDivisionError: division by zero\n" in text
    assert text.index("[ERROR]") < text.index("END RequestId: boom-1") < text.index("REPORT RequestId: boom-1")


def test_prewarm_loads_the_handler_and_the_first_invocation_is_warm(platform: LocalPlatform) -> None:
    assert platform.prewarm("chatty") > 0
    [info] = platform.instances("chatty")
    assert (info.state, info.invocations) == ("idle", 0)
    assert platform.prewarm("chatty") == 0.0  # an idle one is there already
    platform.invoke("chatty", {"n": 1})
    [rec] = platform.records("chatty")
    assert rec.cold is False and [i.pid for i in platform.instances("chatty")] == [info.pid]


def test_prewarm_of_a_handler_that_cannot_be_imported(platform: LocalPlatform, code: Path, tmp_path: Path) -> None:
    with pytest.raises(InvocationFailed) as info:
        platform.prewarm("broken")
    exc = info.value
    assert exc.reason == "init" and exc.error_type == "Runtime.ImportModuleError"
    assert f'File "{code / "broken.py"}", line 2, in <module>' in exc.stack_trace
    assert "importlib" not in exc.stack_trace  # the import machinery's frames are not the handler's
    assert platform.instances("broken") == []
    assert "[ERROR] Runtime.ImportModuleError: No module named 'not_there_at_all'" in \
        (tmp_path / "logs" / "broken.log").read_text()
