"""Hostile input across several daemons (issue 31 item 1), over real storage-function processes:
two daemons (daemon-0, daemon-1) of one deployment share a COS directory and a store token. A PUT
sent to the wrong daemon (its placement names the other daemon's functions) is refused naming the
mismatch and stores nothing; a GET of another daemon's object is refused naming the daemon asked,
with no COS read (the other daemon's copies are under its own prefix); and a client never dials a
daemon its endpoints do not list, whatever a grant names."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk._client import Endpoints
from sdk._daemons import DaemonStores, parse_daemons
from sdk._store_client import StoreClient
from sdk.exceptions import StoreFailure
from storage_functions.daemon import DaemonConfig, LocalStore
from storage_functions.exceptions import StoreError, UnknownKey
from storage_functions.local import LocalPlatform, PlatformConfig


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[LocalStore]]:
    platform = LocalPlatform(PlatformConfig(log_dir=str(tmp_path / "logs")))
    token = secrets.token_hex(16)
    stores: list[LocalStore] = []
    try:
        for k in range(2):
            cfg = DaemonConfig(placement="metadata", group_size=2, max_functions=2, function_memory_mb=128,
                               token=token, daemon_id=f"daemon-{k}", function_prefix=f"sion-d{k}",
                               cos_prefix=f"sion/daemon-{k}", cos_url=f"file://{tmp_path / 'cos'}",
                               buffer_dir=str(tmp_path / f"buffer-{k}"), upload_delay_s=0.0)
            stores.append(LocalStore(str(tmp_path / f"store-{k}"), config=cfg, platform=platform).start())
        yield stores
    finally:
        for st in stores:
            st.stop()
        platform.shutdown()


def test_a_put_placed_on_another_daemons_functions_is_refused_and_stores_nothing(pair: list[LocalStore]) -> None:
    d0, d1 = pair
    with StoreClient(d1.address, d1.token) as c:
        with pytest.raises(StoreError, match="'sion-d0-0'.*daemon 'daemon-1'.*another daemon's"):
            c.put("r-1/x", b"abc", alloc=[("sion-d0-0", 0, 0, 3)])
        with pytest.raises(UnknownKey):
            c.get("r-1/x")
        c.put("r-1/x", b"abc", alloc=[("sion-d1-1", 0, 0, 3)])      # its own functions: stored
        assert c.get("r-1/x") == b"abc"
    assert d0.daemon.table.latest("r-1/x") is None


def test_a_get_of_another_daemons_object_is_refused_without_a_cos_read(pair: list[LocalStore]) -> None:
    d0, d1 = pair
    with StoreClient(d0.address, d0.token) as c0:
        c0.put("r-1/mine", b"held by daemon-0", alloc=[("sion-d0-0", 0, 0, 16)])
    d0.daemon.wait_uploads(30)                                          # its COS copy exists too
    gets_before = d1.cos.stats.as_dict()["gets"]
    with StoreClient(d1.address, d1.token) as c1:
        with pytest.raises(UnknownKey, match="no such object on daemon 'daemon-1'.*the one daemon its placement"):
            c1.get("r-1/mine")
        with pytest.raises(UnknownKey):
            c1.get_buffer("r-1/mine")
    assert d1.cos.stats.as_dict()["gets"] == gets_before               # never read daemon-0's copy
    with StoreClient(d0.address, d0.token) as c0:
        assert c0.get("r-1/mine") == b"held by daemon-0"


def test_a_client_never_dials_a_daemon_its_endpoints_do_not_list() -> None:
    dialled: list[str] = []

    def make(addr: str) -> StoreClient:
        dialled.append(addr)
        return StoreClient(addr, "t")

    stores = DaemonStores(parse_daemons("daemon-0=127.0.0.1:1;daemon-1=127.0.0.1:2"), make)
    try:
        assert stores.of("daemon-1").addr == ("127.0.0.1", 2)
        assert stores.of("").addr == ("127.0.0.1", 1)                   # a one-daemon placement: the first
        with pytest.raises(StoreFailure, match="daemon 'evil'.*do not list.*'daemon-0', 'daemon-1'"):
            stores.of("evil")
        assert dialled == ["127.0.0.1:1", "127.0.0.1:2"]                # no client was made for it
    finally:
        stores.close()


def test_endpoints_name_several_daemons_by_id_and_one_as_before() -> None:
    assert Endpoints("m:1", "127.0.0.1:7918", "t").daemons == (("", "127.0.0.1:7918"),)
    assert Endpoints("m:1", "a:1;b:2", "t").daemons == (("daemon-0", "a:1"), ("daemon-1", "b:2"))
    assert Endpoints("m:1", "x=a:1;y=b:2", "t").daemons == (("x", "a:1"), ("y", "b:2"))
    with pytest.raises(ValueError, match="repeat"):
        parse_daemons("x=a:1;x=b:2")
    with pytest.raises(ValueError, match="not ID=HOST:PORT"):
        parse_daemons("x=a:1;y=")
