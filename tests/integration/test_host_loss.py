"""Losing one of several hosts mid-run on the embedded stack (issue 31 item 4), one part at a time:

- a metadata shard killed (its journal deleted): its run's calls pause, the other shard's run goes
  on, and when the replacement restores the journal from COS the paused call completes with no
  error and the daemon's control loop follows the new process;
- the daemon killed with -9 (its state directory deleted, its storage functions dying with it): a
  read issued while it is down waits, and the replacement restores its table from COS and serves
  every live object from its COS copy.

The stack ships control state synchronously (``control_in_cos=0``) and the daemon answers a PUT
once its version is in COS (``durable_puts``): nothing answered is lost.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from funcsion_rpc import routing
from sdk._client import Client
from sdk._config import Config
from sdk._store_client import StoreClient
from sdk.local._daemon_proc import _holders
from sdk.local._stack import Stack
from tests._waiting import wait_for

HERE = Path(__file__).parent
LIFETIME = HERE / "lifetimewf" / "lifetime.wds.json"
MiB = 1 << 20


class Background:
    """``fn()`` on a thread; ``done`` is set when it returned or raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._fn = fn
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
        finally:
            self.done.set()

    def join(self, timeout_s: float) -> Any:
        assert self.done.wait(timeout_s), "the call did not return"
        if self.error is not None:
            raise self.error
        return self.result


def runs_on_both_shards(driver: Client, key: str) -> dict[int, Client]:
    """A run owned by each of the two shards (a start goes to the least loaded shard)."""
    runs: dict[int, Client] = {}
    for _ in range(8):
        run = driver.start_run(key)
        k = routing.shard_of_run(run.run_id, 2)
        if k in runs:
            run.end_run("succeeded")
            run.close()
            continue
        runs[k] = run
        if len(runs) == 2:
            return runs
    raise AssertionError("no run started on one of the shards")


def held(addr: tuple[str, int], token: str, run_id: str) -> int:
    with StoreClient(addr, token) as c:
        return int(c.stats().get("runs", {}).get(run_id, {}).get("bytes", 0))


def test_a_lost_shard_pauses_its_run_until_its_replacement_and_the_other_shard_does_not_notice(
        tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, metadata_shards=2, control_in_cos=0.0,
               daemon={"max_functions": 4 * (cfg.ec_data + cfg.ec_parity)}) as stack:
        driver = stack.client()
        key = driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME))
        runs = runs_on_both_shards(driver, key)
        lost, other = 0, 1          # shard 0 is lost (any shard would do: both carry a run)
        seed = {k: os.urandom(2 * MiB + k) for k in runs}
        for k, run in runs.items():
            run.put("seed", seed[k])
            assert run.bind(function="writer").get("seed") == seed[k]
        address_before = stack.endpoints.metadata

        stack.kill_metadata(lost)
        assert not stack._journal_path(lost).exists()               # its host's disk is gone
        writer = runs[lost].bind(function="writer")
        paused = Background(lambda: writer.put_many({"short": b"s" * 50_000, "long": b"l" * 70_000}))
        # the other shard's run goes on, start to end, while the lost shard's put waits
        w = runs[other].bind(function="writer")
        w.put_many({"short": b"S" * 50_000, "long": b"L" * 70_000})
        assert runs[other].bind(function="a").get("short") == b"S" * 50_000
        runs[other].bind(function="a").put("mid", b"m")
        runs[other].bind(function="b").get("mid")
        runs[other].bind(function="b").put("late", b"t")
        c = runs[other].bind(function="c")
        assert c.get_many(["long", "late"]) == {"long": b"L" * 70_000, "late": b"t"}
        c.put("result", b"r")
        assert not paused.done.is_set()                            # paused, not failed

        stack.start_metadata(lost)
        assert paused.join(60.0) is True                           # the writer's last output committed its read
        restored = stack.metadata_restores[lost]
        assert restored is not None and restored.generation and restored.pieces >= 1
        assert stack.endpoints.metadata == address_before          # the replacement took the same address
        # the restored shard knows the run's history: the seed read, the new writes
        assert runs[lost].lookup("seed").state == "freed"          # writer committed its only read
        assert runs[lost].bind(function="a").get("short") == b"s" * 50_000
        wait_for(lambda: stack.followers[lost].source_changes == 1, 20.0, "the control loop to follow the replacement")

        summaries = {k: run.end_run("succeeded") for k, run in runs.items()}
        assert summaries[other]["kept"] == ["result"]
        stack.drain()
        addr, token = stack.store.address, stack.store.token
        for run in runs.values():      # the replacement's drops reached the daemon: nothing left
            wait_for(lambda r=run: held(addr, token, r.run_id) == 0, 20.0, f"run {run.run_id}'s bytes to go")
        for h in stack.handlers:
            assert h.state.stats()["live_bytes"] == 0
        for run in runs.values():
            run.close()
        driver.close()


@pytest.mark.slow
def test_a_lost_daemon_is_replaced_from_cos_and_a_read_waiting_for_it_gets_its_object(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemon_process=True, control_in_cos=0.0) as stack:
        driver = stack.client()
        key = driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME))
        run = driver.start_run(key)
        seed = os.urandom(3 * MiB + 7)                     # erasure-coded over a function group
        run.put("seed", seed)
        writer = run.bind(function="writer")
        assert writer.get("seed") == seed
        writer.put_many({"short": b"s" * 50_000, "long": os.urandom(70_000)})
        long = run.bind(function="c").read_raw("long")
        addr, token = stack.store.address, stack.store.token
        with StoreClient(addr, token) as c:      # durable PUTs: each answered once in COS
            assert c.stats()["pending_uploads"] == 0

        stack.kill_daemon(0)
        assert not Path(stack.daemon_config.buffer_dir).exists()   # its table and buffer are gone
        assert _holders(stack.store._log_files) == []              # its functions died with it: their memory too
        reader = run.bind(function="a")
        waiting = Background(lambda: reader.get("short"))
        stack.start_daemon(0)
        assert waiting.join(60.0) == b"s" * 50_000
        assert run.bind(function="c").read_raw("long") == long
        with StoreClient(addr, token) as c:
            st = c.stats()
        assert st["table_restored_from_cos_bytes"] > 0 and st["restored_objects"] == 2, st   # short, long (seed was freed)
        run.bind(function="a").put("mid", b"m")
        run.end_run("succeeded")
        stack.drain()
        wait_for(lambda: held(addr, token, run.run_id) == 0, 20.0, "the run's bytes to go")
        assert stack.handler.state.stats()["live_bytes"] == 0
        run.close()
        driver.close()
