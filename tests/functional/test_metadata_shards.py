"""Two metadata shards over real Thrift on loopback (issue 31 item 2): each run is owned by the
shard its id hashes to, and a shard mints only ids it owns; each storage function's capacity is
registered with exactly one shard; ``sdk.Client`` routes every call by run id; a call for a run
or a function sent to a shard that does not own it is refused, naming the owner, never answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcsion_rpc import MetadataClient, routing
from funcsion_rpc import errors as E
from metadata_server import MetadataHandler, MetadataServer, MetadataState
from sdk import Endpoints
from sdk._client import Client

ADMIN = "admin-secret"
SHARDS = 2


@pytest.fixture
def shards():
    servers = []
    for i in range(SHARDS):
        state = MetadataState(block_size=4096, data_chunks=2, parity_chunks=1, shard=i, shards=SHARDS)
        servers.append(MetadataServer(MetadataHandler(state, admin_token=ADMIN), tick_interval_s=0.05).start())
    admins = [MetadataClient(port=s.port, admin_token=ADMIN) for s in servers]
    # every function with exactly the shard its name hashes to (what each daemon's follower does)
    for n in range(8):
        name = f"daemon-0-fn-{n}"
        admins[routing.shard_of_function(name, SHARDS, 3)].register_capacity(name, 64)
    yield servers, admins
    for c in admins:
        c.close()
    for s in servers:
        s.close()
        s.handler.state.validate_state()


def endpoints(servers) -> Endpoints:
    # the daemon is never dialled here: these tests exercise the metadata path only
    return Endpoints(";".join(f"127.0.0.1:{s.port}" for s in servers), "127.0.0.1:9", "store-token",
                     admin_token=ADMIN, block_size=4096, ec_data=2, ec_parity=1)


def test_runs_spread_over_the_shards_and_each_is_owned_where_it_was_minted(shards, fig9_path: Path) -> None:
    servers, _ = shards
    with Client(endpoints(servers)) as driver:
        key = driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path))
        runs = [driver.start_run(key) for _ in range(6)]
        try:
            ids = [r.run_id for r in runs]
            assert len(set(ids)) == len(ids)                         # no two shards mint the same id
            owners = [routing.shard_of_run(i, SHARDS) for i in ids]
            assert set(owners) == {0, 1}                              # both shards carry runs
            for run_id, owner in zip(ids, owners):
                assert run_id in servers[owner].handler.state.runs
                assert run_id not in servers[1 - owner].handler.state.runs
            # a put and a get of a run go to its shard through the routed client
            for r in runs:
                g = r.metadata.begin_put(r.run_id, "", "x", 100, "sum-x", adhoc=True)
                assert g.placement.kind == "slice"
                r.metadata.finish_put(r.run_id, "", "x")
                assert r.lookup("x").state == "readable"
            for r in runs:
                r.end_run()
                assert servers[routing.shard_of_run(r.run_id, SHARDS)].handler.state.runs[r.run_id].state != "running"
        finally:
            for r in runs:
                r.close()
    # every workflow is known to every shard; functions were placed only by their own shard
    for s in servers:
        assert key in s.handler.state.workflows
        mine = {f for f in s.handler.state.allocator.functions}
        assert all(routing.shard_of_function(f, SHARDS, 3) == s.handler.state.shard for f in mine)


def test_a_run_sent_to_the_wrong_shard_is_refused_never_answered(shards, fig9_path: Path) -> None:
    servers, admins = shards
    with Client(endpoints(servers)) as driver:
        key = driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path))
        run = driver.start_run(key)
        try:
            run.metadata.begin_put(run.run_id, "", "x", 100, "sum-x", adhoc=True)
            run.metadata.finish_put(run.run_id, "", "x")
            owner = routing.shard_of_run(run.run_id, SHARDS)
            wrong = admins[1 - owner]
            for caller in (wrong.for_run(run.token), wrong):           # the run's token, the admin's
                with pytest.raises(E.InvalidRequest, match=rf"run '{run.run_id}' belongs to metadata shard "
                                                           rf"{owner} of 2, not this one \({1 - owner}\)"):
                    caller.get(run.run_id, "f1", "x")
                with pytest.raises(E.InvalidRequest, match="belongs to metadata shard"):
                    caller.lookup(run.run_id, "x")
                with pytest.raises(E.InvalidRequest, match="belongs to metadata shard"):
                    caller.end_run(run.run_id, "failed")
            # the owner still has it, untouched
            assert run.lookup("x").state == "readable"
        finally:
            run.close()


def test_a_function_registered_with_the_wrong_shard_is_refused(shards) -> None:
    _, admins = shards
    name = next(f"daemon-1-fn-{i}" for i in range(100) if routing.shard_of_function(f"daemon-1-fn-{i}", 2, 3) == 0)
    with pytest.raises(E.InvalidRequest, match=rf"storage function '{name}' belongs to metadata shard 0 of 2, "
                                               r"not this one \(1\)"):
        admins[1].register_capacity(name, 4)
    assert admins[0].register_capacity(name, 4) >= 4


def test_a_shard_is_an_index_into_the_list() -> None:
    with pytest.raises(ValueError, match="metadata shard 2 of 2"):
        MetadataState(shard=2, shards=2)


def test_runs_start_on_the_least_loaded_shard_that_answers(shards, fig9_path: Path) -> None:
    servers, _ = shards
    with Client(endpoints(servers)) as driver:
        key = driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path))
        first, second = driver.start_run(key), driver.start_run(key)
        try:
            # the second goes where fewer runs are running: the other shard
            assert {routing.shard_of_run(r.run_id, SHARDS) for r in (first, second)} == {0, 1}
            down = routing.shard_of_run(first.run_id, SHARDS)
            servers[down].close()                  # a shard that does not answer starts no run
            for _ in range(3):
                run = driver.start_run(key)
                assert routing.shard_of_run(run.run_id, SHARDS) == 1 - down
                run.close()
        finally:
            first.close()
            second.close()


def test_serve_metadata_takes_its_shard(capsys) -> None:
    import argparse

    from sdk.cli import serve_metadata

    p = argparse.ArgumentParser()
    serve_metadata.add_arguments(p)
    server, journal = serve_metadata.build(p.parse_args(["--port", "0", "--shard", "1/3", "--admin-token", ADMIN]))
    try:
        assert (server.handler.state.shard, server.handler.state.shards) == (1, 3)
    finally:
        server.close()
    for bad in ("3/3", "1", "a/2", "-1/2"):
        with pytest.raises(SystemExit):
            p.parse_args([f"--shard={bad}"])
        assert "expected I/M" in capsys.readouterr().err


def test_a_shard_replays_its_run_ids_and_refuses_to_restart_as_another(tmp_path: Path, fig9_path: Path) -> None:
    from metadata_server import Journal

    path = str(tmp_path / "shard.journal")

    def handler(shard: int) -> MetadataHandler:
        return MetadataHandler(MetadataState(block_size=4096, data_chunks=2, parity_chunks=1, shard=shard,
                                             shards=SHARDS), journal=Journal(path), admin_token=ADMIN)

    h = handler(1)
    key = h.register_workflow(ADMIN, fig9_path.read_text(), {}, str(fig9_path)).key
    ids = [h.start_run(ADMIN, key, "funcstore", 0, None).run_id for _ in range(3)]
    assert all(routing.shard_of_run(i, SHARDS) == 1 for i in ids)
    h.journal.close()
    again = handler(1)                        # the same shard: the same runs, new ids follow them
    assert set(ids) <= set(again.state.runs)
    fresh = again.start_run(ADMIN, key, "funcstore", 0, None).run_id
    assert fresh not in ids and routing.shard_of_run(fresh, SHARDS) == 1
    again.journal.close()
    with pytest.raises(E.InvalidRequest, match=r"restart it with the --shard I/M it wrote the journal with"):
        handler(0)


def test_stack_option_takes_several_shards_in_order() -> None:
    from sdk.cli._common import stack_option

    env = {"FUNCSION_ADMIN_TOKEN": "a", "FUNCSION_STORE_TOKEN": "s"}
    repeated = stack_option("metadata=h1:1,metadata=h2:2,daemon=d:3", env)
    joined = stack_option("metadata=h1:1;h2:2,daemon=d:3", env)
    assert repeated.metadata_shards == joined.metadata_shards == ("h1:1", "h2:2")
    assert stack_option("metadata=h1:1,daemon=d:3", env).metadata_shards == ("h1:1",)
    with pytest.raises(ValueError, match="not host:port"):
        stack_option("metadata=h1:1;h2,daemon=d:3", env)
    # several daemons (issue 31 item 1): daemon= repeated or joined, in order, daemon-K by position
    two = stack_option("metadata=h1:1,daemon=d:3,daemon=d:4", env)
    assert two.daemons == stack_option("metadata=h1:1,daemon=d:3;d:4", env).daemons == (
        ("daemon-0", "d:3"), ("daemon-1", "d:4"))
    with pytest.raises(ValueError, match="daemon=HOST:PORT"):
        stack_option("metadata=h1:1,daemon=d:3,cos=x,cos=y", env)
