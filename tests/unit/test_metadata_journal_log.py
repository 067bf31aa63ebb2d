"""The journal as an append-only log: one record per group, a torn tail truncated and never
misread, damage in the middle refused, old SQLite journals converted, older field layouts
replayed, and lease-only reads journaled as one coalesced ``Touch`` before the ``Tick``
that reads their clocks, so a replay takes the live server's decisions."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import msgpack
import pytest

from funcsion_rpc import errors as E
from metadata_server import (EVENT_TYPES, BeginPut, FinishPut, Get, Journal, JournalBusy, JournalCorrupt,
                             MetadataHandler, MetadataState, RegisterCapacity, RegisterWorkflow, StartRun, Tick,
                             Touch, token_digest)
from metadata_server._journal_format import HEADER, MAGIC, SCHEMA_KIND, current_schema, encode_record, scan

DATA = Path(__file__).resolve().parents[1] / "data"


def events(n: int, start: int = 0) -> list:
    return [RegisterCapacity(float(i), f"m{i}", f"s{i}", 4) for i in range(start, start + n)]


def replayed(path: Path) -> list:
    with Journal(path) as j:
        return list(j.replay())


def test_one_record_per_append_and_replay_in_order(tmp_path: Path):
    path = tmp_path / "j"
    with Journal(path) as j:
        j.append(events(3))
        j.append(events(1, 3))
        j.append([])                                    # nothing to write: no record
        assert (j.seq, j.groups) == (4, 2)
    found = scan(path.read_bytes())
    assert (found.events, found.records, found.torn) == (4, 3, 0)   # the schema record and two groups
    assert replayed(path) == events(4)
    with Journal(path) as j:                            # reopened: appends follow, seq goes on
        assert j.seq == 4
        j.append(events(1, 4))
    assert replayed(path) == events(5)


@pytest.mark.parametrize("tear", ["half_header", "half_payload", "bad_crc", "zeros"])
def test_a_torn_tail_is_truncated_never_misread(tmp_path: Path, tear: str):
    path = tmp_path / "j"
    with Journal(path) as j:
        j.append(events(2))
    good = path.read_bytes()
    last = encode_record(events(1, 2))
    tail = {"half_header": last[:HEADER.size // 2], "half_payload": last[:-3],
            "bad_crc": last[:-1] + bytes([last[-1] ^ 0xFF]), "zeros": bytes(64)}[tear]
    path.write_bytes(good + tail)
    with Journal(path) as j:
        assert j.truncated == len(tail) and j.seq == 2
        assert list(j.replay()) == events(2)
        j.append(events(1, 7))                          # the next group follows the valid prefix
    assert path.read_bytes().startswith(good)
    assert replayed(path) == events(2) + events(1, 7)


def test_damage_before_the_end_is_refused(tmp_path: Path):
    path = tmp_path / "j"
    with Journal(path) as j:
        for i in range(3):
            j.append(events(1, i))
    body = bytearray(path.read_bytes())
    body[-2 * len(encode_record(events(1))) + HEADER.size + 2] ^= 0xFF   # inside the second group
    path.write_bytes(bytes(body))
    with pytest.raises(JournalCorrupt, match=f"journal {path}: the record at byte .* damaged.*move the file aside"):
        Journal(path)
    assert path.read_bytes() == bytes(body)             # nothing truncated


def test_a_file_that_is_no_journal_is_refused(tmp_path: Path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a journal\n")
    with pytest.raises(JournalCorrupt, match="does not start like a funcsion journal"):
        Journal(path)


def test_sync_off_holds_groups_until_close(tmp_path: Path):
    path = tmp_path / "j"
    j = Journal(path, sync="off")
    size = path.stat().st_size
    j.append(events(2))
    assert path.stat().st_size == size and j.seq == 2
    j.close()
    assert replayed(path) == events(2)


def test_records_of_an_older_field_layout_replay(tmp_path: Path):
    """A journal written before ``Get.delete`` existed, and before ``StartRun`` had its hints."""
    schema = {k: list(v) for k, v in current_schema().items()}
    schema["Get"] = [f for f in schema["Get"] if f != "delete"]
    schema["StartRun"] = ["now", "rid", "workflow_key", "token_digest", "policy", "ttl_s"]
    entries = [["RegisterWorkflow", 1.0, "m1", (DATA / "fig9.wds.json").read_text(), {}, "fig9"],
               ["RegisterCapacity", 1.0, "m2", "s0", 8],
               ["StartRun", 2.0, "m3", "fig9/9", token_digest("t"), "funcstore", 60.0],
               ["BeginPut", 3.0, "m4", "r-1", "", "in1", 10, "x", False, False],
               ["FinishPut", 3.0, "m5", "r-1", "", "in1"],
               ["Get", 4.0, "m6", "r-1", "F1", "in1"]]

    def record(payload: bytes, count: int) -> bytes:
        import struct
        import zlib
        head = struct.pack("<II", len(payload), count)
        return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + payload

    path = tmp_path / "old"
    path.write_bytes(MAGIC + record(msgpack.packb([SCHEMA_KIND, schema]), 0)
                     + record(msgpack.packb(entries), len(entries)))
    got = replayed(path)
    assert got[-1] == Get(4.0, "m6", "r-1", "F1", "in1", False)
    assert got[2] == StartRun(2.0, "m3", "fig9/9", token_digest("t"), "funcstore", 60.0)
    schema["Get"].append("shiny_new_field")
    entries[-1].append(1)
    path.write_bytes(MAGIC + record(msgpack.packb([SCHEMA_KIND, schema]), 0)
                     + record(msgpack.packb(entries), len(entries)))
    with pytest.raises(JournalCorrupt, match="Get events in this journal have fields this version does not know: "
                                             "shiny_new_field"):
        replayed(path)


# -- the journal of the version before: SQLite ---------------------------------------------
def sqlite_events(path: Path) -> list:
    db = sqlite3.connect(path)
    try:
        return [EVENT_TYPES[k](**json.loads(b)) for k, b in db.execute("SELECT kind, body FROM events ORDER BY seq")]
    finally:
        db.close()


def test_a_sqlite_journal_of_the_previous_version_is_converted(tmp_path: Path):
    """``sqlite-journal-v0.db`` was written by the SQLite journal (``make_sqlite_journal.py``)."""
    path = tmp_path / "metadata.journal"
    shutil.copy(DATA / "sqlite-journal-v0.db", path)
    os.chmod(path, 0o640)
    want = sqlite_events(path)
    assert len(want) == 18
    with Journal(path) as j:
        assert (j.converted, j.migrated, j.seq) == (18, 0, 18)
        assert list(j.replay()) == want
        h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="adm")
        assert h.state.authorize("r-1", "tok-1").run_id == "r-1"
        with pytest.raises(E.Unauthorized):
            h.state.authorize("r-1", "tok-2")
        a = h.state.runs["r-1"].objects["a"]
        assert (a.state, a.remaining, a.committed_by) == ("readable", 2, [])
        assert h.state.runs["r-2"].state == "ended" and h.state.runs["r-2"].outcome == "failed"
        assert h.state.runs["r-1"].buffers == {"F3": {"a": None}}   # F2 reads "a" undeclared
        h.state.validate_state()
        j.append(events(1, 100))                        # the converted journal takes new groups
    assert path.read_bytes().startswith(MAGIC)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640   # the operator's file keeps its mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.journal"]
    assert replayed(path) == want + events(1, 100)
    with Journal(path) as j:
        assert j.converted == 0


def test_a_conversion_cut_short_starts_over(tmp_path: Path):
    path = tmp_path / "metadata.journal"
    shutil.copy(DATA / "sqlite-journal-v0.db", path)
    Path(f"{path}.converting").write_bytes(MAGIC + b"\x07\x00")          # a crash while converting
    with Journal(path) as j:
        assert j.converted == 18
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.journal"]


# -- lease-only reads ------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_lease_only_reads_are_touches_and_replay_takes_the_same_lease_decisions(tmp_path: Path):
    """Under a 10 s lease, 'in1' is kept alive by repeated reads only; a tick frees 'in2' (idle
    past its lease) but not 'in1'. The repeated reads are not journaled one by one, yet the
    replay frees exactly what the live server freed."""
    path = tmp_path / "j"
    clock = Clock()
    j = Journal(path)
    h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="a", clock=clock)
    h.apply([RegisterWorkflow(clock(), "1", (DATA / "fig9.wds.json").read_text(), {}, "fig9"),
             RegisterCapacity(clock(), "2", "s0", 8),
             StartRun(clock(), "3", "fig9/9", token_digest("t"), "jiffy:10000", 3600.0)])
    for o in ("in1", "in2"):
        h.apply([BeginPut(clock(), "4", "r-1", "", o, 10, "x", False), FinishPut(clock(), "5", "r-1", "", o)])
    h.get("t", "r-1", "F1", "in1", False)               # a first read: recorded, journaled
    seq = j.seq
    for dt in (4.0, 8.0, 12.0):
        clock.t = 1000.0 + dt
        assert h.get("t", "r-1", "F1", "in1", False).recorded is False   # a repeat: lease only
    assert j.seq == seq                                 # not journaled
    clock.t = 1015.0
    h.tick()                                            # frees in2 (idle 15 s), keeps in1 (read at 12 s)
    live = {o: r.state for o, r in h.state.runs["r-1"].objects.items()}
    assert live == {"in1": "readable", "in2": "freed"}
    j.close()
    with Journal(path) as j2:
        h2 = MetadataHandler(MetadataState(block_size=1000), journal=j2, admin_token="a", clock=clock)
        assert {o: r.state for o, r in h2.state.runs["r-1"].objects.items()} == live
        assert h2.state.runs["r-1"].objects["in1"].last_access == 1012.0
        assert h2.state.runs["r-1"].last_activity == h.state.runs["r-1"].last_activity
        h2.state.validate_state()
        kinds = [type(e).__name__ for e in j2.replay()][-2:]
        assert kinds == ["Touch", "Tick"]               # the touches first, then the tick that read them
        touch = next(e for e in j2.replay() if isinstance(e, Touch))
        assert touch.runs == {"r-1": 1012.0} and touch.objects == {"r-1": {"in1": 1012.0}}


def test_reads_that_change_the_state_are_journaled_and_nothing_else_is(tmp_path: Path):
    clock = Clock()
    with Journal(tmp_path / "j") as j:
        h = MetadataHandler(MetadataState(block_size=1000), journal=j, admin_token="a", clock=clock)
        h.apply([RegisterWorkflow(clock(), "1", (DATA / "fig9.wds.json").read_text(), {}, "fig9"),
                 RegisterCapacity(clock(), "2", "s0", 8),
                 StartRun(clock(), "3", "fig9/9", token_digest("t"), "funcstore:commit", 3600.0),
                 BeginPut(clock(), "4", "r-1", "", "in1", 10, "x", False), FinishPut(clock(), "5", "r-1", "", "in1")])
        seq = j.seq
        # funcstore:commit: under funcstore a repeat of an object's last declared read marks the
        # reader as fetching again (its read_done releases the memory), which is journaled
        h.get_batch("t", "r-1", "F1", ["in1", "in1"])   # the first records, the second repeats
        h.get("t", "r-1", "", "in1", False)             # the client reads: no reader, lease only
        kinds = [type(e).__name__ for e in j.replay()][seq:]
        assert kinds == ["Get"] and j.seq == seq + 1
        clock.t += 1
        h.tick()                                        # changes nothing but journals the touches
        assert [type(e).__name__ for e in j.replay()][seq + 1:] == ["Touch"]
        h.tick()                                        # no new touches: nothing more
        assert j.seq == seq + 2
        assert not any(isinstance(e, Tick) for e in j.replay())


def test_one_writer_per_journal(tmp_path: Path):
    path = tmp_path / "j"
    with Journal(path) as j:
        with pytest.raises(JournalBusy, match=f"journal {path} is open already"):
            Journal(path)
        j.append(events(1))
    with Journal(path) as j:                            # closed: the next server may open it
        assert j.seq == 1
