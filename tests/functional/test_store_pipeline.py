"""``StoreClient.put_many``: many objects in one pipelined exchange with the daemon
(every PUT sent before the first reply is read, up to the window), each
object's own outcome (a refused one does not stop the rest, and the
connection stays in step), the same stored bytes as one ``put`` each."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import PutResult, StoreClient
from storage_functions.auth import mint_run_token
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import AuthError, ObjectTooLarge

MiB = 1 << 20


class RecordingClient(StoreClient):
    """The real client, noting the order of its sends and reply reads on the wire."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wire: list[str] = []

    def _send_put(self, *args: Any, **kwargs: Any) -> Any:
        self.wire.append("send")
        return super()._send_put(*args, **kwargs)

    def _reply(self, *args: Any, **kwargs: Any) -> Any:
        self.wire.append("reply")
        return super()._reply(*args, **kwargs)


@pytest.fixture(scope="module")
def store() -> Iterator[LocalStore]:
    with LocalStore(function_memory_mb=256, group_size=6, max_functions=12, idle_s=5.0,
                    max_object_bytes=8 * MiB) as st:
        yield st


def test_put_many_sends_every_put_before_reading_a_reply(store: LocalStore) -> None:
    values = {f"pipe/{i}": os.urandom(4096 if i % 3 else 2 * MiB) for i in range(20)}  # slices and coded
    with RecordingClient(store.address, store.token, codec=Codec(4, 2)) as c:
        results = c.put_many([(k, v, None) for k, v in values.items()])
        assert c.wire == ["send"] * 20 + ["reply"] * 20          # one round trip each way
        assert [r.key for r in results if isinstance(r, PutResult)] == list(values)
        assert all(c.get(k) == v for k, v in values.items())


def test_a_long_batch_keeps_at_most_a_window_of_puts_ahead(store: LocalStore) -> None:
    with RecordingClient(store.address, store.token) as c:
        n = c.PIPELINE_WINDOW * 2 + 5
        results = c.put_many([(f"win/{i}", b"x" * 100, None) for i in range(n)])
        assert all(isinstance(r, PutResult) for r in results) and len(results) == n
        ahead = max(c.wire[:k].count("send") - c.wire[:k].count("reply") for k in range(len(c.wire) + 1))
        assert ahead == c.PIPELINE_WINDOW


def test_a_refused_put_in_a_batch_is_its_own_outcome_and_the_stream_stays_in_step(store: LocalStore) -> None:
    with StoreClient(store.address, mint_run_token(store.token, "run-a"), pool_size=1,
                     max_object_bytes=1 * MiB) as a:
        results = a.put_many([("run-a/one", b"1" * 5000, None), ("run-b/foreign", b"2" * 3 * 1024, None),
                              ("run-a/big", os.urandom(2 * MiB), None), ("run-a/two", b"3", None)])
        assert isinstance(results[0], PutResult) and isinstance(results[3], PutResult)
        assert isinstance(results[1], AuthError) and "run-a/" in str(results[1])  # the daemon refused it
        assert isinstance(results[2], ObjectTooLarge)                              # refused before sending
        assert a.get("run-a/one") == b"1" * 5000 and a.get("run-a/two") == b"3"    # same connection, in step
