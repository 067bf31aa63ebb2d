"""The persistent buffer's write-behind against a real local COS directory: small
versions held in memory and a segment, large ones uploaded by hard link, small ones
due together packed into one COS object (deleted with its last version), the parity
delay (skipped uploads when freed in time, expedited on a loss), deletes on the
uploader threads (logged before and after) and a ``close`` that does not wait out
due times. The clock is injected; the uploader threads are real."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from storage_functions.cos import LocalCOS
from storage_functions.daemon._buffer import PersistentBuffer
from storage_functions.daemon._objects import ObjectVersion, Stripe, cos_object_key, trailer
from storage_functions.daemon._upload_plan import UploadPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _version(key: str, data: bytes, p: int) -> ObjectVersion:
    d = 2
    cl = (len(data) + d - 1) // d
    st = Stripe(d, p, cl, len(data), cl, [0] * (d + p), [None] * (d + p))
    return ObjectVersion(key, 1, size=len(data), stripes=[st], state="ready", cos_key=cos_object_key("t", key, 1))


def _hold(buf: PersistentBuffer, key: str, size: int, p: int = 1) -> tuple[ObjectVersion, bytes]:
    data = os.urandom(size)
    obj = _version(key, data, p)
    w = buf.writer(obj, size)
    body = data + bytes(obj.stripes[0].cl * obj.stripes[0].n - len(data))  # chunks as stored (parity zeros here)
    w.write(body[:len(body) // 2])
    w.write(body[len(body) // 2:])
    w.finish(trailer(obj))
    return obj, body


def _buffer(tmp: Path, clock: Clock, cos: Any = None, **kw: Any) -> PersistentBuffer:
    cos = cos if cos is not None else LocalCOS(str(tmp / "cos"))
    kw.setdefault("pack_linger_s", 0.0)  # the injected clock stands still: due means go
    kw.setdefault("cos_prefix", "t")
    return PersistentBuffer(str(tmp / "buf"), cos, policy=UploadPolicy(parity_delay_s=2.0), clock=clock, **kw)


def cos_bytes(cos: Any, obj: ObjectVersion, n: int) -> bytes:
    """The ``n`` bytes of ``obj``'s COS copy: its own object, or its range of a pack."""
    key, at = obj.pack if obj.pack is not None else (obj.cos_key, 0)
    return bytes(cos.get_range(key, at, n))


def test_small_versions_are_held_in_memory_and_one_segment(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock, memory_bytes=13_000)  # two versions of ~6.2 kB
    try:
        a, body_a = _hold(buf, "a", 4096)
        b, body_b = _hold(buf, "b", 4096)
        c, body_c = _hold(buf, "c", 4096)  # over the memory budget: only in its segment
        assert a.held is not None and b.held is not None and c.held is not None
        assert a.held.mem is not None and b.held.mem is not None and c.held.mem is None
        assert buf.spilled == 1
        assert a.held.seg == c.held.seg and [n for n in os.listdir(tmp_path / "buf") if n.endswith(".buf")] == []
        for obj, body in ((a, body_a), (b, body_b), (c, body_c)):
            assert buf.read(obj, 0, len(body)) == body  # read-after-write, memory or segment
        for obj in (a, b, c):
            buf.submit(obj)  # coded: due in 2 s
        assert buf.stats()["uploads_queued"] == 3 and buf.uploads == 0
        clock.t += 2.5
        buf.poke()
        assert buf.wait_idle(10)
        assert buf.uploads == 3 and a.uploaded and a.held is None
        # a and b (in memory) went up as one pack; c (its segment only) on its own
        assert a.pack is not None and b.pack is not None and a.pack[0] == b.pack[0] and c.pack is None
        assert buf.cos.stats.puts == 2 and buf.stats()["pack_uploads"] == 1
        for obj, body in ((a, body_a), (b, body_b)):  # each version's COS format, byte for byte
            assert cos_bytes(buf.cos, obj, len(body) + len(trailer(obj))) == body + trailer(obj)
        assert buf.cos.get(c.cos_key) == body_c + trailer(c)
        assert buf.stats()["buffer_memory_bytes"] == 0
    finally:
        buf.close()
    assert [n for n in os.listdir(tmp_path / "buf") if n.endswith(".seg")] == []  # nothing held: no segment


def test_freed_within_the_parity_delay_is_never_uploaded(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock)
    try:
        coded, _ = _hold(buf, "coded", 4096, p=2)
        plain, _ = _hold(buf, "plain", 4096, p=0)  # no parity: uploaded at once, as in SION
        buf.submit(coded)
        buf.submit(plain)
        assert buf.wait_idle(0.2) is False  # the coded one waits
        assert plain.uploaded and not coded.uploaded
        buf.discard(coded)
        assert buf.wait_idle(5)
        st = buf.stats()
        assert st["uploads"] == 1 and st["uploads_skipped"] == 1 and st["uploads_skipped_coded"] == 1
        assert st["cos_requests_saved"] == 2 and st["uploads_skipped_share"] == 0.5
        assert not buf.cos.exists(coded.cos_key) and buf.cos.stats.puts == 1
    finally:
        buf.close()


def test_a_lost_chunk_expedites_the_upload(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock)
    try:
        obj, body = _hold(buf, "hurt", 50_000, p=1)
        buf.submit(obj)
        assert not buf.wait_idle(0.1)
        buf.expedite(obj)
        assert buf.wait_idle(5)
        assert obj.uploaded and buf.expedited == 1
        assert buf.cos.get(obj.cos_key)[:len(body)] == body
    finally:
        buf.close()


def test_a_large_version_is_linked_into_cos_not_copied(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock, memory_max_object=1 << 16, ring_min_object=1 << 20)
    try:
        obj, body = _hold(buf, "large", 3 << 20, p=0)  # written through the off-relay slots (6 of them)
        assert obj.held is not None and obj.held.seg is None and obj.held.mem is None
        path = obj.held.path
        assert path is not None
        inode = os.stat(path).st_ino
        buf.submit(obj)
        assert buf.wait_idle(10)
        target = buf.cos._path(obj.cos_key)
        assert os.stat(target).st_ino == inode  # a hard link: no byte was read or written
        assert not os.path.exists(path)  # the buffer let its name go
        assert buf.cos.get(obj.cos_key) == body + trailer(obj)
    finally:
        buf.close()


class SlowDeleteCOS(LocalCOS):
    """A local COS whose deletes wait for ``go``."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.go = threading.Event()
        self.deleting = threading.Event()

    def _delete(self, key: str) -> None:
        self.deleting.set()
        self.go.wait(10)
        super()._delete(key)


def test_a_free_after_upload_deletes_on_an_uploader_thread(tmp_path: Path) -> None:
    clock = Clock()
    cos = SlowDeleteCOS(str(tmp_path / "cos"))
    buf = _buffer(tmp_path, clock, cos=cos)
    try:
        obj, _ = _hold(buf, "up-then-freed", 4096, p=0)
        buf.submit(obj)
        assert buf.wait_idle(5) and cos.exists(obj.cos_key)
        t = time.monotonic()
        buf.discard(obj)  # the caller (the daemon's control loop) does not wait for COS
        assert time.monotonic() - t < 1.0
        assert cos.deleting.wait(5) and cos.exists(obj.cos_key)
        cos.go.set()
        assert buf.wait_idle(5) and not cos.exists(obj.cos_key) and buf.deletes == 1
    finally:
        cos.go.set()
        buf.close()


def test_close_uploads_what_is_queued_without_waiting_for_due_times(tmp_path: Path) -> None:
    clock = Clock()
    buf = PersistentBuffer(str(tmp_path / "buf"), LocalCOS(str(tmp_path / "cos")), clock=clock,
                           policy=UploadPolicy(parity_delay_s=600.0))
    obj, _ = _hold(buf, "late", 4096, p=1)
    buf.submit(obj)
    t = time.monotonic()
    buf.close()
    assert time.monotonic() - t < 3.0
    assert obj.uploaded and buf.cos.exists(obj.cos_key)


def test_a_predicted_expiry_defers_a_coded_upload_and_a_free_before_it_skips_it(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock)
    try:
        data = os.urandom(4096)
        obj = _version("expiring", data, 1)
        w = buf.writer(obj, len(data), expires_at_ms=int((time.time() + 10) * 1000))  # predicted in 10 s
        w.write(data)
        w.finish(trailer(obj))
        buf.submit(obj)
        clock.t += 5.0  # past the parity delay, before the predicted expiry
        buf.poke()
        assert not buf.wait_idle(0.2) and not obj.uploaded
        buf.discard(obj)  # freed as predicted
        assert buf.wait_idle(5) and buf.skipped == 1 and buf.uploads == 0
    finally:
        buf.close()


def test_the_daemon_writes_no_file_per_small_put() -> None:
    from sdk._store_client import StoreClient
    from storage_functions.daemon import LocalStore

    with LocalStore(idle_s=5.0) as st, StoreClient(st.address, st.token) as c:
        st.daemon.buffer.paused.clear()  # uploads held back: everything stays in the buffer
        try:
            objs = {f"small-{i}": os.urandom(4096 + i) for i in range(50)}
            c.put_many([(k, v, None) for k, v in objs.items()])
            names = os.listdir(st.daemon.buffer_dir)
            assert [n for n in names if n.endswith(".buf")] == []
            assert len([n for n in names if n.endswith(".seg")]) == 1  # fifty PUTs, one append each
            for k, v in objs.items():
                assert c.get(k) == v  # read-after-write, from the daemon's memory
            assert st.daemon.counters["buffer_hits"] >= 50
            assert st.daemon.stats()["buffer_memory_bytes"] > 50 * 4096
        finally:
            st.daemon.buffer.paused.set()
        assert st.daemon.wait_uploads(30)
        for k in objs:  # fifty versions PUT together: a pack or two, not fifty COS objects
            obj = st.daemon.table.latest(k)
            assert obj is not None and obj.pack is not None
            assert cos_bytes(st.cos, obj, len(objs[k])) == objs[k]
        assert st.daemon.stats()["pack_uploads"] <= 4
        assert st.daemon.stats()["buffer_memory_bytes"] == 0


class LoggedDeletes:
    def __init__(self) -> None:
        self.calls: list[tuple[bool, list[str]]] = []

    def __call__(self, queued: bool, keys: list[str]) -> None:
        self.calls.append((queued, keys))


def test_small_versions_due_together_go_up_as_one_pack_deleted_with_its_last_version(tmp_path: Path) -> None:
    clock = Clock()
    logged = LoggedDeletes()
    buf = _buffer(tmp_path, clock, on_deletes=logged)
    try:
        held = [_hold(buf, f"r-1/o{i}", 3000 + i, p=0) for i in range(5)]
        buf.paused.clear()  # all five due before an uploader looks
        for obj, _ in held:
            buf.submit(obj)
        buf.paused.set()
        assert buf.wait_idle(5)
        packs = {obj.pack[0] for obj, _ in held if obj.pack is not None}
        assert len(packs) == 1 and all(obj.uploaded for obj, _ in held)
        (pack,) = packs
        assert pack.startswith("t/objects/k-r-1%2F~pack-")  # under its run's prefix: a run's end drops it
        assert buf.cos.stats.puts == 1 and buf.stats()["packed_versions"] == 5
        for obj, body in held:
            assert cos_bytes(buf.cos, obj, len(body) + len(trailer(obj))) == body + trailer(obj)
        assert logged.calls == [(True, [pack])]  # queued to delete until the durable log records it landed
        for obj, _ in held[:4]:
            buf.discard(obj)
        assert buf.wait_idle(5) and buf.cos.exists(pack) and buf.deletes == 0  # one version still lives in it
        buf.discard(held[4][0])
        assert buf.wait_idle(5) and not buf.cos.exists(pack) and buf.deletes == 1
        assert logged.calls[-2:] == [(True, [pack]), (False, [pack])]
        st = buf.stats()
        assert st["cos_requests_saved"] == 4 + 4 and st["packs_live"] == 0  # four PUTs, four DELETEs
    finally:
        buf.close()


def test_versions_of_different_runs_never_share_a_pack(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock)
    try:
        held = [_hold(buf, f"r-{i % 2}/o{i}", 2000, p=0)[0] for i in range(6)]
        buf.paused.clear()
        for obj in held:
            buf.submit(obj)
        buf.paused.set()
        assert buf.wait_idle(5)
        by_run: dict[str, set[str]] = {}
        for obj in held:
            assert obj.pack is not None
            by_run.setdefault(obj.key.split("/")[0], set()).add(obj.pack[0])
        assert len(by_run["r-0"]) == len(by_run["r-1"]) == 1 and by_run["r-0"] != by_run["r-1"]
    finally:
        buf.close()


def test_an_uploader_lingers_so_versions_put_together_travel_together(tmp_path: Path) -> None:
    clock = Clock()
    buf = _buffer(tmp_path, clock, pack_linger_s=0.5)
    try:
        first, _ = _hold(buf, "first", 1000, p=0)
        buf.submit(first)  # due now; goes up 0.5 s (on the buffer's clock) later
        assert not buf.wait_idle(0.2) and not first.uploaded
        clock.t += 0.3
        second, _ = _hold(buf, "second", 1000, p=0)
        buf.submit(second)
        buf.poke()
        assert not buf.wait_idle(0.2)
        clock.t += 0.3
        buf.poke()
        assert buf.wait_idle(5)
        assert first.pack is not None and second.pack is not None and first.pack[0] == second.pack[0]
        assert buf.cos.stats.puts == 1
    finally:
        buf.close()
