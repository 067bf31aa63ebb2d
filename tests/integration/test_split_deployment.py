"""A split deployment: ``funcsion serve daemon --metadata``, ``funcsion serve metadata`` and
``funcsion run WDS --stack metadata=...,daemon=...`` as three processes. The daemon starts
first and cannot reach the metadata server yet: it serves anyway, retries, and registers its
pool once the server is up. Word count then runs with the right output, nothing leaked, and
every storage instruction carried out and acknowledged."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from funcsion_rpc import MetadataClient
from storage_functions.cos import open_cos
from tests._waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
WC = ROOT / "examples" / "wordcount" / "wordcount.wds.json"
TEXT = ("the quick brown fox jumps over the lazy dog\n" * 200 + "It's a dog's life\n" * 40) * 2


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNCSION_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as err:
            self.p = subprocess.Popen([sys.executable, "-m", "sdk.cli", *args], stdout=subprocess.PIPE,
                                      stderr=err, env=env, cwd=ROOT)

    def first_line(self, timeout_s: float = 30.0) -> dict[str, Any]:
        assert self.p.stdout is not None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout_s)
        assert ready, f"no output within {timeout_s} s; stderr: {self.log.read_text()}"
        return json.loads(self.p.stdout.readline())  # type: ignore[no-any-return]

    def stop(self) -> int:
        if self.p.stdout is None or self.p.stdout.closed:
            return self.p.wait()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            code = self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            code = self.p.wait()
        assert self.p.stdout is not None
        self.p.stdout.close()
        return code


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()


@pytest.mark.slow
def test_three_processes_run_word_count(tmp_path: Path, procs: list[Proc]) -> None:
    admin_token = "split-admin-token"
    md_port = _free_port()
    daemon = Proc(["serve", "daemon", "--port", "0", "--metadata", f"127.0.0.1:{md_port}", "--json",
                   "--root", str(tmp_path / "daemon")], tmp_path / "daemon.log",
                  _env(FUNCSION_ADMIN_TOKEN=admin_token))
    procs.append(daemon)
    d_info = daemon.first_line()                       # it serves before the metadata server is up
    assert d_info["metadata"] == f"127.0.0.1:{md_port}"
    metadata = Proc(["serve", "metadata", "--port", str(md_port), "--json", "--journal",
                     str(tmp_path / "metadata.journal")], tmp_path / "metadata.log",
                    _env(FUNCSION_ADMIN_TOKEN=admin_token))
    procs.append(metadata)
    m_info = metadata.first_line()
    assert m_info["address"] == f"127.0.0.1:{md_port}" and "admin_token" not in m_info  # it was given
    admin = MetadataClient(port=md_port, admin_token=admin_token)
    try:
        wait_for(lambda: admin.stats()["functions"], 30.0, "the daemon to register its pool", 0.1)
        src = tmp_path / "book.txt"
        src.write_text(TEXT)
        run = subprocess.run(
            [sys.executable, "-m", "sdk.cli", "run", str(WC), "--input", f"raw_text={src}", "--json",
             "--state-dir", str(tmp_path / "driver"),
             "--stack", f"metadata={m_info['address']},daemon={d_info['address']}"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path,
            env=_env(FUNCSION_ADMIN_TOKEN=admin_token, FUNCSION_STORE_TOKEN=d_info["token"]))
        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout.splitlines()[-1])
        assert report["status"] == "succeeded" and report["memory"]["leaked_bytes"] == 0, report
        assert report["memory"]["source"] == "storage functions"
        assert any(o["tier"] == "memory" for o in report["objects"].values())   # it used the pool
        with open_cos((tmp_path / "daemon" / "cos").as_uri()) as cos:
            counts = json.loads(cos.get(f"outputs/{report['run_id']}/word_counts"))
            assert cos.list(f"tier/{report['run_id']}/") == []
        assert counts == dict(Counter(re.findall(r"[a-z0-9']+", TEXT.lower())))
        wait_for(lambda: admin.stats()["pending_instructions"] == 0, 30.0, "every instruction to be acknowledged", 0.1)
    finally:
        admin.close()
    assert "cannot reach the metadata server" in daemon.log.read_text()     # it retried, and said so once
    assert daemon.log.read_text().count("cannot reach the metadata server") <= 2
    assert metadata.stop() == 0 and daemon.stop() == 0
