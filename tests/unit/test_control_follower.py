"""The daemon's control loop (``storage_functions.daemon.Follower``) against the real
metadata core and handler in memory (no sockets): what each instruction does, at-least-once
delivery (duplicates skipped, a restarted follower resumes from the last acknowledged
instruction), back-off and logging while the metadata server is unreachable, and the checks
it makes when it connects. The daemon side is a recorder: these are the follower's decisions;
the daemon's operations are tested against real functions elsewhere."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from funcsion_rpc.errors import ServiceUnavailable
from metadata_server import CoreDriver, MetadataHandler, MetadataState
from sdk.local._control import MetadataSource
from storage_functions.auth import tier_key
from storage_functions.cos import open_cos
from storage_functions.daemon import DaemonConfig, Follower

ADMIN = "adm"
BS = 1 << 20


class InProcessClient:
    """The few ``MetadataClient`` calls ``MetadataSource`` makes, on a handler in this
    process; ``down`` makes it unreachable, ``redeliver`` offers every pending instruction
    again (acknowledgements get lost, and the source ignores ``after_seq``)."""

    def __init__(self, handler: MetadataHandler) -> None:
        self.h = handler
        self.down = False
        self.redeliver = False
        self.calls = 0

    def _up(self) -> None:
        self.calls += 1
        if self.down:
            raise ServiceUnavailable("cannot reach the metadata server at 127.0.0.1:7917: Connection refused")

    def fetch_instructions(self, after_seq: int, max_items: int) -> list[Any]:
        self._up()
        if self.redeliver:
            return self.h.fetch_instructions(ADMIN, 0, max_items)
        return self.h.fetch_instructions(ADMIN, after_seq, max_items)

    def stats(self) -> dict[str, Any]:
        self._up()
        return json.loads(self.h.stats(ADMIN))  # type: ignore[no-any-return]

    def register_capacity(self, function: str, blocks: int) -> int:
        self._up()
        return self.h.register_capacity(ADMIN, function, blocks)

    def unregister_capacity(self, function: str) -> int:
        self._up()
        return self.h.unregister_capacity(ADMIN, function)

    def close(self) -> None:
        pass


@dataclass
class Recorder:
    """The daemon's side, recorded."""

    config: DaemonConfig
    cos: Any = None
    counters: dict[str, int] = field(default_factory=dict)
    freed: list[str] = field(default_factory=list)
    dropped_runs: list[str] = field(default_factory=list)
    prewarmed: list[int] = field(default_factory=list)
    prewarmed_from: list[int] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    swept: int = 0

    evicted: list[str] = field(default_factory=list)

    def free(self, keys: Iterable[str]) -> int:
        self.freed += list(keys)
        return 0

    def evict(self, keys: Iterable[str]) -> int:
        self.evicted += list(keys)
        return 0

    def drop_run(self, run_id: str) -> int:
        self.dropped_runs.append(run_id)
        return 0

    def prewarm(self, count: int, first: int = 0) -> int:
        self.prewarmed.append(count)
        self.prewarmed_from.append(first)
        return count - first

    def release_function(self, name: str) -> bool:
        self.released.append(name)
        return True

    def sweep_runs(self, keep: Callable[[str], bool]) -> list[str]:
        self.swept += 1
        return [r for r in ("r-old",) if not keep(r)]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class World:
    handler: MetadataHandler
    core: CoreDriver
    client: InProcessClient
    daemon: Recorder
    clock: Clock

    def follower(self, **kw: Any) -> Follower:
        return Follower(MetadataSource(self.client), self.daemon, clock=self.clock, **kw)  # type: ignore[arg-type]

    def pending(self) -> list[int]:
        return [i.seq for i in self.handler.state.pending]


@pytest.fixture
def world(fig9_path: Path, tmp_path: Path) -> World:
    state = MetadataState(block_size=BS, data_chunks=2, parity_chunks=1)
    handler = MetadataHandler(state, admin_token=ADMIN)
    core = CoreDriver(state)
    core.key = core.register(fig9_path)  # type: ignore[attr-defined]
    cfg = DaemonConfig(block_size=BS, function_memory_mb=64 + 4, group_size=3, max_functions=6)
    return World(handler, core, InProcessClient(handler), Recorder(cfg, cos=open_cos(tmp_path.as_uri())), Clock())


def _inputs(core: CoreDriver, run: str, size: int = 100) -> None:
    core.put(run, "", "in1", size)
    core.put(run, "", "in2", size)


def test_hello_registers_the_first_group_warms_it_and_sweeps(world: World) -> None:
    f = world.follower()
    assert f.hello() == 3
    assert world.handler.state.stats()["functions"] == {"sion-0": 4, "sion-1": 4, "sion-2": 4}
    assert world.daemon.prewarmed == [3] and f.swept_runs == ["r-old"]
    world.daemon.counters["puts"] = 1           # a daemon that stored something is not swept again
    f.hello()
    assert world.daemon.swept == 1


def test_drops_cos_deletes_run_end_and_release_are_carried_out_and_acknowledged(world: World) -> None:
    core, d = world.core, world.daemon
    f = world.follower()
    f.hello()
    run = core.start(core.key)
    cos_run = core.start(core.key, latency_sensitive=False)
    _inputs(core, run)
    _inputs(core, cos_run)
    d.cos.put(tier_key(cos_run, "in1"), b"x")
    core.delete(run, "in1")
    core.delete(cos_run, "in1")
    core.end(run, "aborted")
    assert f.step() == 0                          # a batch: more may wait
    assert sorted(d.freed) == [f"{run}/in1", f"{run}/in2"]
    assert d.cos.list("tier/") == []              # the COS-tier object went from COS
    assert d.dropped_runs == [run]
    assert any(fn.startswith("sion-") for fn in d.released)   # its functions' blocks all came free
    assert world.pending()                        # carried out, acknowledged by the next fetch
    f.step()
    assert world.pending() == []
    assert f.carried_out == f.done and f.duplicates == 0


def test_an_instruction_delivered_twice_is_carried_out_once(world: World) -> None:
    core, d = world.core, world.daemon
    f = world.follower()
    f.hello()
    run = core.start(core.key)
    _inputs(core, run)
    core.delete(run, "in1")
    world.client.redeliver = True                 # every ack gets lost: everything comes again
    for _ in range(3):
        f.step()
    assert d.freed == [f"{run}/in1"] and f.duplicates >= 1
    world.client.redeliver = False
    f.step()
    assert world.pending() == []


def test_a_restarted_follower_resumes_from_the_last_acknowledged_instruction(world: World) -> None:
    core, d = world.core, world.daemon
    first = world.follower()
    first.hello()
    run = core.start(core.key)
    _inputs(core, run)
    core.delete(run, "in1")
    first.step()
    first.step()                                  # acknowledges the drop of in1
    core.delete(run, "in2")
    first.step()                                  # carries out in2's drop, then dies before its ack
    acked_upto = world.pending()[0] - 1
    assert d.freed == [f"{run}/in1", f"{run}/in2"]
    d.freed.clear()
    second = world.follower()                     # a new daemon process: it knows no seq
    second.hello()
    second.step()
    assert d.freed == [f"{run}/in2"]              # offered again: only what was not acknowledged
    assert second.done > acked_upto
    second.step()
    assert world.pending() == []


def test_an_unreachable_metadata_server_is_retried_with_backoff_and_logged_once_per_interval(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    f = world.follower(backoff_min_s=0.05, backoff_max_s=1.0, log_interval_s=30.0)
    world.client.down = True
    caplog.set_level(logging.WARNING, logger="storage_functions.control")
    waits = []
    for _ in range(8):
        waits.append(f.step())
        world.clock.t += waits[-1]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "cannot reach the metadata server" in warnings[0]
    assert "keeps serving" in warnings[0]
    world.clock.t += 30.0                         # the next interval: one more line, with the count
    f.step()
    assert len(caplog.records) == 2 and "7 more failures" in caplog.records[1].getMessage()
    world.client.down = False
    assert f.step() == f.poll_s                   # connected, nothing to do
    assert f.connected and f.failures == 0
    assert "again after 9 failed rounds" in caplog.records[-1].getMessage()
    assert world.handler.state.stats()["functions"]  # registered once it got through


def test_a_failure_mid_round_changes_nothing_and_the_round_is_redone(world: World) -> None:
    core, d = world.core, world.daemon
    f = world.follower()
    f.hello()
    run = core.start(core.key, latency_sensitive=False)
    _inputs(core, run)
    core.delete(run, "in1")

    class Failing:
        def delete(self, key: str) -> None:
            raise OSError("COS is down")

    cos, d.cos = d.cos, Failing()
    before = f.done
    assert f.step() == f.backoff_min_s
    assert f.done == before and not f.connected
    d.cos = cos
    d.cos.put(tier_key(run, "in1"), b"x")
    f.step()
    assert f.done > before and d.cos.list("tier/") == []


def test_oracle_drops_wait_their_grace_then_are_freed(world: World) -> None:
    core, d = world.core, world.daemon
    f = world.follower(oracle_grace_s=2.0)
    f.hello()
    run = core.start(core.key, policy="oracle")
    _inputs(core, run)
    core.get(run, "F1", "in1")                     # its only declared read: oracle frees it now
    f.step()
    assert d.freed == [] and f.deferred == 1
    assert 0 < f.step() <= 2.0                     # the next round is due when the grace ends
    world.clock.t += 2.0
    f.step()
    assert d.freed == [f"{run}/in1"] and f.deferred == 0


def test_funcstore_releases_evict_at_once_and_the_commit_frees(world: World) -> None:
    # in1's last declared reader has the bytes (read_done): its memory is released, the chunks
    # evicted at once (the reader had them before it said so); the durable copy goes only with
    # the free the commit sends
    core, d = world.core, world.daemon
    f = world.follower(oracle_grace_s=2.0)
    f.hello()
    run = core.start(core.key)
    _inputs(core, run)
    core.get(run, "F1", "in1")                     # its only declared read
    f.step()
    assert d.evicted == [] and d.freed == []       # the reader may still be fetching
    core.read_done(run, "F1", ["in1"])
    f.step()
    assert d.evicted == [f"{run}/in1"] and d.freed == [] and f.deferred == 0
    core.put(run, "F1", "a", 10)                   # F1 commits: in1 goes
    f.step()
    assert d.freed == [f"{run}/in1"] and d.evicted == [f"{run}/in1"]


def test_a_client_get_with_delete_drops_after_the_grace_not_before_its_fetch(world: World) -> None:
    # the client's read freed the ad-hoc object; an immediate drop could beat its own fetch
    core, d = world.core, world.daemon
    f = world.follower(oracle_grace_s=2.0)
    f.hello()
    run = core.start(core.key)
    core.put(run, "", "scratch", 20, adhoc=True)
    assert "scratch" in core.get(run, "", "scratch", delete=True)[0].object
    f.step()
    assert d.freed == [] and f.deferred == 1
    world.clock.t += 2.0
    f.step()
    assert d.freed == [f"{run}/scratch"] and f.deferred == 0


def test_scale_out_registers_whole_groups_up_to_the_pool_and_warms_them(world: World) -> None:
    f = world.follower()
    f.hello()
    core = world.core
    run = core.start(core.key)
    core.put(run, "", "in1", 3 * 4 * BS)          # larger than the registered group holds
    assert world.handler.state.lookup(run, "in1")["placement"].tier == "cos"
    f.step()
    # only the new group is warmed: the first group's sleeping functions get no warm-up
    assert f.groups_registered == 2 and (world.daemon.prewarmed_from[-1], world.daemon.prewarmed[-1]) == (3, 6)
    assert len(world.handler.state.stats()["functions"]) == 6
    warmed = len(world.daemon.prewarmed)
    core.put(run, "", "in2", 100 * BS)            # past the pool: it stops at max_functions
    f.step()
    f.step()
    assert f.groups_registered == 2 and len(world.handler.state.stats()["functions"]) == 6
    assert len(world.daemon.prewarmed) == warmed  # no group added: nothing to warm


def test_hello_checks_the_block_size_and_withdraws_functions_outside_the_pool(world: World,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    world.core.capacity("sion-7", 4)              # left by an earlier daemon with 8+ functions
    f = world.follower()
    f.hello()
    assert "sion-7" not in world.handler.state.stats()["functions"]
    other = Follower(MetadataSource(world.client), Recorder(DaemonConfig(block_size=BS // 2)),  # type: ignore[arg-type]
                     clock=world.clock)
    caplog.set_level(logging.WARNING, logger="storage_functions.control")
    assert other.step() > 0 and not other.connected
    assert "blocks of 1,048,576 bytes, this daemon stores blocks of 524,288" in caplog.records[0].getMessage()


def test_a_metadata_server_that_lost_its_history_is_followed_from_the_start(world: World,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    core, d = world.core, world.daemon
    f = world.follower()
    f.hello()
    f.done = 500                                  # what it acknowledged from the server before
    run = core.start(core.key)
    _inputs(core, run)
    core.delete(run, "in1")
    f.connected = False                           # the connection broke: hello again
    f.step()
    assert d.freed == [f"{run}/in1"]
    assert "lost its history" in caplog.text


def test_a_replaced_metadata_server_is_followed_from_the_start_even_past_the_old_cursor(
        world: World, fig9_path: Path) -> None:
    """A replacement restored from COS may have lost the tail of the old journal and since issued
    other instructions under the same seqs: the follower sees another process (``instance``)
    and follows it from #0, so none of them is skipped as done."""
    core, d = world.core, world.daemon
    f = world.follower()
    f.hello()
    run = core.start(core.key)
    _inputs(core, run)
    core.delete(run, "in1")
    f.step()
    f.step()
    assert f.done >= 1 and d.freed == [f"{run}/in1"]
    d.freed.clear()
    state = MetadataState(block_size=BS, data_chunks=2, parity_chunks=1)
    replacement = MetadataHandler(state, admin_token=ADMIN)    # its history: none of the old seqs
    core2 = CoreDriver(state)
    key = core2.register(fig9_path)  # type: ignore[attr-defined]
    for i in range(3):                            # the capacity the daemon had registered (restored)
        replacement.register_capacity(ADMIN, f"sion-{i}", 4)
    runs = [core2.start(key) for _ in range(3)]
    for r in runs:
        _inputs(core2, r)
        core2.delete(r, "in1")
        core2.delete(r, "in2")
    assert replacement.state.stats()["last_seq"] >= f.done     # not below: "lost its history" does not fire
    world.client.h = replacement
    f.connected = False                           # the connection broke: hello again
    for _ in range(3):
        f.step()
    assert sorted(d.freed) == sorted(f"{r}/{o}" for r in runs for o in ("in1", "in2"))
    assert f.source_changes == 1
