#!/usr/bin/env python3
"""The experiment behind the daemon choice (issue 31 item 1): word count (8 mappers, 4 reducers,
a 2.2 MB text) three times on an embedded stack of 2 daemons, with each object's daemon chosen
by the rendezvous hash of its key (``metadata_server._daemons``, what funcsion does) and by load
(the daemon with the fewest blocks in use that has room, patched in for the comparison). Prints
per run the objects and bytes on each daemon and the memory-time figures, then the means:
``byte_share_max`` (the most loaded daemon's share of a run's bytes: 0.5 is even) and
``frag_allocated_over_live_mb_s`` (allocated over live memory-time: what packing wastes).

    PYTHONPATH=. python scripts/daemon_choice_experiment.py
"""
from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import metadata_server._state as state_mod
from metadata_server import _daemons
from sdk._config import Config
from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

WC = Path(__file__).resolve().parents[1] / "examples" / "wordcount" / "wordcount.wds.json"
hash_choice = _daemons.choose_daemon


def load_choice(a, store_key, size, owner, key, chunk_bytes=0, holes=True):
    daemons = a.daemons
    if len(daemons) <= 1 or size <= 0:
        return None
    used = {d: 0 for d in daemons}
    for (fn, _) in a.used:
        used[a.daemon_of(fn)] += 1
    for d in sorted(daemons, key=lambda d: (used[d], d)):
        if a.placeable(size, owner, key, chunk_bytes, holes, daemon=d):
            return d
    return sorted(daemons)[0]


text = ("the quick brown fox jumps over the lazy dog " * 7 + "\n") * 6000 + "It's a dog's life\n" * 800
results = {}
for name, fn in (("hash", hash_choice), ("load", load_choice)):
    state_mod.choose_daemon = fn
    tmp = Path(tempfile.mkdtemp())
    src = tmp / "book.txt"
    src.write_text(text)
    cfg = Config.load(state_dir=str(tmp / "state"), env={})
    rows = []
    with Stack(cfg, metadata_port=0, daemon_port=0, daemons=2, daemon={"max_functions": 48}) as st:
        for _ in range(3):
            r = run_workflow(WC, config=cfg, stack=st, inputs={"raw_text": str(src)},
                             params={"mappers": 8, "reducers": 4}, options=ExecutorOptions(progress=False))
            d = r.to_dict()
            assert r.status == "succeeded" and d["memory"]["leaked_bytes"] == 0, r.error
            objs = [o for o in d["objects"].values() if o["tier"] == "memory"]
            per_bytes = {k: sum(o["size"] for o in objs if o.get("daemon") == k) for k in ("daemon-0", "daemon-1")}
            per_n = {k: sum(1 for o in objs if o.get("daemon") == k) for k in ("daemon-0", "daemon-1")}
            m = d["memory"]
            rows.append({"objects": per_n, "bytes": per_bytes,
                         "byte_share_max": max(per_bytes.values()) / max(1, sum(per_bytes.values())),
                         "mb_s": m["mb_s"], "live_mb_s": m["live_mb_s"],
                         "frag": m["mb_s"] / m["live_mb_s"] if m["live_mb_s"] else None,
                         "peak_bytes": m["peak_bytes"], "per_daemon": m.get("daemons")})
    results[name] = rows
    print(name, json.dumps(rows, indent=None), flush=True)
summary = {n: {"byte_share_max": round(statistics.mean(r["byte_share_max"] for r in rows), 3),
               "frag_allocated_over_live_mb_s": round(statistics.mean(r["frag"] for r in rows), 2),
               "mb_s": round(statistics.mean(r["mb_s"] for r in rows), 4),
               "peak_bytes": round(statistics.mean(r["peak_bytes"] for r in rows))}
           for n, rows in results.items()}
print(json.dumps(summary))
