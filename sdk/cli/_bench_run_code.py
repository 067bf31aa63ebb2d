"""The workflows ``funcsion bench run`` runs, written to a temporary directory: a
no-op workflow of ``STAGES`` stages of ``WIDTH`` tasks, and a ``MAPPERS`` x
``REDUCERS`` shuffle (smaller ones for a smoke run) of ``OBJECT_BYTES``-byte objects. Each handler appends
what it measured about itself (one JSON line: its body's time, and for the
shuffle the time of its one ``put_many``/``get_many``) to ``timings.jsonl``
beside its code; the bench reads it back. Not here: running and reporting
(``bench_run``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["write_noop", "write_shuffle", "read_timings", "STAGES", "WIDTH", "MAPPERS", "REDUCERS",
           "OBJECT_BYTES"]

STAGES, WIDTH = 4, 16
MAPPERS = REDUCERS = 64
OBJECT_BYTES = 4096

_RECORD = '''
import json, os, time
from pathlib import Path
from typing import Any

import sdk

_LOG = Path(__file__).with_name("timings.jsonl")


def _record(**fields):
    with open(_LOG, "a", encoding="utf-8") as fh:  # one short line per write: appends do not mix
        fh.write(json.dumps(fields) + "\\n")
'''

NOOP_HANDLERS = _RECORD + '''

@sdk.task
def noop(event, context):
    t0 = time.perf_counter()
    body_s = time.perf_counter() - t0  # the handler does nothing: this is its whole work
    _record(task=event["function"], body_s=body_s)
'''

SHUFFLE_HANDLERS = _RECORD + '''

@sdk.task
def mapper(event, context):
    t0 = time.perf_counter()
    sdk.get("src")
    payload = os.urandom({size})
    t1 = time.perf_counter()
    sdk.put_many({{name: payload for name in sdk.outputs()}})
    t2 = time.perf_counter()
    _record(task=event["function"], body_s=t2 - t0, put_s=t2 - t1, objects=len(sdk.outputs()))


@sdk.task
def reducer(event, context):
    t0 = time.perf_counter()
    got = sdk.get_many(sdk.inputs())
    t1 = time.perf_counter()
    assert all(len(v) == {size} for v in got.values()), "a shuffled object came back wrong"
    _record(task=event["function"], body_s=t1 - t0, get_s=t1 - t0, objects=len(got))
'''


def _noop_wds(stages: int, width: int) -> dict[str, object]:
    spec: dict[str, object] = {}
    for k in range(stages):
        nxt = [f"s{k + 1}_{{0..{width}:02d}}"] if k + 1 < stages else []
        spec[f"stage{k}"] = {"stage_id": k, "functions": [
            {"start": k == 0, "replicas": width, "name": f"s{k}_{{i:02d}}", "handler": "handlers:noop",
             "input": [], "output": [], "next": nxt}]}
    return {"app": "bench-noop", "workflow_id": 1, "category": "bench", "spec": spec}


def _shuffle_wds(mappers: int, reducers: int) -> dict[str, object]:
    return {"app": "bench-shuffle", "workflow_id": 1, "category": "bench",
            "params": {"mappers": mappers, "reducers": reducers},
            "spec": {
                "map": {"stage_id": 0, "functions": [
                    {"start": True, "replicas": "mappers", "name": "map_{i:02d}", "handler": "handlers:mapper",
                     "input": ["src"], "output": ["part_{i:02d}_{0..reducers:02d}"],
                     "next": ["reduce_{0..reducers:02d}"]}]},
                "reduce": {"stage_id": 1, "functions": [
                    {"start": False, "replicas": "reducers", "name": "reduce_{i:02d}",
                     "handler": "handlers:reducer", "input": ["part_{0..mappers:02d}_{i:02d}"], "output": [],
                     "next": []}]}}}


def write_noop(d: Path, stages: int = STAGES, width: int = WIDTH) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "handlers.py").write_text(NOOP_HANDLERS)
    wds = d / "noop.wds.json"
    wds.write_text(json.dumps(_noop_wds(stages, width), indent=1))
    return wds


def write_shuffle(d: Path, mappers: int = MAPPERS, reducers: int = REDUCERS, size: int = OBJECT_BYTES) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "handlers.py").write_text(SHUFFLE_HANDLERS.format(size=size))
    (d / "src.txt").write_text("go")
    wds = d / "shuffle.wds.json"
    wds.write_text(json.dumps(_shuffle_wds(mappers, reducers), indent=1))
    return wds


def read_timings(d: Path) -> list[dict[str, Any]]:
    path = d / "timings.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
