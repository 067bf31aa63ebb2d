"""The run's input size on the real path: a word count run on the embedded stack starts
over Thrift with the bytes of its input (``start_run``'s ``RunHints.input_bytes``), the
metadata server predicts with a model that takes it (the prediction follows the input),
and the run's dataset rows record it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import hdag
import wds
from lifetime_model import FEATURES, Mlp, load_rows, save_model
from lifetime_model._model_file import RUN_INPUTS
from sdk._config import Config
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount" / "wordcount.wds.json"


def _size_model() -> Mlp:
    """Format 3: lifetime_ms = 100 + 50 * (log2 input bytes - 17), whatever the graph features
    and the run's width."""
    n = len(FEATURES)
    k = n + len(RUN_INPUTS)
    w = np.zeros((k, 1))
    w[n, 0] = 1.0
    mean = np.zeros(k)
    mean[n] = 17.0
    return Mlp((w,), (np.zeros(1),), mean, np.ones(k), 100.0, 50.0,
               {"model_version": 1, "features": [*FEATURES, *RUN_INPUTS]})


def test_a_runs_input_size_reaches_the_predictor_and_its_rows(tmp_path: Path) -> None:
    cfg = Config.load(state_dir=str(tmp_path / "state"), env={})
    save_model(cfg.resolved_lifetime_models, "analytics", _size_model())
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("the quick brown fox jumps over the lazy dog\n" * 1500)         # 66,000 bytes
    big.write_text("héllo wörld, the lazy dog sleeps\n" * 8000)                      # 4x and more, not ASCII
    graph = hdag.build(wds.load(WORDCOUNT))
    featured = {n for n, o in graph.objects.items() if o.features is not None}
    with Stack(cfg, metadata_port=0, daemon_port=0) as stack:
        state = stack.handler.state
        state.predictor.store.directories = [cfg.resolved_lifetime_models]   # this model, not the shipped one
        assert state.predictor.revision("analytics") == "model:1"
        reports = {p.name: run_workflow(WORDCOUNT, config=cfg, stack=stack, inputs={"raw_text": str(p)})
                   for p in (small, big)}
        runs = {name: state.runs[r.run_id] for name, r in reports.items()}
        assert all(r.status == "succeeded" for r in reports.values())
        for p in (small, big):
            assert runs[p.name].input_bytes == len(p.read_bytes())         # UTF-8 bytes, as uploaded
        lo, hi = runs["small.txt"].predicted, runs["big.txt"].predicted
        assert set(lo) == set(hi) == featured
        octaves = np.log2(len(big.read_bytes()) / len(small.read_bytes()))
        for n in featured:                                                  # the prediction follows the input
            assert abs(hi[n] - lo[n] - 0.05 * octaves) < 1e-9, n                 # 50 ms per octave
    rows = load_rows(cfg.resolved_lifetime_data, "analytics")
    by_run = {r.run.rsplit("/", 1)[1]: (r.input_bytes, r.width) for r in rows}
    assert by_run == {reports[p.name].run_id: (len(p.read_bytes()), 4) for p in (small, big)}   # 4 mappers
