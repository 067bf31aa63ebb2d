"""A daemon following several metadata shards (``sdk.local._control.follow_shards`` wiring,
``Follower(owns_group=..., sweep_keeps=...)``) against real metadata handlers in memory: however
many shards and groups, every function of the daemon ends up registered with exactly one shard,
in whole erasure-code groups, each accepted by the shard that owns it (so no two shards hand out
the same block), and the start-up sweep of a dead run is made by its own shard's follower only."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from funcsion_rpc import routing
from funcsion_rpc.gen.metadata import ttypes as T
from metadata_server import MetadataHandler, MetadataState
from sdk.local._control import MetadataSource
from storage_functions.daemon import DaemonConfig, Follower

from .test_control_follower import ADMIN, BS, Clock, InProcessClient, Recorder

FIG9 = Path(__file__).resolve().parents[1] / "data" / "fig9.wds.json"
GROUP = 3                                    # d+p of the shards (2+1) = the daemon's group_size


@settings(max_examples=12, deadline=None)
@given(shards=st.integers(min_value=2, max_value=4), groups=st.integers(min_value=1, max_value=6),
       prefix=st.sampled_from(["sion", "daemon-0", "daemon-1-fn"]))
def test_every_function_is_registered_with_exactly_one_shard(shards: int, groups: int, prefix: str) -> None:
    handlers = [MetadataHandler(MetadataState(block_size=BS, data_chunks=2, parity_chunks=1, shard=k, shards=shards),
                                admin_token=ADMIN) for k in range(shards)]
    cfg = DaemonConfig(block_size=BS, function_memory_mb=64 + 4, group_size=GROUP, max_functions=GROUP * groups,
                       function_prefix=prefix)
    daemon = Recorder(cfg)
    followers = [Follower(MetadataSource(InProcessClient(h)), daemon, clock=Clock(),  # type: ignore[arg-type]
                          owns_group=lambda g, k=k: routing.shard_of_group(prefix, g, shards) == k,
                          sweep_keeps=lambda run_id, k=k: routing.shard_of_run(run_id, shards) != k)
                 for k, h in enumerate(handlers)]
    for f in followers:
        f.hello()
    # each shard asks for far more than the pool holds: every follower registers all it owns
    for h in handlers:
        key = h.register_workflow(ADMIN, FIG9.read_text(), {}, str(FIG9)).key
        h.start_run(ADMIN, key, "funcstore", 0, T.RunHints(capacity_bytes=BS * GROUP * 64 * groups * 4))
    for f in followers:
        for _ in range(4):
            f.step()
    held = [set(h.state.allocator.functions) for h in handlers]
    every = {f"{prefix}-{i}" for i in range(cfg.max_functions)}
    owned = [{f"{prefix}-{i}" for i in range(cfg.max_functions)
              if routing.shard_of_group(prefix, i // GROUP, shards) == k} for k in range(shards)]
    assert held == owned                                      # each shard: exactly the groups it owns
    assert set().union(*held) == every                        # together: the whole pool
    assert sum(map(len, held)) == len(every)                  # and no function twice
    # the start-up sweep: "r-old" (not running anywhere) is swept by its owner's follower only
    sweepers = [k for k, f in enumerate(followers) if f.swept_runs == ["r-old"]]
    assert sweepers == [routing.shard_of_run("r-old", shards)]
    for h in handlers:
        h.state.validate_state()
