"""The write-behind's pure policy (``_upload_plan``) and the buffer's segment files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_functions.daemon._segments import SegmentLog
from storage_functions.daemon._upload_plan import UploadPolicy, UploadQueue


def test_uncoded_versions_go_at_once_and_coded_ones_wait_for_the_parity_delay() -> None:
    pol = UploadPolicy(delay_s=0.0, parity_delay_s=2.0)
    assert pol.due(100.0, min_parity=0) == 100.0  # SION: at once
    assert pol.due(100.0, min_parity=2) == 102.0
    assert pol.coded(2) and not pol.coded(0)
    assert UploadPolicy(delay_s=3.0, parity_delay_s=2.0).due(100.0, 1) == 103.0  # the larger wins
    assert not UploadPolicy(parity_delay_s=0.0).coded(2)


def test_a_predicted_expiry_defers_a_coded_upload_within_the_cap() -> None:
    pol = UploadPolicy(parity_delay_s=1.0, expiry_grace_s=0.5, max_defer_s=30.0)
    assert pol.due(100.0, 1, expires_at=110.0) == 110.5
    assert pol.due(100.0, 1, expires_at=100.2) == 101.0  # the parity delay still holds
    assert pol.due(100.0, 1, expires_at=1e9) == 130.0  # capped
    assert pol.due(100.0, 0, expires_at=110.0) == 100.0  # uncoded: no deferral
    assert UploadPolicy(parity_delay_s=0.0).due(100.0, 2, expires_at=110.0) == 100.0  # SION: off


def test_bad_policy_values_are_refused() -> None:
    with pytest.raises(ValueError, match="parity_delay_s"):
        UploadPolicy(parity_delay_s=-1.0)


def test_queue_pops_due_items_in_order_and_batches() -> None:
    q: UploadQueue[str] = UploadQueue()
    q.push("c", 3.0)
    q.push("a", 1.0)
    q.push("b", 2.0)
    assert q.next_due() == 1.0
    assert q.pop_due(0.5, 10) == []
    assert q.pop_due(2.5, 10) == ["a", "b"]
    assert len(q) == 1 and "c" in q
    assert q.pop_all(10) == ["c"] and len(q) == 0 and q.next_due() is None


def test_queue_expedite_and_drop() -> None:
    q: UploadQueue[str] = UploadQueue()
    q.push("x", 10.0)
    q.push("y", 20.0)
    assert q.expedite("y", 1.0)
    assert not q.expedite("y", 1.0)  # due already
    assert not q.expedite("nope", 1.0)
    assert q.pop_due(1.0, 5) == ["y"]  # once, although its old entry is still in the heap
    assert q.drop("x") and not q.drop("x")
    assert q.pop_due(100.0, 5) == [] and q.next_due() is None


def test_segments_append_in_one_file_and_go_when_nothing_is_held(tmp_path: Path) -> None:
    seg = SegmentLog(str(tmp_path), segment_bytes=10_000)
    a, off_a = seg.append(b"A" * 6000)
    b, off_b = seg.append(b"B" * 6000)  # still the same segment: it was under the limit
    assert a == b and (off_a, off_b) == (0, 6000)
    c, off_c = seg.append(b"C" * 10)  # past the limit: a new segment
    assert c != a and off_c == 0
    with open(seg.path(a), "rb") as fh:
        assert fh.read() == b"A" * 6000 + b"B" * 6000
    seg.release(a)
    assert os.path.exists(seg.path(a))  # B is still held there
    seg.release(a)
    assert not os.path.exists(seg.path(a)) and seg.deleted == 1
    seg.release(c)
    assert os.path.exists(seg.path(c))  # the open segment stays until it rolls or closes
    seg.close()
    assert seg.files() == []


def test_segments_sweep_keeps_adopted_ones_and_never_reuses_a_name(tmp_path: Path) -> None:
    first = SegmentLog(str(tmp_path))
    kept, _ = first.append(b"kept")
    assert first._fd is not None
    os.close(first._fd)  # a kill: the segment is not closed by the log
    first._fd = None
    stray = tmp_path / "seg-0123456789ab-000001.seg"
    stray.write_bytes(b"torn")
    again = SegmentLog(str(tmp_path))
    again.adopt(kept)
    assert again.sweep() == 1 and not stray.exists()
    new, _ = again.append(b"new")
    assert new != kept and sorted(again.files()) == sorted([kept, new])
