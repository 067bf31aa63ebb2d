"""The journal shipped to COS and restored from there: a replacement with an empty state
directory gets the snapshot and the log pieces and carries on exactly; what a lagging upload
lost is exactly what followed the last shipped piece; a torn last piece is cut at its last
whole record and pieces after a gap are ignored; old generations are deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata_server._ship import JournalShipper, control_prefix, restore_journal
from storage_functions.cos import LocalCOS
from tests.unit.test_metadata_compaction import fingerprint, handler, one_run, setup

PREFIX = control_prefix("deploy/x", "metadata", "metadata-0")


def started(tmp_path: Path, compact_bytes: int = 16 << 10) -> tuple:
    cos = LocalCOS(tmp_path / "cos")
    h = handler(tmp_path / "host1" / "j", compact_bytes)
    setup(h)
    return cos, h, JournalShipper(h.journal, cos, PREFIX, lag_s=0.5, clock=lambda: 1000.0)


def lose_host_and_restore(cos: LocalCOS, h, tmp_path: Path, name: str = "host2"):
    h.journal.close()                       # the old process is gone (its files with its host)
    path = tmp_path / name / "j"
    report = restore_journal(cos, PREFIX, path)
    return report, handler(path, h.journal.compact_bytes)


def test_control_prefix_names_the_process():
    assert PREFIX == "deploy/x/control/metadata/metadata-0"
    assert control_prefix("", "daemon", "daemon-3") == "control/daemon/daemon-3"
    with pytest.raises(ValueError, match="state id '../x' must be"):
        control_prefix("p", "metadata", "../x")


def test_a_replacement_restores_snapshot_and_tail_and_carries_on(tmp_path: Path):
    cos, h, ship = started(tmp_path)
    for i in range(300):
        one_run(h, i)
        ship.ship_once()
    live = one_run(h, 300, end=False, commit_all=False)
    ship.ship_once()
    assert h.journal.compactions >= 2
    gens = {k.split("/")[-2] for k in cos.list(PREFIX + "/")}
    assert len(gens) == 1                   # older generations deleted once the new one was up
    want, seq = fingerprint(h.state), h.journal.seq
    report, h2 = lose_host_and_restore(cos, h, tmp_path)
    assert report.base > 0 and report.ignored == 0
    assert h2.journal.seq == seq and fingerprint(h2.state) == want
    assert h2.state.runs[live].state == "running"
    one_run(h2, 301)                        # carries on, and ships its own generation
    ship2 = JournalShipper(h2.journal, cos, PREFIX, lag_s=0.5, clock=lambda: 2000.0)
    ship2.stop()                            # stop ships what is left
    want2 = fingerprint(h2.state)
    _, h3 = lose_host_and_restore(cos, h2, tmp_path, "host3")
    assert fingerprint(h3.state) == want2
    h3.journal.close()


def test_what_a_lagging_upload_loses_is_exactly_what_followed_the_last_piece(tmp_path: Path):
    cos, h, ship = started(tmp_path, compact_bytes=1 << 30)
    for i in range(20):
        one_run(h, i)
    ship.ship_once()
    shipped, seq = fingerprint(h.state), h.journal.seq
    for i in range(20, 25):                 # answered, journaled locally, inside the lag window
        one_run(h, i)
    assert h.journal.seq > seq
    report, h2 = lose_host_and_restore(cos, h, tmp_path)
    assert (report.base, report.pieces) == (0, 1)
    assert h2.journal.seq == seq and fingerprint(h2.state) == shipped
    h2.journal.close()


def test_a_torn_last_piece_is_cut_and_pieces_after_a_gap_are_ignored(tmp_path: Path):
    cos, h, ship = started(tmp_path, compact_bytes=1 << 30)
    one_run(h, 0)
    ship.ship_once()
    one_run(h, 1)
    seq1, at1 = h.journal.seq, fingerprint(h.state)
    ship.ship_once()
    one_run(h, 2)
    ship.ship_once()
    one_run(h, 3)
    ship.ship_once()
    pieces = sorted(k for k in cos.list(PREFIX + "/") if "/log-" in k)
    assert len(pieces) == 4
    third = cos.get(pieces[2])
    cos.put(pieces[2], third[:len(third) - 7])   # torn inside its last record
    report, h2 = lose_host_and_restore(cos, h, tmp_path)
    assert report.pieces == 3 and report.ignored == 1   # the fourth follows a gap now
    assert h2.journal.truncated > 0
    assert seq1 < h2.journal.seq < seq1 + 20            # the third piece's whole records only
    h2.journal.close()
    cos.delete(pieces[2])                                # the third never arrived
    report, h3 = lose_host_and_restore(cos, h2, tmp_path, "host3")
    assert report.pieces == 2 and h3.journal.seq == seq1 and fingerprint(h3.state) == at1
    h3.journal.close()


def test_restore_refuses_a_state_directory_that_has_a_journal(tmp_path: Path):
    cos, h, ship = started(tmp_path)
    ship.ship_once()
    with pytest.raises(ValueError, match="exists already: restore from COS only into an empty state directory"):
        restore_journal(cos, PREFIX, h.journal.path)
    h.journal.close()
    assert restore_journal(cos, control_prefix("other", "metadata", "metadata-0"), tmp_path / "n" / "j").generation == ""


def test_a_generation_whose_snapshot_never_arrived_is_skipped(tmp_path: Path):
    cos, h, ship = started(tmp_path, compact_bytes=4 << 10)
    for i in range(40):
        one_run(h, i)
        ship.ship_once()
    want = fingerprint(h.state)
    gen = next(k for k in cos.list(PREFIX + "/") if k.endswith("/snapshot")).split("/")[-2]
    newer = f"{PREFIX}/g{10**15:020d}-{1:015d}"
    cos.put(f"{newer}/log-{0:020d}", b"x")                    # a newer generation, no snapshot
    report, h2 = lose_host_and_restore(cos, h, tmp_path)
    assert report.generation == gen and fingerprint(h2.state) == want
    h2.journal.close()


def test_a_synchronous_shipper_loses_nothing_answered(tmp_path: Path):
    cos = LocalCOS(tmp_path / "cos")
    h = handler(tmp_path / "host1" / "j", 8 << 10)
    ship = JournalShipper(h.journal, cos, PREFIX, lag_s=0, clock=lambda: 1000.0)
    h.after_journal = ship.ship_once          # as serve metadata wires it: every journal write ships
    ship.start()                              # nothing to start
    setup(h)
    for i in range(60):
        one_run(h, i)
    one_run(h, 60, end=False)
    assert h.journal.compactions > 0 and ship.pieces > 60
    want, seq = fingerprint(h.state), h.journal.seq
    _, h2 = lose_host_and_restore(cos, h, tmp_path)
    assert h2.journal.seq == seq and fingerprint(h2.state) == want
    h2.journal.close()
