"""``put_many`` and ``get_many`` make one metadata round trip per phase, however many
objects they touch, also when a task is retried after some of its writes finished."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from funcsion_rpc import MetadataClient
from sdk._client import Client, parse_addr
from sdk.local._stack import Stack

R = TypeVar("R")

WDS = json.dumps({"app": "batched", "workflow_id": 1, "category": "test", "spec": {
    "write": {"stage_id": 1, "functions": [
        {"start": True, "name": "w", "input": ["src"], "output": ["a", "b", "c"], "next": ["r"]}]},
    "read": {"stage_id": 2, "functions": [
        {"start": False, "name": "r", "input": ["a", "b", "c"], "output": [], "next": []}]}}})


class CountingClient(MetadataClient):
    """The real client, counting its round trips (views made by ``for_run`` share the count)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.round_trips = [0]

    def _call(self, fn: Callable[[Any], R], **kw: Any) -> R:
        self.round_trips[0] += 1
        return super()._call(fn, **kw)


def test_put_many_and_get_many_are_one_round_trip_each(stack: Stack) -> None:
    host, port = parse_addr(stack.endpoints.metadata)
    md = CountingClient(host, port, admin_token=stack.endpoints.admin_token)
    trips = md.round_trips
    with md, Client(stack.endpoints, metadata=md) as driver:
        run = driver.start_run(driver.register_workflow(WDS))
        run.put("src", b"s")
        w = run.bind(function="w")

        before = trips[0]
        assert w.put_many({"a": b"1" * 5000, "b": b"2"}) is False
        assert trips[0] - before == 2                     # begin_put_batch, finish_put_batch

        before = trips[0]                                 # the task retried: both writes finished before
        assert w.put_many({"a": b"1" * 5000, "b": b"2"}) is False
        assert trips[0] - before == 2                     # no lookup per object

        assert w.put_many({"c": b"3"}) is True            # the last output commits w
        r = run.bind(function="r")
        before = trips[0]
        assert r.get_many(["a", "b", "c"]) == {"a": b"1" * 5000, "b": b"2", "c": b"3"}
        # read_batch, then one read_done for the reads answered as last ones (funcstore releases
        # their function memory once this reader has the bytes)
        assert trips[0] - before == 2
        r.commit()
        run.end_run()
        run.close()


def test_put_many_sends_its_values_to_the_store_in_one_round_trip(stack: Stack) -> None:
    from sdk._store_client import StoreClient

    class RecordingStore(StoreClient):
        wire: list[str] = []

        def _send_put(self, *args: Any, **kwargs: Any) -> Any:
            self.wire.append("send")
            return super()._send_put(*args, **kwargs)

        def _reply(self, *args: Any, **kwargs: Any) -> Any:
            self.wire.append("reply")
            return super()._reply(*args, **kwargs)

    with stack.client() as driver:
        run = driver.start_run(driver.register_workflow(WDS))
        run.put("src", b"s")
        store = RecordingStore(parse_addr(stack.endpoints.daemon), stack.endpoints.for_run(run.run_id).store_token)
        w = Client(stack.endpoints, run_id=run.run_id, token=run.token, function="w", store=store)
        assert w.put_many({"a": b"1" * 5000, "b": b"2", "c": b"3"}) is True
        assert store.wire == ["send"] * 3 + ["reply"] * 3
        r = run.bind(function="r")
        assert r.get_many(["a", "b", "c"]) == {"a": b"1" * 5000, "b": b"2", "c": b"3"}
        r.commit()
        run.end_run()
        w.close()
        store.close()
        run.close()
