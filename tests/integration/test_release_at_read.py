"""funcstore on the real path: an object's function memory goes at its last declared read (the
storage functions stop holding its chunks), a reader re-run after that read still reads the
right bytes (from the durable copy), the last reader's commit frees the object, and a run
leaves nothing of its own in COS but its outputs."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from sdk._config import Config
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack
from storage_functions.cos import open_cos
from storage_functions.daemon._server import Daemon

LIFETIME = Path(__file__).parent / "lifetimewf" / "lifetime.wds.json"
WC = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


def _held(d: Daemon, key: str) -> int:
    """Bytes of ``key``'s chunks the storage functions hold (the daemon's ledger)."""
    with d._state_lock:
        return sum(e.length for (_, ckey), e in d.ledger.entries.items() if ckey.endswith("/" + key))


def _run_keys(stack: Stack, run_id: str) -> list[str]:
    """COS keys of the run, anywhere in the stack's COS (the daemon's object copies and packs,
    the SDK's tier and persisted copies), but its outputs."""
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        return [k for k in cos.list("") if (run_id + "/" in k or quote(run_id + "/", safe="") in k)
                and not k.startswith(f"outputs/{run_id}/")]
    finally:
        cos.close()


def test_memory_goes_at_the_last_read_and_a_rerun_reader_reads_the_durable_copy(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        assert stack.follower is not None
        stack.follower.close()                      # no drop reaches the daemon but the clients'
        d = stack.store.daemon
        driver = stack.client()
        run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
        key = f"{run.run_id}/short"
        run.put("seed", b"x" * 10)
        writer = run.bind(function="writer")
        assert writer.get("seed") == b"x" * 10
        short = os.urandom(3 << 20)                 # erasure-coded: chunks on several functions
        writer.put("short", short)
        writer.put("long", b"l" * 50_000)
        assert _held(d, key) > len(short)           # its chunks, parity too
        assert d.wait_uploads(60)                   # its COS copy landed; the buffer let it go
        a = run.bind(function="a")
        assert a.get("short") == short              # its only declared read: the memory goes
        assert _held(d, key) == 0 and d.table.latest(key) is not None
        assert run.lookup("short").released_at
        cos_gets = d.counters["gets_from_cos"]
        rerun = driver.bind(run_id=run.run_id, token=run.token, function="a")   # a crashed after its read
        assert rerun.get("short") == short          # ... and reads again: from the durable copy
        assert d.counters["gets_from_cos"] == cos_gets + 1
        assert _held(d, key) == 0
        rerun.put("mid", b"m" * 10)                 # a's last output: short's last reader commits
        assert d.table.latest(key) is None
        assert d.wait_uploads(60)                   # COS deletes are done
        assert not [k for k in _run_keys(stack, run.run_id) if quote(key, safe="") in k]
        run.end_run("aborted")
        d.drop_run(run.run_id)                      # what the control loop does at a run's end
        assert d.wait_uploads(60)
        assert _run_keys(stack, run.run_id) == []   # nothing of the run is left in COS
        rerun.close()
        run.close()
        driver.close()


def _counts(text: str) -> dict[str, int]:
    return dict(Counter(re.findall(r"[a-z0-9']+", text.lower())))


def test_a_reducer_crashed_after_its_reads_reruns_on_the_released_inputs(stack: Stack, tmp_path: Path) -> None:
    text = ("the quick brown fox jumps over the lazy dog\n" * 400 + "It's a dog's life\n" * 60) * 2
    src = tmp_path / "book.txt"
    src.write_text(text)
    evicted = stack.store.daemon.counters.get("evicted_versions", 0)
    report = run_workflow(WC, config=stack.config, stack=stack, inputs={"raw_text": str(src)},
                          options=ExecutorOptions(crash={"reducer_00": "after_read"}, retry_interval_s=0.05,
                                                  progress=False))
    assert report.status == "succeeded", report.error
    assert report.tasks["reducer_00"]["attempts"] == 2
    assert "process ended" in report.tasks["reducer_00"]["errors"][0]["error"]
    cos = open_cos(stack.config.resolved_cos_url)
    try:
        assert json.loads(cos.get(f"outputs/{report.run_id}/word_counts")) == _counts(text)
    finally:
        cos.close()
    d = report.to_dict()
    for name, obj in d["objects"].items():
        if not obj["declared_reads"] or obj["tier"] != "memory" or not obj["size"]:
            continue
        readers = [d["tasks"][t] for t in obj["reads"]]
        assert len(readers) == obj["declared_reads"], name
        # released at the last read, before the last reader committed; freed by that commit
        assert obj["written_at"] <= obj["released_at"] <= obj["freed_at"], (name, obj)
        assert obj["freed_at"] == max(t["committed_at"] for t in readers), (name, obj)
        assert obj["freed_reason"] == "committed"
    inputs_00 = [n for n in d["objects"] if n.endswith("_00") and n.startswith("counts_")]
    crashed = d["tasks"]["reducer_00"]["tries"][0]["finished_at"] if d["tasks"]["reducer_00"]["tries"] else None
    if crashed is not None:                         # its first attempt's read released one of them
        assert min(d["objects"][n]["released_at"] for n in inputs_00) <= crashed
    assert stack.store.daemon.counters.get("evicted_versions", 0) > evicted
    assert report.memory["leaked_bytes"] == 0
    stack.drain()
    assert stack.store.daemon.wait_uploads(60)
    assert _run_keys(stack, report.run_id) == []


def test_on_two_daemons_a_rerun_reader_reads_released_inputs_from_their_own_daemon(tmp_path: Path) -> None:
    """With several daemons a released object's placement still names its daemon (it holds the
    durable copy): reducer_00 crashes after its reads, its re-run reads them from the daemons
    that evicted them, and nothing is leaked."""
    text = ("the quick brown fox jumps over the lazy dog\n" * 400 + "It's a dog's life\n" * 60) * 2
    src = tmp_path / "book.txt"
    src.write_text(text)
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0, daemons=2) as stack:
        report = run_workflow(WC, config=stack.config, stack=stack, inputs={"raw_text": str(src)},
                              params={"mappers": 4, "reducers": 3},
                              options=ExecutorOptions(crash={"reducer_00": "after_read"}, retry_interval_s=0.05,
                                                      progress=False))
        assert report.status == "succeeded", report.error
        assert report.tasks["reducer_00"]["attempts"] == 2
        cos = open_cos(stack.config.resolved_cos_url)
        try:
            assert json.loads(cos.get(f"outputs/{report.run_id}/word_counts")) == _counts(text)
        finally:
            cos.close()
        d = report.to_dict()
        released = {o["daemon"] for o in d["objects"].values() if o.get("released_at") is not None}
        assert released == {"daemon-0", "daemon-1"}, released
        assert all(s.daemon.counters.get("evicted_versions", 0) > 0 for s in stack.stores)
        assert report.memory["leaked_bytes"] == 0
