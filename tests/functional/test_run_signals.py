"""`funcsion run`'s signal handling: the first SIGINT/SIGTERM stops the run
(``RunInterrupted``, so it is ended and reported), a second one exits at once."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, signal, sys
from sdk.cli.run_cmd import _interrupts
from sdk.local._run import RunInterrupted

with _interrupts():
    try:
        os.kill(os.getpid(), signal.{first})
        for _ in range(10**9):  # the handler raises at the next bytecode
            pass
    except RunInterrupted as exc:
        print("stopping after", exc.signal_name, flush=True)
        os.kill(os.getpid(), signal.SIGINT)  # while the run is being ended
        for _ in range(10**9):
            pass
print("not forced", flush=True)
"""


def run(first: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(first=first)], capture_output=True, text=True,
                          timeout=60)


def test_first_signal_stops_the_run_and_a_second_exits_at_once() -> None:
    for first in ("SIGINT", "SIGTERM"):
        proc = run(first)
        assert proc.stdout.splitlines() == [f"stopping after {first}"], proc.stderr
        assert proc.returncode == 130
        assert "again: exiting now; the run is left to its TTL" in proc.stderr
        assert "Traceback" not in proc.stderr
