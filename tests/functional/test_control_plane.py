"""The control plane over the wire, on loopback: a restarted metadata server (journal
replay) offers again the storage instructions nobody acknowledged, and a daemon's control
loop following it over Thrift carries them out; a put the daemon refuses for lack of room
lands in the COS tier and says why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from funcsion_rpc import MetadataClient
from metadata_server import Journal, MetadataHandler, MetadataServer, MetadataState
from sdk._client import Client, Endpoints
from sdk.local._control import follow_metadata
from storage_functions.daemon import DaemonConfig, LocalStore

ADMIN = "admin-secret"


def _serve(journal: Journal | None = None) -> MetadataServer:
    return MetadataServer(MetadataHandler(MetadataState(), journal=journal, admin_token=ADMIN)).start()


def test_a_restarted_metadata_server_offers_again_what_was_not_acknowledged(fig9_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "metadata.journal"
    journal = Journal(path)
    server = _serve(journal)
    admin = MetadataClient(port=server.port, admin_token=ADMIN)
    key = admin.register_workflow(fig9_path.read_text(), {}, str(fig9_path)).key
    admin.register_capacity("sion-0", 64)
    info = admin.start_run(key, "funcstore", 0)
    run = admin.for_run(info.token)
    for name in ("in1", "in2"):
        run.begin_put(info.run_id, "", name, 100, "c")
        run.finish_put(info.run_id, "", name)
        run.delete(info.run_id, name)
    offered = admin.fetch_instructions(0)
    assert [i.object_name for i in offered if i.kind == "drop"] == ["in1", "in2"]
    admin.fetch_instructions(offered[0].seq, 1)        # the daemon acknowledged the first only
    admin.close()
    server.close()
    journal.close()

    journal = Journal(path)                            # restarted: the journal replays
    server = _serve(journal)
    try:
        admin = MetadataClient(port=server.port, admin_token=ADMIN)
        again = admin.fetch_instructions(0)
        assert [(i.seq, i.kind, i.object_name) for i in again] == \
               [(i.seq, i.kind, i.object_name) for i in offered[1:]]
        with LocalStore(str(tmp_path / "store"), config=DaemonConfig(placement="metadata", group_size=2,
                                                                     max_functions=2, function_memory_mb=128)) as st:
            follower = follow_metadata(st.daemon, f"127.0.0.1:{server.port}", ADMIN)
            follower.hello()
            assert follower.drain(5.0)
            follower.close()
            assert follower.carried_out == len(again)
        assert admin.stats()["pending_instructions"] == 0
        admin.close()
    finally:
        server.close()
        journal.close()


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[MetadataServer, LocalStore]]:
    server = _serve()
    try:
        with LocalStore(str(tmp_path), config=DaemonConfig(placement="metadata", group_size=12, max_functions=12,
                                                           function_memory_mb=128)) as st:
            yield server, st
    finally:
        server.close()


def test_a_put_the_daemon_has_no_room_for_lands_in_cos_and_says_why(fig9_path: Path,
                                                                    split: tuple[MetadataServer, LocalStore]) -> None:
    server, st = split
    ep = Endpoints(f"127.0.0.1:{server.port}", f"{st.address[0]}:{st.address[1]}", st.token, ADMIN)
    with Client(ep) as driver:
        driver.metadata.register_capacity("sion-20", 64)  # left by an earlier daemon with a larger pool
        run = driver.start_run(driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path)))
        run.put("in1", b"x" * 1000)
        status = run.lookup("in1")
        assert status.placement.tier == "cos"
        assert status.tier_reason.startswith("the store refused its placement: ")
        assert "function 20 is outside the pool of 12 functions" in status.tier_reason
        assert run.bind(function="F1").get("in1") == b"x" * 1000
        assert st.daemon.stats()["objects"] == 0            # nothing in function memory
        stats = driver.metadata.stats()
        assert stats["allocated_bytes"] == 0 and stats["counters"]["cos_after_refusal"] == 1
        run.end_run("aborted")
        run.close()


@pytest.mark.parametrize(("argv", "env", "match"), [
    (["--metadata", "127.0.0.1:{port}"], {}, "needs the metadata server's admin token: pass --admin-token TOKEN "
                                             "or set FUNCSION_ADMIN_TOKEN"),
    (["--metadata", "127.0.0.1"], {"FUNCSION_ADMIN_TOKEN": ADMIN}, "give the metadata server's port too"),
    (["--admin-token", ADMIN], {}, "--admin-token is for --metadata HOST:PORT"),
    (["--metadata", "127.0.0.1:{port}", "--admin-token", "wrong"], {}, "wrong admin token"),
    (["--metadata", "127.0.0.1:{port}", "--block-size", "65536"], {"FUNCSION_ADMIN_TOKEN": ADMIN},
     "the metadata server allocates blocks of 1,048,576 bytes, this daemon stores blocks of 65,536"),
])
def test_serve_daemon_refuses_to_follow_what_it_cannot(argv: list[str], env: dict[str, str], match: str,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    monkeypatch.delenv("FUNCSION_ADMIN_TOKEN", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    server = _serve()
    try:
        argv = [a.format(port=server.port) for a in argv]
        assert main(["serve", "daemon", "--port", "0", "--root", str(tmp_path), *argv]) == 2
    finally:
        server.close()
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err
