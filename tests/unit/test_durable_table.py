"""The daemon's durable table log (``storage_functions.daemon._durable``) and the
records ``_restore`` keeps of a version: framing, a torn tail, replay, compaction.
Plain files, no sockets."""

from __future__ import annotations

import os
from pathlib import Path

from storage_functions.daemon._durable import DurableLog, frame, read_frames, replay
from storage_functions.daemon._objects import ObjectVersion, Stripe
from storage_functions.daemon._restore import version_from_record, version_record


def _put(key: str, v: int = 1) -> dict:
    return {"o": "put", "k": key, "v": v, "m": {"size": 3, "cos_key": f"sion/{key}/{v}", "alloc": None,
                                                 "stripes": []}}


def test_replay_follows_puts_uploads_and_frees() -> None:
    img = replay([{"o": "start", "n": 1}, _put("a"), _put("a", 2), _put("b"), {"o": "up", "k": "a", "v": 2},
                  {"o": "free", "k": ["b", "never-stored"]}, {"o": "up", "k": "b", "v": 1}, {"o": "what?"}])
    assert sorted((k, v, m["uploaded"]) for k, v, m in img.versions()) == [("a", 1, False), ("a", 2, True)]
    assert img.starts == 1


def test_an_eviction_record_takes_the_places_and_keeps_the_version() -> None:
    placed = {"o": "put", "k": "a", "v": 1, "m": {"size": 600, "cos_key": "sion/a/1", "alloc": [[0, 0, 0, 300]],
                                                   "stripes": [{"d": 2, "p": 1, "fs": 300, "ol": 600, "cl": 300,
                                                                "crcs": [1, 2, 3],
                                                                "places": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}]}}
    img = replay([placed, _put("b"), {"o": "ev", "k": ["a", "gone"]}])
    meta = img.live["a"][1]
    assert meta["stripes"][0]["places"] == [None, None, None] and img.count() == 2
    obj = version_from_record("a", 1, meta)                     # restored readable, holding no memory
    assert obj.state == "ready" and obj.stripes[0].places == [None, None, None]
    assert replay(list(img.records())).live["a"][1]["stripes"][0]["places"] == [None, None, None]   # compacted


def test_a_move_record_gives_the_version_its_new_allocation_and_places() -> None:
    placed = {"o": "put", "k": "a", "v": 1, "m": {"size": 600, "cos_key": "sion/a/1", "alloc": [[0, 0, 0, 300]] * 3,
                                                   "stripes": [{"d": 2, "p": 1, "fs": 300, "ol": 600, "cl": 300,
                                                                "crcs": [1, 2, 3],
                                                                "places": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}]}}
    moved = {"o": "mv", "k": "a", "v": 1, "a": [[3, 0, 0, 300], [1, 0, 0, 300], [2, 0, 0, 300]],
             "p": [[[3, 0, 0], [1, 0, 0], [2, 0, 0]]]}
    img = replay([placed, {"o": "up", "k": "a", "v": 1}, moved, {"o": "mv", "k": "gone", "v": 1, "a": [], "p": []}])
    meta = img.live["a"][1]
    assert meta["uploaded"] and meta["alloc"][0] == [3, 0, 0, 300]
    obj = version_from_record("a", 1, meta)                     # restored where the move put it
    assert obj.stripes[0].places == [(3, 0, 0), (1, 0, 0), (2, 0, 0)] and obj.alloc is not None
    assert replay(list(img.records())).live["a"][1]["stripes"][0]["places"][0] == [3, 0, 0]   # compacted


def test_a_batch_upload_record_and_the_live_count() -> None:
    img = replay([_put("a"), _put("a", 2), _put("b"), _put("c"), _put("a", 2),
                  {"o": "ups", "kv": [["a", 2], ["c", 1], ["gone", 1], "bad"]}, {"o": "free", "k": ["b"]}])
    assert sorted((k, v, m["uploaded"]) for k, v, m in img.versions()) == [("a", 1, False), ("a", 2, True),
                                                                         ("c", 1, True)]
    assert img.count() == 3 == sum(len(vs) for vs in img.live.values())


def test_a_torn_tail_is_cut_and_appends_go_after_the_last_whole_record(tmp_path: Path) -> None:
    path = str(tmp_path / "t.log")
    with open(path, "wb") as fh:
        fh.write(frame({"o": "start", "n": 1}) + frame(_put("a")) + frame(_put("b"))[:-3])
    lg = DurableLog(path)
    img = lg.open()
    assert [k for k, _, _ in img.versions()] == ["a"]
    assert lg.torn_bytes > 0 and lg.earlier_starts == 1
    lg.append(_put("c"))
    lg.close()
    recs, good = read_frames(Path(path).read_bytes())
    assert good == os.path.getsize(path)
    assert [r.get("k") for r in recs if r["o"] == "put"] == ["a", "c"]
    third = DurableLog(path)
    third.open()
    assert third.earlier_starts == 2


def test_a_corrupt_record_ends_the_log() -> None:
    good = frame(_put("a"))
    bad = bytearray(frame(_put("b")))
    bad[-2] ^= 0xFF
    recs, n = read_frames(good + bytes(bad) + frame(_put("c")))
    assert [r["k"] for r in recs] == ["a"] and n == len(good)


def test_compaction_keeps_the_live_image(tmp_path: Path) -> None:
    path = str(tmp_path / "t.log")
    lg = DurableLog(path, compact_factor=2, compact_min=8)
    lg.open()
    for i in range(40):
        lg.append(_put(f"k{i}"))
        if i % 3 == 0:
            lg.append({"o": "up", "k": f"k{i}", "v": 1})
        if i % 2 == 0:
            lg.append({"o": "free", "k": [f"k{i}"]})
    assert lg.compactions >= 1
    before = {(k, v, m["uploaded"]) for k, v, m in lg.image.versions()}
    lg.close()
    again = DurableLog(path)
    img = again.open()
    assert {(k, v, m["uploaded"]) for k, v, m in img.versions()} == before
    assert len(before) == 20 and again.earlier_starts == 1
    assert again.records < 60  # 75 appended


def test_a_version_round_trips_through_its_record() -> None:
    obj = ObjectVersion("r-1/x", 3, size=10, cos_key="sion/objects/k-r-1%2Fx/00000003",
                        stripes=[Stripe(2, 1, 5, 10, 5, [1, 2, 3], [(0, 4, 0), None, (2, 4, 16)], 0)],
                        alloc=[("sion-0", 4, 0, 5), ("sion-1", 4, 0, 5), ("sion-2", 4, 16, 5)], readers=48)
    back = version_from_record(obj.key, obj.version, version_record(obj))
    assert back.readers == 48  # a restarted daemon still readies a broadcast's copies
    assert back.meta() == obj.meta() and back.head() == obj.head()
    assert back.stripes[0].places == obj.stripes[0].places and back.alloc == obj.alloc
    assert back.state == "ready"


def test_a_pack_record_places_its_live_versions_and_settles_its_delete() -> None:
    img = replay([_put("a"), _put("b"), _put("c"), {"o": "dq", "c": ["P"]}, {"o": "free", "k": ["c"]},
                  {"o": "pk", "c": "P", "kv": [["a", 1, 0], ["b", 1, 60], ["c", 1, 120], ["zz"]]}])
    live = {k: m for k, _, m in img.versions()}
    assert live["a"]["pack"] == ["P", 0] and live["b"]["pack"] == ["P", 60] and live["a"]["uploaded"]
    assert img.deletes == set()  # it landed with live versions: not to delete
    back = version_from_record("b", 1, live["b"])
    assert back.pack == ("P", 60)


def test_a_pack_none_of_whose_versions_lives_stays_to_delete() -> None:
    img = replay([_put("a"), {"o": "dq", "c": ["P"]}, {"o": "free", "k": ["a"]},
                  {"o": "pk", "c": "P", "kv": [["a", 1, 0]]}])
    assert img.deletes == {"P"} and img.count() == 1
    img.apply({"o": "dd", "c": ["P", "other"]})
    assert img.deletes == set() and img.count() == 0


def test_pending_deletes_and_packs_survive_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "t.log")
    lg = DurableLog(path, compact_factor=2, compact_min=8)
    lg.open()
    for i in range(30):
        lg.append(_put(f"k{i}"))
    lg.append({"o": "dq", "c": ["P", "Q", "sion/k3/1"]})
    lg.append({"o": "pk", "c": "P", "kv": [["k1", 1, 0], ["k2", 1, 64]]})
    lg.append({"o": "dd", "c": ["Q"]})
    for i in range(10, 30):
        lg.append({"o": "free", "k": [f"k{i}"]})
    lg.compact()
    lg.close()
    img = DurableLog(path).open()
    live = {k: m for k, _, m in img.versions()}
    assert img.deletes == {"sion/k3/1"}
    assert live["k1"]["pack"] == ["P", 0] and live["k2"]["pack"] == ["P", 64] and live["k2"]["uploaded"]
    assert "pack" not in live["k3"] and len(live) == 10


def test_a_packed_chunk_is_read_at_its_pack_offset() -> None:
    obj = ObjectVersion("x", 1, size=10, stripes=[Stripe(2, 1, 5, 10, 5, [1, 2, 3], [None] * 3, 0)],
                        cos_key="sion/objects/k-x/00000001")
    assert obj.cos_range(0, 2) == ("sion/objects/k-x/00000001", 10)
    obj.pack = ("sion/objects/k-~pack-1/00000000", 4000)
    assert obj.cos_range(0, 2) == ("sion/objects/k-~pack-1/00000000", 4010)
