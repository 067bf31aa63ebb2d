"""The embedded stack's daemon killed with -9 and started again (``Stack(daemon_process=True)``,
``funcsion run --restart-daemon-after S``): live objects read back byte-exact, objects freed
while it was down stay gone, and word count with a restart one second in is right, shows no
handler an error and leaks nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sdk._config import Config
from sdk._store_client import StoreClient
from sdk.local._stack import Stack
from storage_functions.cos import open_cos
from storage_functions.daemon._runs import cos_run_prefix

HERE = Path(__file__).parent
LIFETIME = HERE / "lifetimewf" / "lifetime.wds.json"
MiB = 1 << 20


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon_process=True) as st:
        yield st


def _held(stack: Stack, run_id: str) -> int:
    with StoreClient(stack.store.address, stack.store.token) as c:
        return int(c.stats().get("runs", {}).get(run_id, {}).get("bytes", 0))


@pytest.mark.slow
def test_a_killed_daemon_comes_back_with_live_objects_and_without_freed_ones(stack: Stack) -> None:
    driver = stack.client()
    key = driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME))
    ended = driver.start_run(key)
    live = driver.start_run(key)
    data = {"seed": os.urandom(3 * MiB + 7)}
    ended.put("seed", os.urandom(2 * MiB))
    live.put("seed", data["seed"])
    writer = live.bind(function="writer")
    writer.put("short", b"s" * 50_000)
    writer.put("long", b"l" * 70_000)
    assert _held(stack, ended.run_id) > 0
    stack.store.kill()                       # SIGKILL: no cleanup, no acknowledgement of what follows
    ended.end_run("succeeded")               # its drops wait at the metadata server for a daemon
    stack.store.start()
    assert live.get("seed") == data["seed"]
    assert live.bind(function="a").get("short") == b"s" * 50_000
    assert live.bind(function="c").get("long") == b"l" * 70_000
    deadline = time.monotonic() + 20
    while _held(stack, ended.run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _held(stack, ended.run_id) == 0   # freed while the daemon was down: not resurrected
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        assert cos.list(cos_run_prefix("sion", ended.run_id)) == []
        assert cos.list(cos_run_prefix("sion", live.run_id))  # the live run's copies stay
    finally:
        cos.close()
    with StoreClient(stack.store.address, stack.store.token) as c:
        assert c.stats()["daemon_restarts"] == 1
    live.end_run("succeeded")
    for r in (ended, live):
        r.close()
    driver.close()


@pytest.mark.slow
def test_word_count_with_a_daemon_restart_is_right_and_leaks_nothing(tmp_path: Path) -> None:
    from pydoc_data.topics import topics

    from sdk.local._executor import ExecutorOptions
    from sdk.local._run import run_workflow
    from tests.integration.test_wordcount_e2e import WC, expected_counts, output

    text = "\n\n".join(topics[k] for k in sorted(topics)) * 64  # ~30 MB: the run outlasts the restart at 0.3 s (it takes ~1 s with the write-behind in memory)
    book = tmp_path / "book.txt"
    book.write_text(text)
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={}, restart_daemon_after_s=0.3)
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        assert stack.daemon_process
        report = run_workflow(WC, config=cfg, stack=stack, inputs={"raw_text": str(book)},
                              options=ExecutorOptions(progress=False, seed=7))
        assert report.status == "succeeded", report.error
        assert all(t["attempts"] == 1 and not t["errors"] for t in report.tasks.values()), report.tasks
        assert output(stack, report, "word_counts") == expected_counts(text)
        assert report.memory["leaked_bytes"] == 0
        assert report.recovery["daemon_restarts"] == 1, report.recovery


def test_restart_daemon_after_is_refused_with_storage_chaos_or_a_shared_stack(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main
    from tests.integration.test_wordcount_e2e import WC

    with pytest.raises(SystemExit) as exc:
        main(["run", str(WC), "--state-dir", str(tmp_path), "--restart-daemon-after", "1",
              "--kill-storage-rate", "0.2"])
    assert exc.value.code == 2
    assert "cannot be combined" in capsys.readouterr().err
    assert replace(Config(), restart_daemon_after_s=2.0).restart_daemon_after_s == 2.0
