"""The task decorator's per-container client cache: endpoints carry a
run-scoped store token, so each run has its own client; only the few most
recent stay open."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sdk import Endpoints
from sdk import _task
from sdk._task import MAX_CACHED_CLIENTS, RunContext, _client_for


@pytest.fixture
def cache() -> Iterator[None]:
    saved = dict(_task._clients)
    _task._clients.clear()
    yield
    for c in _task._clients.values():
        c.close()
    _task._clients.clear()
    _task._clients.update(saved)


def ctx(run_id: str) -> RunContext:
    ep = Endpoints("127.0.0.1:1", "127.0.0.1:2", "store-secret", "admin").for_run(run_id)
    return RunContext(ep, run_id, "metadata-token", "f")


def test_warm_containers_keep_a_few_recent_runs_clients_and_close_the_rest(cache: None) -> None:
    first = _client_for(ctx("r-0"))
    assert _client_for(ctx("r-0")) is first                  # a warm invocation of the same run reuses it
    made = [first] + [_client_for(ctx(f"r-{i}")) for i in range(1, MAX_CACHED_CLIENTS + 2)]
    assert len(_task._clients) == MAX_CACHED_CLIENTS
    assert list(_task._clients.values()) == made[-MAX_CACHED_CLIENTS:]
    for old in made[:-MAX_CACHED_CLIENTS]:
        assert old._store._closed                            # its connections were closed
    assert not made[-1]._store._closed
    assert all(ep.admin_token == "" and ep.store_token.startswith("run:") for ep in _task._clients)


def test_the_stacks_block_size_and_code_reach_the_tasks_codec() -> None:
    """A task codes an object exactly when the stack's allocator does: the block size and
    erasure code travel in the event (when not the defaults) and in stack.json."""
    from sdk.cli._common import stack_endpoints

    ep = Endpoints("127.0.0.1:1", "127.0.0.1:2", "store", block_size=256 << 10, ec_data=4, ec_parity=2)
    ctx = RunContext.from_event({"funcsion": {**ep.for_run("r-1").to_dict(), "token": "t"},
                                 "run_id": "r-1", "function": "f"})
    codec = ctx.endpoints.codec()
    assert (codec.threshold, codec.d, codec.p) == (256 << 10, 4, 2)
    assert "block_size" not in Endpoints("a:1", "b:2", "s", block_size=1 << 20).to_dict()  # the default
    running = {"metadata": "a:1", "daemon": "b:2", "store_token": "s", "admin_token": "x", "block_size": 65536}
    assert stack_endpoints(running).codec().threshold == 65536
    old = {k: v for k, v in running.items() if k != "block_size"}               # a stack.json from before
    assert stack_endpoints(old).codec().threshold == 1 << 20
