"""Packs of small versions across daemon restarts, over real storage-function
processes: versions PUT together go up as one COS object, a daemon started
again on the same root reads them back from it (their chunks stored again in
new functions' memory from the pack), the pack goes once its last version is
freed, and COS deletes a stopped daemon had queued (or a pack that went up
without its record) are carried out by the next one."""

from __future__ import annotations

import os
from pathlib import Path

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.cos import open_cos
from storage_functions.daemon import LocalStore, cos_object_key
from storage_functions.daemon._durable import TABLE_LOG, frame

KW = {"idle_s": 5.0, "group_size": 6, "max_functions": 12, "function_memory_mb": 256}


def test_a_pack_is_read_back_after_a_restart_and_deleted_with_its_last_version(tmp_path: Path) -> None:
    objs = {f"r-1/small-{i}": os.urandom(2000 + 300 * i) for i in range(12)}
    with LocalStore(str(tmp_path), **KW) as st, StoreClient(st.address, st.token, codec=Codec(4, 2)) as c:
        c.put_many([(k, v, None) for k, v in objs.items()])
        assert st.daemon.wait_uploads(30)
        copies = [st.daemon.cos_copy(k) for k in objs]
        packs = {c[0] for c in copies if c is not None}
        assert None not in copies and all("~pack-" in p for p in packs)
        assert len(packs) <= 3 and st.daemon.stats()["packed_versions"] >= 10
    cos = open_cos(f"file://{tmp_path / 'cos'}")
    with LocalStore(str(tmp_path), **KW) as st, StoreClient(st.address, st.token, codec=Codec(4, 2)) as c:
        assert st.daemon.counters["restored_objects"] == len(objs)
        assert st.daemon.stats()["packs_live"] == len(packs)
        for k, v in objs.items():
            assert c.get(k) == v  # the new functions' chunks came from the pack
        keys = list(objs)
        assert c.free(keys[:-1]) == len(keys) - 1
        assert st.daemon.wait_uploads(30)
        last = st.daemon.cos_copy(keys[-1])
        assert last is not None and cos.exists(last[0])  # its pack lives while it does
        assert c.free(keys[-1:]) == 1
        assert st.daemon.wait_uploads(30)
        assert cos.list("sion/objects/") == []  # every pack gone with its last version
        assert st.daemon.stats()["packs_live"] == 0


def test_deletes_a_stopped_daemon_had_queued_are_carried_out_after_a_restart(tmp_path: Path) -> None:
    cos = open_cos(f"file://{tmp_path / 'cos'}", create=True)
    freed = cos_object_key("sion", "r-2/freed", 1)  # freed; its delete queued when the daemon died
    orphan = cos_object_key("sion", "r-2/~pack-0123", 0)  # went up; the kill came before its record
    kept = cos_object_key("sion", "r-2/kept", 1)
    for key in (freed, orphan, kept):
        cos.put(key, b"bytes")
    (tmp_path / "buffer").mkdir(mode=0o700)
    with open(tmp_path / "buffer" / TABLE_LOG, "wb") as fh:
        fh.write(frame({"o": "start", "n": 1}) + frame({"o": "dq", "c": [freed]}) +
                 frame({"o": "dq", "c": [orphan]}) + frame({"o": "dq", "c": [kept]}) +
                 frame({"o": "dd", "c": [kept]}))  # a delete that was done (then the object came back)
    with LocalStore(str(tmp_path), **KW) as st:
        assert st.daemon.wait_uploads(30)
        assert not cos.exists(freed) and not cos.exists(orphan) and cos.exists(kept)
        assert st.daemon.durable.log.image.deletes == set()
