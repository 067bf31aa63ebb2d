"""A commit's freed objects leave function memory from the committing client itself, not
only when the daemon's control loop carries out the metadata server's drop (in a split
deployment that loop polls; here it is stopped, so only the client can have freed them)."""

from __future__ import annotations

from pathlib import Path

from sdk._config import Config
from sdk.local._stack import Stack

LIFETIME = Path(__file__).parent / "lifetimewf" / "lifetime.wds.json"


def test_the_committing_client_frees_what_its_commit_freed(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path), env={})
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        assert stack.follower is not None
        stack.follower.close()                             # no drop reaches the daemon but the client's
        d = stack.store.daemon
        driver = stack.client()
        run = driver.start_run(driver.register_workflow(LIFETIME.read_text(), {}, str(LIFETIME)))
        run.put("seed", b"x" * 10)
        writer = run.bind(function="writer")
        assert writer.get("seed") == b"x" * 10
        writer.put("short", b"s" * 50_000)
        writer.put("long", b"l" * 50_000)                 # the writer's last output: its reads commit
        assert d.table.latest(f"{run.run_id}/seed") is None     # seed's only reader committed
        a = run.bind(function="a")
        assert a.get("short") == b"s" * 50_000
        assert d.table.latest(f"{run.run_id}/short") is not None   # read, not yet committed
        a.put("mid", b"m" * 10)                            # a's last output: short's last reader commits
        assert d.table.latest(f"{run.run_id}/short") is None
        assert d.table.latest(f"{run.run_id}/long") is not None    # its reader has not come
        run.end_run("aborted")
        run.close()
        driver.close()
