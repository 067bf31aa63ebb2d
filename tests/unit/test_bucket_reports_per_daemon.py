"""With several daemons each reports the GC buckets of its own functions: one daemon's report
replaces what it said before and leaves the other daemons' functions as they reported them (a
report replacing the whole pool let daemon B's degraded functions take new data again as soon as
daemon A reported)."""

from __future__ import annotations

from metadata_server._allocator import Allocator
from metadata_server._buckets import GcBuckets


def pool() -> GcBuckets:
    a = Allocator(block_size=100, data_chunks=2, parity_chunks=1)
    for d in ("daemon-0", "daemon-1"):
        for i in range(3):
            a.register(f"{d}-f{i}", 4, d)
    return GcBuckets(a)


def test_one_daemons_report_leaves_the_others_functions_alone() -> None:
    b = pool()
    b.report({"daemon-1-f0": "degraded"}, "daemon-1")
    assert b.changes({}, "daemon-0") is False              # daemon-0: all newest, as before
    b.report({"daemon-0-f1": "active"}, "daemon-0")
    assert b.state == {"daemon-1-f0": "degraded", "daemon-0-f1": "active"}
    assert not b.sealed.admits("daemon-1-f0")              # still degraded: takes no new data
    b.report({}, "daemon-1")                               # daemon-1's window moved on
    assert b.state == {"daemon-0-f1": "active"}
    assert b.sealed.admits("daemon-1-f0")


def test_one_daemon_reports_the_whole_pool() -> None:
    b = pool()
    b.report({"daemon-1-f0": "degraded", "daemon-0-f0": "released"})
    b.report({"daemon-0-f2": "active"})
    assert b.state == {"daemon-0-f2": "active"}
