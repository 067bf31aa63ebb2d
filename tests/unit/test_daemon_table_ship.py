"""The daemon's durable table shipped to COS and restored from there (``_control_ship``):
pieces in order, a new generation after each compaction with the old ones deleted, a torn
last piece cut by the log's replay, pieces after a gap ignored, and what a lagging upload
lost is exactly what followed the last shipped piece."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_functions.cos import LocalCOS
from storage_functions.daemon._control_ship import TableShipper, restore_table, table_prefix
from storage_functions.daemon._durable import DurableLog

PREFIX = table_prefix("sion", "daemon-1")


def put(log: DurableLog, key: str) -> None:
    log.append({"o": "put", "k": key, "v": 1, "m": {"size": 10, "cos_key": f"c/{key}", "stripes": []}})


def restored(cos: LocalCOS, path: Path) -> set[str]:
    restore_table(cos, PREFIX, path)
    log = DurableLog(str(path))
    img = log.open()
    log.close()
    return set(img.live)


def opened(path: Path, **kw: int) -> DurableLog:
    path.parent.mkdir(parents=True, exist_ok=True)
    log = DurableLog(str(path), **kw)
    log.open()
    return log


def test_table_prefix_names_the_daemon():
    assert PREFIX == "sion/control/daemon/daemon-1"
    with pytest.raises(ValueError, match="daemon state id 'a/b' must be"):
        table_prefix("sion", "a/b")


def test_shipped_pieces_restore_and_a_lagging_upload_loses_only_its_window(tmp_path: Path):
    cos = LocalCOS(tmp_path / "cos")
    log = opened(tmp_path / "h1" / "t.log")
    ship = TableShipper(log, cos, PREFIX, lag_s=1.0, clock=lambda: 5.0)
    put(log, "a")
    ship.ship_once()
    put(log, "b")
    log.append({"o": "free", "k": ["a"]})
    ship.ship_once()
    put(log, "c")                                   # inside the window: not shipped
    log.close()
    assert restored(cos, tmp_path / "h2" / "t.log") == {"b"}   # a stays freed, c is the window's loss


def test_a_compaction_starts_a_new_generation_and_the_old_ones_go(tmp_path: Path):
    cos = LocalCOS(tmp_path / "cos")
    log = opened(tmp_path / "h1" / "t.log", compact_min=8, compact_factor=2)
    ship = TableShipper(log, cos, PREFIX, lag_s=1.0, clock=lambda: 5.0)
    for i in range(30):
        put(log, f"k{i}")
        log.append({"o": "free", "k": [f"k{i}"]})
        ship.ship_once()
    put(log, "live")
    ship.stop()                                     # ships what is left
    assert log.compactions > 0
    gens = {k.split("/")[-2] for k in cos.list(PREFIX + "/")}
    assert gens == {f"g{5000:015d}-{log.compactions:010d}"}
    log.close()
    assert restored(cos, tmp_path / "h2" / "t.log") == {"live"}


def test_a_torn_piece_is_cut_and_pieces_after_a_gap_are_ignored(tmp_path: Path):
    cos = LocalCOS(tmp_path / "cos")
    log = opened(tmp_path / "h1" / "t.log")
    ship = TableShipper(log, cos, PREFIX, lag_s=1.0, clock=lambda: 5.0)
    for key in ("a", "b", "c"):
        put(log, key)
        ship.ship_once()
    log.close()
    pieces = sorted(k for k in cos.list(PREFIX + "/"))
    second = cos.get(pieces[1])
    cos.put(pieces[1], second[:-4])                 # torn: its record is cut, the third follows a gap
    assert restored(cos, tmp_path / "h2" / "t.log") == {"a"}
    assert restore_table(cos, table_prefix("sion", "other"), tmp_path / "h3" / "t.log") == 0
    assert not (tmp_path / "h3" / "t.log").exists()
