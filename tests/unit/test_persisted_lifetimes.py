"""The policy of persisted copies with a lifetime (``storage_functions.daemon._persisted``),
driven with explicit times: no expiry while the run runs, ``keep_s`` after its end, a copy
written after the end expires from its write, due copies leave the table once, records
round-trip through their JSON and their COS key."""

from __future__ import annotations

import pytest

from storage_functions.daemon._persisted import PersistedCopies, PersistedCopy, key_of_record, record_key


def test_lifetimes_start_when_the_run_ends_and_due_copies_leave_once() -> None:
    p = PersistedCopies()
    p.record("persisted/r-1/a", 10.0, now=100.0)
    p.record("persisted/r-1/b", 5.0, now=101.0)
    p.record("persisted/r-2/c", 1.0, now=102.0)
    assert p.due(10_000.0) == []  # no run ended: nothing expires, however late
    changed = p.run_ended("r-1", now=200.0)
    assert sorted(c.key for c in changed) == ["persisted/r-1/a", "persisted/r-1/b"]
    assert p.get("persisted/r-1/a").expires_at == 210.0  # type: ignore[union-attr]
    assert p.due(204.9) == []
    assert p.due(205.0) == ["persisted/r-1/b"]
    assert p.due(205.0) == []  # taken out once
    late = p.record("persisted/r-1/d", 3.0, now=300.0)  # written after its run ended
    assert late.expires_at == 303.0
    assert p.forget("persisted/r-1/a") and not p.forget("persisted/r-1/a")
    assert p.due(1e9) == ["persisted/r-1/d"]
    assert list(p.copies) == ["persisted/r-2/c"]
    with pytest.raises(ValueError, match="lifetime"):
        p.record("persisted/r-1/x", float("nan"), now=0.0)


def test_records_round_trip_through_json_and_their_cos_key() -> None:
    c = PersistedCopy("persisted/r-7/dir/name", 2.5, None)
    assert PersistedCopy.from_json(c.to_json()) == c
    rk = record_key("sion", c.key)
    assert rk.startswith("sion/persist-ttl/") and "/dir/" not in rk
    assert key_of_record("sion", rk) == c.key and key_of_record("other", rk) is None
