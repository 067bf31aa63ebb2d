"""A GET works through its stripes with a bounded window and never lets a
client's reading speed reach the storage functions: a streaming reader's
memory stays within a few stripes while a storage function is stopped
(SIGSTOP on its instance process), and a reader that stalls holds up
neither other clients' GETs on the same functions nor its own (no timeout,
no fallback charged to the functions), and still reads everything."""

from __future__ import annotations

import hashlib
import os
import signal
import time
import tracemalloc
from typing import Any, Callable

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

MiB = 1 << 20


def _peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def _digest(c: StoreClient, key: str) -> bytes:
    """sha256 of the object read through ``get_stream``, piece by piece."""
    h = hashlib.sha256()
    with c.get_stream(key) as s:
        for piece in s:
            h.update(piece)
    return h.digest()


def _instance_pid(st: LocalStore, name: str) -> int:
    pids = [i.pid for i in st.platform.instances(name) if i.state == "busy"]
    assert len(pids) == 1, st.platform.instances(name)
    return pids[0]


def test_stream_memory_is_bounded_by_the_window_while_a_function_is_stopped() -> None:
    window = 2
    codec = Codec(10, 2, stripe_size=2 * MiB)  # a 40 MiB object is 20 stripes
    size = 40 * MiB + 3
    stripe = codec.plan(size)[0][1]
    with LocalStore(idle_s=60.0, function_memory_mb=512, group_size=12, max_functions=12, get_straggler_s=0.2,
                    get_window=window, max_object_bytes=64 * MiB) as st, \
            StoreClient(st.address, st.token, codec=codec) as c:
        data = os.urandom(size)
        want = hashlib.sha256(data).digest()
        c.put("big", data)
        assert st.daemon.wait_uploads(60)  # GETs from function memory, not the buffer
        assert _digest(c, "big") == want
        obj = st.daemon.table.latest("big")
        assert obj is not None
        victim = st.daemon.handles[obj.stripes[0].places[0][0]].name  # holds data chunk 0 of stripe 0
        pid = _instance_pid(st, victim)
        runs: dict[int, tuple[int, float]] = {}
        os.kill(pid, signal.SIGSTOP)
        try:
            # the window first: replies still arriving for the all-at-once GET (late chunks the
            # daemon no longer wants) must not be traced as the window's
            for w in (window, 0):  # 0: every stripe at once (printed for comparison)
                st.daemon.config.get_window = w
                t = time.perf_counter()
                peak, got = _peak(lambda: _digest(c, "big"))
                runs[w] = (peak, time.perf_counter() - t)
                assert got == want, w
        finally:
            os.kill(pid, signal.SIGCONT)
        print(f"stripe {stripe / MiB:.1f} MiB, object {size / MiB:.0f} MiB, {victim} stopped; peak traced: "
              + ", ".join(f"window {w or 'all'} {p / MiB:.1f} MiB in {s:.2f} s" for w, (p, s) in runs.items()))
        # the reader's share: the stripe handed out and those that arrived ahead of it (fewer than the
        # window); the daemon's (it runs in this process): the chunks queued for this client (a window).
        # A stripe in flight may be all n = 12 of its chunks, not d = 10: on a loaded machine functions
        # besides the stopped one pass the straggler timeout and the parity chunks are asked too.
        assert runs[window][0] < (2 * window + 2) * stripe * 12 / 10, runs
        assert runs[window][0] < size / 3  # a few stripes of the 20, never the object
        assert c.get("big") == data  # the stopped function's backlog was answered and drained


def test_a_stalled_reader_holds_up_no_other_client_and_reads_to_the_end() -> None:
    window = 3
    codec = Codec(10, 2)  # 8 MiB stripes: the stalled object is far more than the sockets hold
    with LocalStore(idle_s=60.0, function_memory_mb=1024, group_size=12, max_functions=12, get_window=window,
                    get_timeout_s=2.0, max_object_bytes=128 * MiB) as st, \
            StoreClient(st.address, st.token, codec=codec) as c1, \
            StoreClient(st.address, st.token, codec=codec) as c2:
        big, other = os.urandom(64 * MiB + 1), os.urandom(4 * MiB + 1)
        c1.put("stalled", big)
        c2.put("other", other)
        assert st.daemon.wait_uploads(60)
        daemon = st.daemon
        fns = [{pl[0] for stp in daemon.table.latest(k).stripes for pl in stp.places if pl}  # type: ignore[union-attr]
               for k in ("stalled", "other")]
        assert fns[0] == fns[1]  # one group: both objects on the same twelve functions

        def timed_get() -> float:
            t = time.perf_counter()
            assert c2.get("other") == other
            return time.perf_counter() - t

        base = sorted(timed_get() for _ in range(5))[2]
        fallbacks = daemon.counters["cos_fallbacks"]
        s = c1.get_stream("stalled")
        got = bytearray(next(s))  # the reply has begun; then nothing is read for 3 s (> get_timeout_s)
        stall_end = time.monotonic() + 3.0
        with daemon._gets_lock:
            (out,) = [col.out.out for col in daemon._gets if col.obj.key == "stalled"]  # its lane's outbox
        lat: list[float] = []
        while time.monotonic() < stall_end:
            lat.append(timed_get())
            time.sleep(0.02)
        for piece in s:
            got += piece
        s.close()
        queued = out.peak_bytes
        stripe = codec.plan(len(big))[0][1]
        print(f"other GET {base * 1e3:.1f} ms alone, {len(lat)} during the stall: max {max(lat) * 1e3:.1f} ms, "
              f"median {sorted(lat)[len(lat) // 2] * 1e3:.1f} ms; stalled reply queued in the daemon at most "
              f"{queued / MiB:.1f} MiB (window {window} x {stripe / MiB:.1f} MiB)")
        assert bytes(got) == big
        assert daemon.counters["cos_fallbacks"] == fallbacks  # the reader's stall was not charged to functions
        assert max(lat) < max(0.5, 20 * base)
        assert queued <= window * stripe * 1.05
        assert c1.get("stalled") == big  # the connection went back in step


def test_stripes_past_hung_functions_wait_out_one_timeout_per_get() -> None:
    codec = Codec(4, 2, stripe_size=MiB)  # 12 stripes; three hung functions leave every stripe short
    with LocalStore(idle_s=60.0, function_memory_mb=256, group_size=6, max_functions=6, get_window=2,
                    get_timeout_s=0.5, get_straggler_s=0.1) as st, \
            StoreClient(st.address, st.token, codec=codec) as c:
        data = os.urandom(12 * MiB - 5)
        c.put("hung", data)
        assert st.daemon.wait_uploads(60)
        assert c.get("hung") == data
        pids = [_instance_pid(st, h.name) for h in st.daemon.handles[:3]]
        before = st.daemon.counters["cos_fallbacks"]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            t = time.perf_counter()
            got = c.get("hung")
            took = time.perf_counter() - t
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        print(f"GET past 3 hung functions of 6 (4+2): {took:.2f} s with get_timeout_s 0.5; "
              f"counters {dict(st.daemon.counters)}")
        assert got == data
        # every stripe past the first window is finished from the buffer or COS without asking the
        # hung functions again; the first window's two may also complete another way (CI once
        # counted 10 of 12 under load: the counters printed above say which path served them)
        assert st.daemon.counters["cos_fallbacks"] - before >= 12 - 2
        assert took < 0.5 + 1.0, took  # the first window's timeout; later stripes skip the hung functions
        assert c.get("hung") == data
