"""A daemon's host lost: ``funcsion serve daemon`` killed with -9 and its whole root (buffer
directory, durable table) deleted; a replacement started with an empty root, the same COS and
the same ``--state-id`` restores the durable table from COS (``_control_ship``): every live
object reads back byte-exact (from COS, its chunks stored again in the new functions), the
object freed before the loss stays gone, and the table the replacement ships is its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.cos import open_cos
from storage_functions.daemon._durable import TABLE_LOG
from storage_functions.exceptions import UnknownKey
from tests._waiting import wait_for
from tests.functional.test_daemon_restart import TOKEN

MiB = 1 << 20
PREFIX = "sion/control/daemon/daemon-a"


@contextmanager
def serve(root: Path, cos_dir: Path, lag: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    import json
    import select

    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    with open(root.parent / f"daemon-{time.monotonic_ns()}.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "serve", "daemon", "--root", str(root),
                                 "--cos", cos_dir.as_uri(), "--port", "0", "--token", TOKEN, "--idle-s", "5",
                                 "--group-size", "6", "--max-functions", "12", "--function-memory-mb", "256",
                                 "--state-id", "daemon-a", "--control-ship-lag-s", lag, "--json"],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "serve daemon printed nothing in 60 s"
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        yield proc, int(info["address"].rsplit(":", 1)[1])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def table_shipped(cos: object, table: Path) -> bool:
    pieces = [k for k in cos.list(PREFIX + "/") if "/log-" in k]  # type: ignore[attr-defined]
    return sum(len(cos.get(k)) for k in pieces) == table.stat().st_size  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("lag", ["0.05", "0"])
def test_a_replacement_with_an_empty_root_restores_the_table_from_cos(tmp_path: Path, lag: str) -> None:
    cos_dir = tmp_path / "cos"
    cos = open_cos(cos_dir.as_uri())
    objs = {"r-1/big": os.urandom(2 * MiB + 5), "r-1/small": b"tiny object" * 9, "r-1/mid": os.urandom(300_000)}
    host1 = tmp_path / "host1"
    with serve(host1, cos_dir, lag) as (proc, port):
        c = StoreClient(("127.0.0.1", port), TOKEN, codec=Codec(4, 2), reconnect_s=0)
        for k, v in objs.items():
            c.put(k, v)
        c.put("r-1/freed", os.urandom(MiB + 7))
        wait_for(lambda: c.stats()["pending_uploads"] == 0, 30.0, "uploads", 0.05)
        assert c.free(["r-1/freed"]) == 1
        wait_for(lambda: c.stats()["cos_deletes_pending"] == 0, 30.0, "the freed version's COS delete", 0.05)
        table = host1 / "buffer" / TABLE_LOG
        if lag == "0":                                # synchronous: shipped before each call returned
            assert table_shipped(cos, table)
        else:
            wait_for(lambda: table_shipped(cos, table), 30.0, "the durable table in COS", 0.05)
        proc.kill()                                   # SIGKILL, and the host's disk goes with it
        proc.wait(10)
        c.close()
    shutil.rmtree(host1)
    with serve(tmp_path / "host2", cos_dir, lag) as (_, port2):
        with StoreClient(("127.0.0.1", port2), TOKEN, codec=Codec(4, 2)) as c2:
            stats = c2.stats()
            assert stats["restored_objects"] == len(objs)
            assert stats["table_restored_from_cos_bytes"] > 0
            for k, v in objs.items():
                assert c2.get(k) == v
            with pytest.raises(UnknownKey):
                c2.get("r-1/freed")
            wait_for(lambda: c2.stats().get("restored_chunks", 0) >= 1, 30.0, "chunks stored again", 0.05)
    gens = {k[len(PREFIX) + 1:].split("/")[0] for k in cos.list(PREFIX + "/")}
    assert len(gens) == 1                             # the replacement's generation only
