"""How ``sqlite-journal-v0.db`` was made: the SQLite journal of funcsion before the log format.

    git show 12c6dc8:metadata_server/_journal.py > /tmp/journal_v0.py
    PYTHONPATH=. python tests/data/make_sqlite_journal.py /tmp/journal_v0.py tests/data/sqlite-journal-v0.db

It loads that version's ``Journal`` and journals, one transaction per event as
that version's handler did, a history touching every kind of event that
history needs: a workflow (fig9), capacity, two runs (tokens ``tok-1`` and
``tok-2``), puts, first and repeated reads, a commit that frees objects, an
acknowledgement, a tick and the end of the second run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from metadata_server import (AckInstructions, BeginPut, EndRun, FinishPut, Get, MetadataState, RegisterCapacity,
                             RegisterWorkflow, StartRun, Tick, token_digest)

HERE = Path(__file__).resolve().parent


def history() -> list:
    fig9 = (HERE / "fig9.wds.json").read_text()
    t = iter(range(1, 1000))

    def now() -> float:
        return 1000.0 + next(t)

    ev = [RegisterWorkflow(now(), "m1", fig9, {}, "fig9"),
          RegisterCapacity(now(), "m2", "s0", 8), RegisterCapacity(now(), "m3", "s1", 8),
          StartRun(now(), "m4", "fig9/9", token_digest("tok-1"), "funcstore", 3600.0),
          StartRun(now(), "m5", "fig9/9", token_digest("tok-2"), "pocket", 3600.0)]
    for run in ("r-1", "r-2"):
        ev += [BeginPut(now(), "m6", run, "", "in1", 10, "x", False), FinishPut(now(), "m7", run, "", "in1")]
    ev += [Get(now(), "m8", "r-1", "F1", "in1"), Get(now(), "m9", "r-1", "F1", "in1"),
           BeginPut(now(), "m10", "r-1", "F1", "a", 300, "y", False), FinishPut(now(), "m11", "r-1", "F1", "a"),
           Get(now(), "m12", "r-1", "F2", "a"), Get(now(), "m13", "r-1", "F3", "a"),
           AckInstructions(now(), "m14", 1), Tick(now(), "m15"), EndRun(now(), "m16", "r-2", "failed")]
    return ev


def main(old_journal_py: str, out: str) -> None:
    spec = importlib.util.spec_from_file_location("metadata_server._journal_v0", old_journal_py)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    Path(out).unlink(missing_ok=True)
    state = MetadataState(block_size=1000)
    with mod.Journal(out) as j:
        for e in history():
            state.handle(e)                   # only events that applied were journaled
            j.append([e])
    state.validate_state()


if __name__ == "__main__":
    main(*sys.argv[1:])
