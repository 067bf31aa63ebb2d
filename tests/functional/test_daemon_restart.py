"""Daemon restart without loss: ``funcsion serve daemon`` killed with -9 and
started again on the same root rebuilds its object table from the durable log
(``storage_functions.daemon._restore``). Objects uploaded to COS, one still only
in the persistent buffer (COS was unreachable when the daemon died) and one freed
before the kill: after the restart the live ones read back byte-exact (their
chunks stored again in the new functions' memory), the buffered one is uploaded,
the freed one stays gone. The storage functions are real processes; the daemon's
platform dies with it, as its instances do."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.cos import open_cos
from storage_functions.daemon import cos_object_key
from storage_functions.exceptions import UnknownKey
from tests._waiting import wait_for

MiB = 1 << 20
TOKEN = "restart-test-token-0123456789abcdef"


@contextmanager
def serve_daemon(root: Path, port: int = 0) -> Iterator[tuple[subprocess.Popen[str], int]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    with open(root / f"daemon-{time.monotonic_ns()}.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "serve", "daemon", "--root", str(root),
                                 "--port", str(port), "--token", TOKEN, "--idle-s", "5", "--group-size", "6",
                                 "--max-functions", "12", "--function-memory-mb", "256", "--json"],
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


def cos_holds(cos: Any, data: bytes) -> bool:
    """Whether some COS object of the daemon's holds ``data`` (its own object, or a pack)."""
    return any(data in cos.get(k) for k in cos.list("sion/objects/"))


@pytest.mark.slow
def test_kill_9_and_restart_loses_nothing_and_resurrects_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    objs = {"r-1/big": os.urandom(3 * MiB + 5), "r-1/small": b"tiny object" * 9, "r-1/mid": os.urandom(300_000)}
    buffered = os.urandom(MiB + 3)  # a file of its own in the buffer
    small = os.urandom(5000)  # in memory and a buffer segment
    cos_dir = root / "cos"
    with serve_daemon(root) as (proc, port):
        c = StoreClient(("127.0.0.1", port), TOKEN, codec=Codec(4, 2), reconnect_s=0)
        for k, v in objs.items():
            c.put(k, v)
        c.put("r-1/freed", os.urandom(MiB + 7))  # an object of its own in COS (a small one could share a pack)
        wait_for(lambda: c.stats()["pending_uploads"] == 0, 30.0, "uploads", 0.05)
        assert c.free(["r-1/freed"]) == 1
        # COS deletes run on the uploader threads (logged when queued: a restart re-issues one a kill cut
        # off); this one, or its pack's if it shared one, lands before COS goes away
        wait_for(lambda: c.stats()["cos_deletes_pending"] == 0, 30.0, "the freed version's COS delete", 0.05)
        # COS becomes unreachable: the next object stays in the persistent buffer
        os.rename(cos_dir, root / "cos.away")
        cos_dir.write_bytes(b"not a directory")
        c.put("r-1/buffered", buffered)
        c.put("r-1/tiny", small)
        assert c.stats()["pending_uploads"] == 2
        assert c.get("r-1/buffered") == buffered
        assert c.get("r-1/tiny") == small
        proc.kill()  # SIGKILL: nothing is flushed, closed or uploaded
        proc.wait(10)
        c.close()
    cos_dir.unlink()
    os.rename(root / "cos.away", cos_dir)
    cos = open_cos(f"file://{cos_dir}")
    assert not cos_holds(cos, buffered) and not cos_holds(cos, small)
    with serve_daemon(root, port) as (_, port2):
        assert port2 == port
        with StoreClient(("127.0.0.1", port), TOKEN, codec=Codec(4, 2)) as c2:
            stats = c2.stats()
            assert stats["daemon_restarts"] == 1 and stats["restored_objects"] == 5
            for k, v in dict(objs, **{"r-1/tiny": small}).items():
                assert c2.get(k) == v
            assert c2.get("r-1/buffered") == buffered
            with pytest.raises(UnknownKey):
                c2.get("r-1/freed")
            wait_for(lambda: c2.stats()["pending_uploads"] == 0, 30.0, "the buffered object's upload", 0.05)
            assert cos.exists(cos_object_key("sion", "r-1/buffered", 1))  # large: an object of its own
            assert cos_holds(cos, small)  # from its buffer segment
            assert not cos.exists(cos_object_key("sion", "r-1/freed", 1))
            # the new functions hold every chunk again: reads come from memory, not COS
            wait_for(lambda: c2.stats().get("restored_chunks", 0) >= 4 * 6 // 6, 30.0, "chunks stored again", 0.05)
            before = c2.stats()["cos_fallbacks"]
            for k, v in objs.items():
                assert c2.get(k) == v
            assert c2.stats()["cos_fallbacks"] == before
            assert [n for n in os.listdir(root / "buffer") if n.endswith((".buf", ".seg"))] == []
    shutil.rmtree(root, ignore_errors=True)
