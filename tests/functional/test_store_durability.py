"""Persistent buffer, write-behind COS upload, free before upload, lost
instances, scale-out, over real processes."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore, cos_object_key

MiB = 1 << 20


def test_read_after_write_from_buffer_and_no_upload_when_freed_early() -> None:
    with LocalStore(upload_delay_s=2.0, idle_s=1.0) as st, StoreClient(st.address, st.token) as c:
        data = os.urandom(2 * MiB)
        c.put("raw", data)
        c.put("early", b"short-lived" * 100)
        cos = st.cos
        assert not cos.exists(cos_object_key("sion", "raw", 1))  # upload still pending
        assert c.get("raw") == data
        assert st.daemon.counters["buffer_hits"] >= 1
        assert c.free(["early"]) == 1
        assert st.daemon.wait_uploads(20)
        assert cos.exists(cos_object_key("sion", "raw", 1))
        assert not cos.exists(cos_object_key("sion", "early", 1))
        assert st.daemon.buffer.skipped == 1
        assert [n for n in os.listdir(st.daemon.buffer_dir) if n.endswith(".buf")] == []  # (and the table log)
        assert c.get("raw") == data  # now from function memory


def test_killed_instances_lose_nothing() -> None:
    with LocalStore(idle_s=1.0) as st, StoreClient(st.address, st.token, codec=Codec(4, 2)) as c:
        objs = {f"o{i}": os.urandom(s) for i, s in enumerate([10, 5000, 900_000, 2 * MiB, 3 * MiB + 1])}
        for k, v in objs.items():
            c.put(k, v)
        assert st.daemon.wait_uploads(20)
        for name in ("sion-0", "sion-1", "sion-3"):  # more than p on some objects
            st.platform.kill(name)
        for k, v in objs.items():
            assert c.get(k) == v
        assert st.daemon.counters["cos_fallbacks"] >= 1
        # kill while GETs are running
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                while not stop.is_set():
                    for k, v in objs.items():
                        assert c.get(k) == v
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        for name in ("sion-2", "sion-4", "sion-5"):
            time.sleep(0.2)
            st.platform.kill(name)
        time.sleep(0.5)
        stop.set()
        t.join(30)
        assert not errors, errors


def test_scale_out_under_load() -> None:
    with LocalStore(function_memory_mb=128, hardcap_fraction=0.5, group_size=6, max_functions=30,
                    idle_s=1.0) as st, \
            StoreClient(st.address, st.token, codec=Codec(4, 2, stripe_size=4 * MiB)) as c:
        cap = st.config.hardcap
        written = {}
        lock = threading.Lock()

        def writer(n: int) -> None:
            for j in range(10):
                data = os.urandom(4 * MiB)
                c.put(f"so-{n}-{j}", data)
                with lock:
                    written[f"so-{n}-{j}"] = data

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        fns = st.daemon.stats()["functions"]
        assert len(fns) > 6  # more than one function group
        assert any(f["sealed"] for f in fns)
        assert all(st.daemon.placement.used(i) <= cap for i in range(len(fns)))
        for k, v in written.items():
            assert c.get(k) == v


@pytest.mark.slow
def test_200_mib_object() -> None:
    with LocalStore(function_memory_mb=1024, max_object_bytes=256 * MiB, idle_s=2.0) as st, \
            StoreClient(st.address, st.token) as c:
        data = os.urandom(200 * MiB)
        c.put("big", data)
        assert c.get("big") == data
        assert st.daemon.wait_uploads(60)
        st.platform.kill("sion-0")
        assert c.get("big") == data
