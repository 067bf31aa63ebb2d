"""Local recovery: a storage function whose instance is killed gets back every chunk the
metadata server placed on it (slices and erasure-coded chunks, from the buffer or COS), GETs
read from memory again afterwards, and an object freed meanwhile is not resurrected. The
storage-chaos word count runs on a TLS stack as well (every connection TLS, certificates from
``funcsion certs``' code): an instance killed mid-TLS-connection is handled as a plaintext one."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk._store_client import StoreClient
from sdk.local._stack import Stack

HERE = Path(__file__).parent
LIFETIME = HERE / "lifetimewf" / "lifetime.wds.json"
MiB = 1 << 20


def _holders(stack: Stack, run_id: str) -> dict[str, set[str]]:
    """function -> chunk keys of the run it holds, asked of the functions."""
    d = stack.store.daemon
    return {h.name: set(d.function_memory(h.name, run_id)["entries"]) for h in list(d.handles)}


def _kill_and_reattach(stack: Stack, name: str) -> None:
    """SIGKILL the instance of ``name`` and make a new one answer (a ping invokes it)."""
    d = stack.store.daemon
    lost = d.counters["lost_functions"]
    stack.platform.kill(name)
    deadline = time.monotonic() + 20
    while d.counters["lost_functions"] == lost and time.monotonic() < deadline:
        try:
            d.function_memory(name, timeout_s=2)
        except Exception:  # noqa: BLE001 - the old connection is going away; ask the next instance
            pass
    assert d.counters["lost_functions"] > lost, "no new instance answered"


def test_a_killed_function_gets_its_chunks_back_and_gets_read_memory_again(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    big = os.urandom(3 * MiB)
    run.put("seed", big)                                   # 12 chunks, one per function
    writer = run.bind(function="writer")
    writer.put("short", b"s" * 50_000)                     # one slice each
    writer.put("long", b"l" * 70_000)
    before = _holders(stack, run.run_id)
    victim = next(n for n, keys in before.items() if any(k.endswith("/short") for k in keys))
    assert len(before[victim]) >= 2                        # a slice and a coded chunk at least
    recovered = d.counters.get("chunks_recovered", 0)
    _kill_and_reattach(stack, victim)
    assert d.recovery.wait_idle(30)
    assert d.counters.get("chunks_recovered", 0) - recovered == len(before[victim])
    assert _holders(stack, run.run_id)[victim] == before[victim]   # every chunk is back where it was
    assert d.memory()["functions"][victim]["ledger_bytes"] > 0
    fallbacks = d.counters["cos_fallbacks"]
    a = run.bind(function="a")
    assert a.get("short") == b"s" * 50_000
    assert run.bind(function="c").get("long") == b"l" * 70_000
    with StoreClient(stack.store.address, stack.store.token) as store:   # the coded object, whole
        assert bytes(store.get(f"{run.run_id}/seed"))[1:] == big
    assert d.counters["cos_fallbacks"] == fallbacks        # from memory, not COS
    run.end_run("aborted")
    run.close()
    driver.close()


def test_recovery_never_resurrects_a_freed_object(stack: Stack) -> None:
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    run.put("seed", b"x" * 1000)
    victim = next(n for n, keys in _holders(stack, run.run_id).items() if keys)
    key = f"{run.run_id}/seed"
    real = d.recovery.lost
    d.recovery.lost = lambda *a: (d.free([key]), real(*a))   # freed just as recovery starts
    try:
        _kill_and_reattach(stack, victim)
        assert d.recovery.wait_idle(30)
    finally:
        d.recovery.lost = real
    assert not any(k.endswith("/seed") for k in _holders(stack, run.run_id)[victim])
    run.end_run("aborted")
    run.close()
    driver.close()


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from sdk._config import Config
    from sdk.cli.certs_cmd import make_certs

    certs = make_certs(tmp_path_factory.mktemp("certs"), ["127.0.0.1"])
    cfg = Config.load(state_dir=str(tmp_path_factory.mktemp("tls-state")), env={}, tls_cert=str(certs["server.pem"]),
                      tls_key=str(certs["server.key"]), tls_ca=str(certs["ca.pem"]))
    with Stack(cfg, metadata_port=0, daemon_port=0) as st:
        assert st.endpoints.tls_ca and st.store.daemon._tls_edge is not None and st.metadata_server.tls
        yield st


@pytest.mark.parametrize("wire", ["plain", "tls"])
def test_word_count_under_storage_chaos_is_right_and_recovers(wire: str, request: pytest.FixtureRequest) -> None:
    """`funcsion run --kill-storage-rate 0.2`: instances holding chunks are SIGKILLed during the
    run; no handler sees an error, the output is right, nothing leaks, chunks were recovered. 32 mappers
    and 16 reducers, half the instances holding chunks killed each 100 ms round: with warm task workers
    and packed uploads the default 4 x 2 run ends in ~0.3 s and 16 x 8 in about a second, whose chaos
    rounds often found nothing to recover; this one holds data for a few seconds."""
    from dataclasses import replace

    from pydoc_data.topics import topics

    from sdk.local._executor import ExecutorOptions
    from sdk.local._run import run_workflow
    from tests.integration.test_wordcount_e2e import WC, expected_counts, output

    stack: Stack = request.getfixturevalue("stack" if wire == "plain" else "tls_stack")

    report = run_workflow(WC, config=replace(stack.config, kill_storage_rate=0.5), stack=stack,
                          params={"mappers": 32, "reducers": 16}, options=ExecutorOptions(progress=False, seed=7))
    assert report.status == "succeeded", report.error
    retried = {k: (t["attempts"], [e.get("error") for e in t["errors"]])
               for k, t in report.tasks.items() if t["attempts"] != 1 or t["errors"]}
    assert not retried, retried  # which task saw which error
    text = "\n\n".join(topics[k] for k in sorted(topics))
    assert output(stack, report, "word_counts") == expected_counts(text)
    assert report.memory["leaked_bytes"] == 0
    assert report.recovery["functions_lost"] > 0 and report.recovery["chunks_recovered"] > 0, report.recovery


def test_an_object_freed_while_its_function_was_down_is_neither_restored_nor_uploaded(stack: Stack) -> None:
    """The function's log in COS still lists the freed chunk; recovery reads the log and
    skips it (the table has no live version), and no COS copy of it appears."""
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    run.put("seed", b"y" * 2000)
    victim = next(n for n, keys in _holders(stack, run.run_id).items() if keys)
    h = d._by_name[victim]
    deadline = time.monotonic() + 30
    while h.state != "sleeping" and time.monotonic() < deadline:   # its invocation ended: the log is sealed
        time.sleep(0.05)
    assert h.state == "sleeping" and h.term > 0
    key = f"{run.run_id}/seed"
    reads, skipped = d.counters.get("manifest_reads", 0), d.counters.get("recovery_skipped_freed", 0)
    stack.platform.kill(victim)
    d.free([key])                                                   # the delete waits for the next instance
    _kill_and_reattach(stack, victim)
    assert d.recovery.wait_idle(30)
    assert d.counters.get("manifest_reads", 0) > reads
    assert d.counters.get("recovery_skipped_freed", 0) > skipped
    assert not any(k.endswith("/seed") for k in _holders(stack, run.run_id)[victim])
    assert d.wait_uploads(30)
    assert not [k for k in d.cos.list(f"{d.config.cos_prefix}/objects/") if "seed" in k]
    run.end_run("aborted")
    run.close()
    driver.close()


def test_a_get_does_not_wait_for_a_killed_function_when_enough_others_are_up(stack: Stack) -> None:
    """First-d with a function down: its chunk is asked last, so the GET neither invokes it
    (a cold start) nor waits for it while d functions holding the object are connected."""
    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    big = os.urandom(3 * MiB)
    run.put("seed", big)
    key = f"{run.run_id}/seed"
    with StoreClient(stack.store.address, stack.store.token) as store:
        assert bytes(store.get(key))[1:] == big                  # every holder is connected now
        obj = d.table.latest(key)
        assert obj is not None
        victim = d.handles[obj.stripes[0].places[0][0]]           # holds data chunk 0
        stack.platform.kill(victim.name)
        deadline = time.monotonic() + 10
        while victim.state == "active" and time.monotonic() < deadline:   # the daemon sees the connection go
            time.sleep(0.01)
        assert victim.state != "active"
        invocations = victim.invocations
        assert bytes(store.get(key))[1:] == big
        assert victim.invocations == invocations
    run.end_run("aborted")
    run.close()
    driver.close()


def test_instances_killed_at_once_are_each_counted_lost(stack: Stack) -> None:
    """The report's ``recovery.functions_lost`` once said 1 when 4 instances were killed at once:
    it counted only new instances that found placed chunks missing, when they were next
    invoked. It counts instances lost: each killed instance once, when its connection goes
    without a BYE, and not again when a new instance answers in its place."""
    from sdk.local._report import recovery_figures

    d = stack.store.daemon
    driver = stack.client()
    run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
    run.put("seed", os.urandom(3 * MiB))                   # 12 chunks, one per function
    with StoreClient(stack.store.address, stack.store.token) as store:
        before = store.stats()
    holders = [n for n, keys in _holders(stack, run.run_id).items() if keys]   # asked: each is active now
    victims = [d._by_name[n] for n in holders if d._by_name[n].state == "active"][:4]
    assert len(victims) == 4
    t0 = time.monotonic()
    for h in victims:
        stack.platform.kill(h.name)                        # all four before any is asked again
    for h in victims:
        with h.cond:
            assert h.cond.wait_for(lambda h=h: h.last_died >= t0, timeout=20), f"{h.name}'s connection stayed"
    with StoreClient(stack.store.address, stack.store.token) as store:
        assert recovery_figures(before, store.stats())["functions_lost"] == 4
    for h in victims:                                      # new instances answer: the same 4 losses
        d.function_memory(h.name, timeout_s=20)
    assert d.recovery.wait_idle(30)
    with StoreClient(stack.store.address, stack.store.token) as store:
        assert recovery_figures(before, store.stats())["functions_lost"] == 4
    run.end_run("aborted")
    run.close()
    driver.close()
