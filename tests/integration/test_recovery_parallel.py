"""Parallel recovery (SION Sec. 5.5.2) and faults during recovery, on the embedded stack with a
modelled per-instance bandwidth (so the storage function's own recovery takes seconds while
a recovery group's share takes a fraction): GETs of missing chunks are rerouted to the group's
copies, service returns to the storage function, the copies go after ``recovery_keep_s``, and
a storage or recovery function killed meanwhile neither loses data nor fails a GET."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from sdk._config import Config
from sdk.local._stack import Stack

from .test_recovery import LIFETIME, _holders, _kill_and_reattach

pytestmark = pytest.mark.slow

KiB = 1 << 10
SLICES = 24           # single-slice objects: only a copy or COS can serve them while their function recovers
SLICE = 40 * KiB


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("state")), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0,
               daemon={"parallel_recovery_threshold": 4, "parallel_recovery_min_mb": 0, "recovery_group_size": 3, "recovery_keep_s": 1.0,
                       "recover_workers": 2, "function_bandwidth_mbps": 0.4}) as st:
        yield st


def _fill(stack: Stack) -> tuple[object, object, dict[str, bytes], str]:
    """A run with many single-slice objects; returns (driver, run, key -> value, the function
    holding most of them)."""
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    values = {f"obj{i:02d}": os.urandom(SLICE) for i in range(SLICES)}
    for k, v in values.items():
        run.put(k, v, adhoc=True)
    assert stack.store.daemon.wait_uploads(30)             # in COS: the functions download them themselves
    held = _holders(stack, run.run_id)
    victim = max(held, key=lambda n: len(held[n]))
    assert len(held[victim]) > 4, held                      # above the parallel threshold
    return driver, run, values, victim


def _read_all(stack: Stack, run: object, values: dict[str, bytes]) -> None:
    reader = run.bind(function="a")  # type: ignore[attr-defined]
    for k, v in values.items():
        assert bytes(reader.get(k)) == v, k


def _end(run: object, driver: object) -> None:
    run.end_run("aborted")  # type: ignore[attr-defined]
    run.close()  # type: ignore[attr-defined]
    driver.close()  # type: ignore[attr-defined]


def test_a_recovery_group_serves_the_missing_chunks_then_hands_back(stack: Stack) -> None:
    d = stack.store.daemon
    driver, run, values, victim = _fill(stack)
    fn = d._by_name[victim].index
    before = _holders(stack, run.run_id)[victim]
    c0 = dict(d.counters)
    _kill_and_reattach(stack, victim)
    assert d.recovery.wait_servable(fn, 30)                 # every lost chunk has a copy somewhere
    assert d.recovery.stats()["open"] > 0, "the storage function finished before the group: no window"
    members = [d._by_name[n] for n in d.recovery.stats()["groups"][victim]]
    _read_all(stack, run, values)
    assert d.counters["cos_fallbacks"] == c0["cos_fallbacks"]          # copies, not COS
    assert d.counters.get("rerouted_gets", 0) > c0.get("rerouted_gets", 0)
    assert d.counters.get("parallel_recoveries", 0) == c0.get("parallel_recoveries", 0) + 1
    assert d.recovery.wait_idle(60)
    assert _holders(stack, run.run_id)[victim] == before    # service returns to the storage function
    deadline = time.monotonic() + 20                        # ... then its copies are deleted
    while time.monotonic() < deadline and d.recovery.stats()["routes"]:
        time.sleep(0.05)
    assert d.recovery.stats()["routes"] == 0
    for h in members:                                        # no member keeps a copy of the victim's chunks
        deadline = time.monotonic() + 10
        while _holders(stack, run.run_id)[h.name] & before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _holders(stack, run.run_id)[h.name] & before, h.name
    _end(run, driver)


def test_a_storage_function_killed_during_its_recovery_still_gets_everything_back(stack: Stack) -> None:
    d = stack.store.daemon
    driver, run, values, victim = _fill(stack)
    fn = d._by_name[victim].index
    before = _holders(stack, run.run_id)[victim]
    _kill_and_reattach(stack, victim)
    deadline = time.monotonic() + 30
    while d.recovery.stats()["open"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert d.recovery.stats()["open"] > 0
    _kill_and_reattach(stack, victim)                       # again, mid-recovery
    _read_all(stack, run, values)                           # no GET fails meanwhile
    assert d.recovery.wait_idle(90)
    assert d.recovery.wait_servable(fn, 1)
    assert _holders(stack, run.run_id)[victim] == before
    _read_all(stack, run, values)
    _end(run, driver)


def test_a_recovery_function_killed_loses_only_copies(stack: Stack) -> None:
    d = stack.store.daemon
    driver, run, values, victim = _fill(stack)
    fn = d._by_name[victim].index
    before = _holders(stack, run.run_id)[victim]
    _kill_and_reattach(stack, victim)
    assert d.recovery.wait_servable(fn, 30)
    member = d.recovery.stats()["groups"][victim][0]
    _kill_and_reattach_any(stack, member)
    _read_all(stack, run, values)                           # its copies are gone: first-d, COS or wait
    assert d.recovery.wait_idle(90)
    assert _holders(stack, run.run_id)[victim] == before
    _end(run, driver)


def _kill_and_reattach_any(stack: Stack, name: str) -> None:
    """Kill ``name`` (a recovery function, whose loss is of copies only) and let a new instance answer."""
    d = stack.store.daemon
    h = d._by_name[name]
    old = h.instance
    stack.platform.kill(name)
    deadline = time.monotonic() + 20
    while h.instance == old and time.monotonic() < deadline:
        try:
            d.function_memory(name, timeout_s=2)
        except Exception:  # noqa: BLE001 - the old connection is going away
            pass
    assert h.instance != old

