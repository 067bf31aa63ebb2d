"""The whole data path over real processes: StoreClient -> daemon -> storage
functions on the local Lambda platform, COS in a local directory."""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import AuthError, ObjectTooLarge, UnknownKey

MiB = 1 << 20


@pytest.fixture(scope="module")
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=512, idle_s=1.0, debug=True, max_object_bytes=64 * MiB) as st:
        yield st


@pytest.fixture
def client(store: LocalStore) -> Iterator[StoreClient]:
    with StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=4 * MiB)) as c:
        yield c


@pytest.mark.parametrize("size", [0, 1, 4096, MiB - 1, MiB, 3 * MiB + 7, 10 * MiB])
def test_round_trip(client: StoreClient, size: int) -> None:
    data = os.urandom(size)
    res = client.put(f"rt-{size}", data)
    assert res.size == size and res.coded == (size > MiB)  # one block or less: one uncoded slice
    assert client.get(f"rt-{size}") == data


def test_rewrite_makes_a_new_immutable_version(client: StoreClient) -> None:
    v1 = client.put("ver", b"one").version
    v2 = client.put("ver", b"two").version
    assert v2 == v1 + 1
    assert client.get("ver") == b"two"
    assert client.get("ver", version=v1) == b"one"


def test_many_concurrent_clients(store: LocalStore) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with StoreClient(store.address, store.token) as c:
                for j in range(6):
                    data = os.urandom((n * 7919 + j * 104729) % (2 * MiB))
                    c.put(f"cc-{n}-{j}", data)
                    assert c.get(f"cc-{n}-{j}") == data
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_one_client_shared_by_threads(client: StoreClient) -> None:
    datas = {f"sh-{i}": os.urandom(20_000 + i) for i in range(16)}
    threads = [threading.Thread(target=client.put, args=(k, v)) for k, v in datas.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for k, v in datas.items():
        assert client.get(k) == v


def test_bad_input_gets_clear_errors(store: LocalStore, client: StoreClient) -> None:
    with pytest.raises(ObjectTooLarge, match="over the store's maximum"):
        client.put("huge", bytes(65 * MiB))
    with pytest.raises(UnknownKey, match="'nope': no such object"):
        client.get("nope")
    with pytest.raises(UnknownKey):
        client.delete("nope")
    with pytest.raises(AuthError, match="run token"):
        StoreClient(store.address, "wrong-token").get("rt-0")
    client.put("after-errors", b"fine")  # the connection is still usable
    assert client.get("after-errors") == b"fine"


def test_corrupt_chunk_is_served_from_parity_or_cos(store: LocalStore, client: StoreClient) -> None:
    small, large = os.urandom(5000), os.urandom(2 * MiB)
    client.put("corrupt-small", small)
    client.put("corrupt-large", large)
    assert store.daemon.wait_uploads(20)
    before = store.daemon.counters["corrupt_chunks"]
    assert store.daemon.corrupt_chunk("corrupt-small")
    assert store.daemon.corrupt_chunk("corrupt-large", 0, 0)
    assert client.get("corrupt-small") == small  # single slice: from COS
    assert client.get("corrupt-large") == large  # from parity
    assert store.daemon.counters["corrupt_chunks"] >= before + 2


def test_delete_then_unknown(client: StoreClient) -> None:
    client.put("gone", b"x" * 100)
    client.delete("gone")
    with pytest.raises(UnknownKey):
        client.get("gone")


def test_functions_go_idle_and_come_back(store: LocalStore, client: StoreClient) -> None:
    data = os.urandom(300_000)
    client.put("idle", data)
    deadline = time.monotonic() + 10
    while any(f["state"] != "sleeping" for f in store.daemon.stats()["functions"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(f["state"] == "sleeping" for f in store.daemon.stats()["functions"])
    assert client.get("idle") == data  # re-invoked, memory still warm
    assert store.daemon.counters["lost_functions"] == 0
