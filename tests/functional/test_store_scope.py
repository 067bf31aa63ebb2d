"""Run-scoped tokens on the data path: a client holding run A's token reaches
run A's keys and COS objects and nothing of run B's; the store token (the
driver and admin side) reaches every run; STAT is the store token's only."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.auth import mint_run_token
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import AuthError, COSNotFound, StoreError

MiB = 1 << 20


@pytest.fixture(scope="module")
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, group_size=6, max_functions=12, idle_s=1.0) as st:
        yield st


@pytest.fixture
def clients(store: LocalStore) -> Iterator[tuple[StoreClient, StoreClient, StoreClient]]:
    """(store-token client, run A's client, run B's client)"""
    codec = Codec(4, 2)
    with StoreClient(store.address, store.token, codec=codec) as admin, \
            StoreClient(store.address, mint_run_token(store.token, "run-a"), codec=codec) as a, \
            StoreClient(store.address, mint_run_token(store.token, "run-b"), codec=codec) as b:
        yield admin, a, b


@pytest.mark.parametrize("size", [100, 3 * MiB])  # one slice; erasure-coded stripes
def test_a_run_token_cannot_touch_another_runs_objects(clients: tuple[StoreClient, ...], size: int) -> None:
    admin, a, b = clients
    secret = os.urandom(size)
    b.put("run-b/secret", secret)
    with pytest.raises(AuthError, match="run-a/"):
        a.get("run-b/secret")
    with pytest.raises(AuthError):
        a.put("run-b/secret", b"overwritten by run A")
    with pytest.raises(AuthError):
        a.delete("run-b/secret")
    with pytest.raises(AuthError):
        a.free(["run-a/mine", "run-b/secret"])      # one foreign key refuses the whole FREE
    with pytest.raises(AuthError):
        a.put("run-bb/x", b"a prefix of another run is not this run")
    # each refusal left the connection usable, and B's object whole and readable
    assert b.get("run-b/secret") == secret
    assert admin.get("run-b/secret") == secret
    b.delete("run-b/secret")


def test_a_run_token_does_everything_with_its_own_keys(clients: tuple[StoreClient, ...]) -> None:
    admin, a, _ = clients
    data = os.urandom(2 * MiB + 5)
    a.put("run-a/obj", data)
    a.put("run-a/small", b"x")
    with a.get_stream("run-a/obj") as s:
        assert b"".join(bytes(p) for p in s) == data
    assert a.get("run-a/obj") == data
    a.delete("run-a/obj")
    assert a.free(["run-a/small"]) == 1
    assert admin.free(["run-a/small", "run-a/obj"]) == 0


def test_stat_is_for_the_store_token_only(clients: tuple[StoreClient, ...]) -> None:
    admin, a, _ = clients
    with pytest.raises(AuthError, match="STAT needs the store token"):
        a.stats()
    assert admin.stats()["scope_refusals"] >= 1


def test_cos_objects_are_scoped_like_the_store(store: LocalStore, clients: tuple[StoreClient, ...]) -> None:
    admin, a, b = clients
    for kind in ("tier", "persisted", "outputs"):
        b.cos_put(f"{kind}/run-b/x", b"B's " + kind.encode())
        with pytest.raises(AuthError):
            a.cos_get(f"{kind}/run-b/x")
        with pytest.raises(AuthError):
            a.cos_put(f"{kind}/run-b/x", b"overwritten")
        with pytest.raises(AuthError):
            a.cos_delete(f"{kind}/run-b/x")
        assert b.cos_get(f"{kind}/run-b/x") == b"B's " + kind.encode()
        a.cos_put(f"{kind}/run-a/x", b"mine")
        assert a.cos_get(f"{kind}/run-a/x") == b"mine" == admin.cos_get(f"{kind}/run-a/x")
        a.cos_delete(f"{kind}/run-a/x")
        with pytest.raises(COSNotFound):
            a.cos_get(f"{kind}/run-a/x")
    # the daemon's own objects are nobody's through the proxy, not even the store token's
    store.cos.put("sion/objects/k-run-b%2Fsecret/00000001", b"chunks")
    for c in (admin, a):
        with pytest.raises(AuthError):
            c.cos_get("sion/objects/k-run-b%2Fsecret/00000001")
    with pytest.raises(StoreError, match="'..' segment"):
        a.cos_put("tier/run-a/../run-b/x", b"escape")  # not a COS key: refused before any scope question
