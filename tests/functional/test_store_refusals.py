"""PUTs the daemon refuses under the metadata server's placement authority, over real
storage-function processes: a place outside its pool is ``NoRoom`` (the SDK then writes the
object to the COS tier); chunks whose function cannot be reached leave an object readable
when every stripe kept d chunks, and fail the PUT (storing nothing) when one did not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import DaemonConfig, LocalStore
from storage_functions.exceptions import NoRoom, PlatformError, StoreError, UnknownKey
from storage_functions.local import LocalPlatform, PlatformConfig

MiB = 1 << 20


class Refusing:
    """The local platform, except that invocations of ``down`` fail (a function that
    cannot start: its region is out of capacity, its code is broken)."""

    def __init__(self, platform: LocalPlatform) -> None:
        self.platform = platform
        self.down: set[str] = set()

    def invoke_async(self, name: str, event: Any) -> Any:
        if name in self.down:
            raise PlatformError(f"{name} cannot be invoked")
        return self.platform.invoke_async(name, event)

    def deploy(self, *args: Any, **kw: Any) -> Any:
        return self.platform.deploy(*args, **kw)


@pytest.fixture
def store(tmp_path: Any) -> Iterator[tuple[LocalStore, Refusing]]:
    platform = LocalPlatform(PlatformConfig(log_dir=str(tmp_path / "logs")))
    refusing = Refusing(platform)
    cfg = DaemonConfig(placement="metadata", group_size=6, max_functions=6, function_memory_mb=128,
                       invoke_timeout_s=0.5, put_timeout_s=5.0)
    try:
        with LocalStore(str(tmp_path), config=cfg, platform=refusing) as st:
            yield st, refusing
    finally:
        platform.shutdown()


def _alloc(codec: Codec, size: int) -> list[tuple[str, int, int, int]]:
    cb = codec.chunk_bytes(size)
    return [(f"sion-{i}", 0, 0, cb) for i in range(codec.d + codec.p)]


def test_a_place_outside_the_pool_is_no_room(store: tuple[LocalStore, Refusing]) -> None:
    st, _ = store
    with StoreClient(st.address, st.token) as c:
        with pytest.raises(NoRoom, match="the allocation cannot be used: function 20 is outside the pool of 6 "
                                         "functions"):
            c.put("r-1/x", b"abc", alloc=[("sion-20", 0, 0, 3)])
        with pytest.raises(UnknownKey):
            c.get("r-1/x")
        c.put("r-1/x", b"abc", alloc=[("sion-5", 0, 0, 3)])  # the same connection goes on
        assert c.get("r-1/x") == b"abc"


def test_a_chunk_whose_function_cannot_start_leaves_the_object_readable_from_d(
        store: tuple[LocalStore, Refusing]) -> None:
    st, refusing = store
    codec = Codec(4, 2)
    data = os.urandom(2 * MiB)
    refusing.down = {"sion-1"}
    with StoreClient(st.address, st.token, codec=codec) as c:
        c.put("r-1/degraded", data, alloc=_alloc(codec, len(data)))
        assert st.daemon.counters.get("degraded_puts") == 1
        assert c.get("r-1/degraded") == data


def test_a_put_that_kept_fewer_than_d_chunks_fails_and_stores_nothing(store: tuple[LocalStore, Refusing]) -> None:
    st, refusing = store
    codec = Codec(4, 2)
    data = os.urandom(2 * MiB)
    refusing.down = {"sion-1", "sion-2", "sion-4"}
    with StoreClient(st.address, st.token, codec=codec) as c:
        with pytest.raises(StoreError, match=r"3 chunk\(s\) could not be stored"):
            c.put("r-1/lost", data, alloc=_alloc(codec, len(data)))
        with pytest.raises(UnknownKey):
            c.get("r-1/lost")
    assert st.daemon.stats()["objects"] == 0
