"""A persisted copy's lifetime survives the daemon: a new daemon process over the same COS
reads the records an earlier one left, starts the lifetimes of runs that ended while no
daemon ran (its start-up sweep), and its sweep deletes the copy and its record."""

from __future__ import annotations

import os

from sdk._store_client import StoreClient
from storage_functions.cos import open_cos
from storage_functions.daemon import LocalStore
from storage_functions.daemon._persisted import record_key
from tests._waiting import wait_for


def test_a_restarted_daemon_sweeps_the_copies_an_earlier_one_recorded(tmp_path: os.PathLike[str]) -> None:
    cos_url = f"file://{tmp_path}/cos"
    key, forever = "persisted/r-9/model", "persisted/r-9/notes"
    with LocalStore(str(tmp_path / "a"), cos_url=cos_url, persist_sweep_s=0.05) as first, \
            StoreClient(first.address, first.token) as c:
        c.cos_put(key, b"weights", meta={"keep_s": 0.5})
        c.cos_put(forever, b"kept")
        assert first.daemon.persisted.lookup(key) == {"keep_s": 0.5, "expires_at": None}
        assert first.daemon.persisted.lookup(forever) is None
        prefix = first.config.cos_prefix
    cos = open_cos(cos_url)
    assert cos.list(record_key(prefix, "")) == [record_key(prefix, key)]  # the record is durable
    with LocalStore(str(tmp_path / "b"), cos_url=cos_url, persist_sweep_s=0.05) as second:
        assert second.daemon.persisted.lookup(key) == {"keep_s": 0.5, "expires_at": None}
        assert second.daemon.sweep_runs(lambda run: False) is not None  # r-9 is not running any more
        wait_for(lambda: key not in cos.list("persisted/"), 20, "the new daemon's sweep deleting the copy")
        assert second.daemon.persisted.lookup(key) is None
        assert cos.list(record_key(second.config.cos_prefix, "")) == []
        assert cos.list("persisted/") == [forever]
