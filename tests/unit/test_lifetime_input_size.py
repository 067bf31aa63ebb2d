"""The run's input size as a lifetime feature: ``start_run`` carries it (an optional
``RunHints`` field; a client without it still starts runs, size unknown), the core keeps
and journals it with the run, predicts with it and records it in the dataset rows
with the run's width (format 3; a version-2 file reads with both unknown and is upgraded
in place when a run appends), a model of format 3 takes them (unknown: the training mean;
a format-2 model ignores them), and the lookup baseline is offered the input size (per
stage and size bucket)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import hdag
from funcsion_rpc import errors as E
from funcsion_rpc.gen.metadata import ttypes as T
from lifetime_model import (COLUMNS, FEATURES, ModelPredictor, ModelStore, Mlp, Row, append_rows, dataset_version,
                            fit_lookup, fit_stage_lookup, load_model, load_rows, model_path, save_model, size_bucket)
from lifetime_model._model_file import RUN_INPUTS, SIZE_INPUT, run_inputs
from lifetime_model._train import takes_input_size
from metadata_server import (CoreDriver, HeuristicPredictor, Journal, MetadataHandler, MetadataState,
                             RegisterWorkflow, rows_of_run)


class BySize:
    """A model-like predictor: seconds grow with the run's input size (1 s when unknown)."""

    def predict(self, obj: hdag.ObjectInfo) -> float:
        return 1.0

    def revision(self, category: str) -> str:
        return "size"

    def predict_graph(self, graph: hdag.HDAG, concurrency: int = 0, *, input_bytes: int = 0) -> dict[str, float]:
        return {n: 1.0 + input_bytes / 1e6 for n in graph.features_at(concurrency)}


def size_model(*, size_weight: float = 1.0) -> Mlp:
    """A one-layer format-3 model: lifetime_ms = 100 + 50 * (log2 input bytes - 20)
    (``size_weight``), whatever the graph features and the run's width."""
    n = len(FEATURES)
    k = n + len(RUN_INPUTS)
    w = np.zeros((k, 1))
    w[n, 0] = size_weight
    mean = np.zeros(k)
    mean[n:] = (20.0, 2.0, 18.0)                        # 1 MiB, 4 wide: the "training mean"
    return Mlp((w,), (np.zeros(1),), mean, np.ones(k), 100.0, 50.0,
               {"model_version": 1, "features": [*FEATURES, *RUN_INPUTS]})


# -- the core -----------------------------------------------------------------------------
def test_the_run_keeps_its_input_size_predicts_with_it_and_records_it(fig9_path: Path):
    d = CoreDriver(block_size=1000, predictor=BySize())
    key = d.register(fig9_path)
    small, big, unknown = (d.start(key, max_concurrency=2, input_bytes=b) for b in (1_000_000, 5_000_000, 0))
    runs = d.state.runs
    assert (runs[small].input_bytes, runs[big].input_bytes, runs[unknown].input_bytes) == (1_000_000, 5_000_000, 0)
    assert runs[small].predicted["b2"] == 2.0 and runs[big].predicted["b2"] == 6.0      # the prediction follows it
    assert runs[unknown].predicted["b2"] == 1.0
    assert runs[big].summary()["input_bytes"] == 5_000_000
    d.capacity("s0", 64)
    d.put(big, "", "in2", 100)
    d.get(big, "F2", "in2")
    d.put(big, "F2", "b1", 70)
    d.put(big, "F2", "b2", 80)
    d.get(big, "F4", "b1")
    d.put(big, "F4", "d", 10)                                                     # b1 freed: measured
    (b1,) = rows_of_run(runs[big], "s")
    assert b1.input_bytes == 5_000_000 and b1.width == runs[big].graph.width == 3      # stage M: F1, F2, F3
    replayed = MetadataState(block_size=1000, predictor=HeuristicPredictor())
    for e in d.log:
        replayed.handle(e)
    assert replayed.runs[big].input_bytes == 5_000_000 and replayed.runs[big].predicted == runs[big].predicted
    assert rows_of_run(replayed.runs[big], "s") == [b1]


def test_a_negative_input_size_is_refused_naming_it(fig9_path: Path):
    d = CoreDriver(block_size=1000)
    key = d.register(fig9_path)
    with pytest.raises(E.InvalidRequest, match="input_bytes=-1"):
        d.start(key, input_bytes=-1)


def test_start_run_over_the_handler_with_and_without_the_field_and_the_journal_keeps_it(tmp_path: Path,
                                                                                         fig9_path: Path):
    """A client before the field sends RunHints without it (unset on the wire): size unknown."""
    j = Journal(tmp_path / "j.db")
    h = MetadataHandler(MetadataState(block_size=1000, predictor=BySize()), journal=j, admin_token="a")
    h.apply([RegisterWorkflow(h.clock(), "1", fig9_path.read_text(), {}, "fig9")])
    old = h.start_run("a", "fig9/9", "funcstore", 0, T.RunHints(2, 0, True))        # as an old client sends it
    new = h.start_run("a", "fig9/9", "funcstore", 0, T.RunHints(2, 0, True, 3_000_000))
    bare = h.start_run("a", "fig9/9", "funcstore", 0, None)
    runs = h.state.runs
    assert T.RunHints(2, 0, True).input_bytes is None
    assert (runs[old.run_id].input_bytes, runs[new.run_id].input_bytes, runs[bare.run_id].input_bytes) == (
        0, 3_000_000, 0)
    assert runs[new.run_id].predicted["b2"] == 4.0 and runs[old.run_id].predicted["b2"] == 1.0
    j.close()
    with Journal(tmp_path / "j.db") as j2:
        h2 = MetadataHandler(MetadataState(block_size=1000), journal=j2, admin_token="a")
        assert h2.state.runs[new.run_id].input_bytes == 3_000_000
        assert h2.state.runs[new.run_id].predicted == runs[new.run_id].predicted   # the journaled predictions


# -- the dataset -----------------------------------------------------------------------------
def _row(run: str, obj: str, life: float, *, stage: float = 1.0, input_bytes: int = 0, width: int = 0) -> Row:
    return Row(run, "w/1", obj, (stage, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0), 100, life, input_bytes, width)


def test_dataset_v3_round_trips_the_input_size(tmp_path: Path):
    rows = [_row("s/r-1", "a", 12.5, input_bytes=4096, width=12), _row("s/r-2", "a", 13.0)]
    append_rows(tmp_path, "gen", rows)
    assert "input_bytes" in COLUMNS and dataset_version(tmp_path / "gen.csv") == 3
    assert load_rows(tmp_path, "gen") == rows


def test_a_v2_dataset_reads_with_sizes_unknown_and_a_run_upgrades_it_in_place(tmp_path: Path):
    path = tmp_path / "gen.csv"
    path.write_text("# funcsion lifetime dataset v2\n"
                    "run,workflow,object,F_stage,T_read,N_functions,D_stage,M_path,W_write,W_read,size,lifetime_ms\n"
                    "s/r-1,w/1,a,1,1,1,1,2,0,0,100,12.5\n")
    (old,) = load_rows(tmp_path, "gen")
    assert old == _row("s/r-1", "a", 12.5)                        # input_bytes 0: unknown
    append_rows(tmp_path, "gen", [_row("s/r-2", "a", 13.0, input_bytes=777, width=4)])
    assert dataset_version(path) == 3 and not list(tmp_path.glob("gen.csv.v*"))   # upgraded, nothing moved aside
    assert load_rows(tmp_path, "gen") == [old, _row("s/r-2", "a", 13.0, input_bytes=777, width=4)]


def test_a_negative_input_size_in_a_dataset_names_the_line(tmp_path: Path):
    append_rows(tmp_path, "gen", [_row("s/r-1", "a", 1.0, input_bytes=5, width=3)])
    path = tmp_path / "gen.csv"
    path.write_text(path.read_text().replace(",5,3,100,", ",-5,3,100,"))
    with pytest.raises(Exception, match=r"gen.csv:\d+: input_bytes, width, size and lifetime_ms must be >= 0"):
        load_rows(tmp_path, "gen")


# -- the model ------------------------------------------------------------------------------
def test_a_format_3_model_takes_the_input_size_and_an_unknown_one_is_the_training_mean(tmp_path: Path,
                                                                                        fig9_path: Path):
    import wds

    path = save_model(tmp_path, "paper", size_model())
    back = load_model(path)
    assert back.takes_input_size and back.meta["format_version"] == 3
    assert back.inputs == (*FEATURES, *RUN_INPUTS) and RUN_INPUTS[0] == SIZE_INPUT
    graph = hdag.build(wds.load(fig9_path))
    p = ModelPredictor(ModelStore([tmp_path]), HeuristicPredictor())
    one, four, unknown = (p.predict_graph(graph, 2, input_bytes=b) for b in (1 << 20, 4 << 20, 0))
    assert one["b2"] == pytest.approx(0.1)                   # log2 1 MiB = the mean: 100 ms
    assert four["b2"] == pytest.approx(0.2)                  # two octaves more: 100 + 2 * 50 ms
    assert unknown == p.predict_graph(graph, 2) == one       # unknown: the training mean
    rows = [_row("s/r-1", "a", 1.0, input_bytes=4 << 20, width=8), _row("s/r-2", "a", 1.0)]
    assert back.predict_rows(rows) == pytest.approx([200.0, 100.0])


def test_a_format_2_model_still_serves_and_ignores_the_input_size(tmp_path: Path, fig9_path: Path):
    import wds

    k = len(FEATURES)
    m = Mlp((np.ones((k, 1)),), (np.zeros(1),), np.zeros(k), np.ones(k), 10.0, 1.0, {"model_version": 1})
    save_model(tmp_path, "paper", m)
    back = load_model(model_path(tmp_path, "paper"))
    assert not back.takes_input_size and back.meta["format_version"] == 2
    graph = hdag.build(wds.load(fig9_path))
    p = ModelPredictor(ModelStore([tmp_path]), HeuristicPredictor())
    assert p.predict_graph(graph, 2, input_bytes=1 << 30) == p.predict_graph(graph, 2)


def test_training_takes_the_run_inputs_only_when_they_are_known_and_the_size_varies():
    assert takes_input_size([_row("a", "x", 1, input_bytes=10, width=2), _row("b", "x", 1, input_bytes=20, width=2)])
    assert not takes_input_size([_row("a", "x", 1, input_bytes=10, width=2), _row("b", "x", 1, input_bytes=10, width=2)])
    assert not takes_input_size([_row("a", "x", 1, input_bytes=10, width=2), _row("b", "x", 1, width=2)])
    assert not takes_input_size([_row("a", "x", 1, input_bytes=10), _row("b", "x", 1, input_bytes=20)])
    assert run_inputs(1 << 20, 4) == (20.0, 2.0, 18.0)                 # log2 bytes, width, bytes per function
    size, wide, per = run_inputs(0, 4)
    assert math.isnan(size) and wide == 2.0 and math.isnan(per)


# -- the lookup -----------------------------------------------------------------------------
def test_the_lookup_is_per_stage_and_size_bucket_taking_the_nearest_bucket():
    train = [_row(f"r{i}", "a", life, input_bytes=b) for i, (life, b) in enumerate(
        ((10.0, 1000), (12.0, 1000), (40.0, 4000), (44.0, 4000), (160.0, 16000)))]
    look, stage = fit_lookup(train), fit_stage_lookup(train)
    ask = [_row("t", "a", 0, input_bytes=b) for b in (1000, 4000, 5000, 100_000, 0)]
    assert look(ask) == [11.0, 42.0, 42.0, 160.0, 40.0]     # 5000: nearer 4000; 100 kB: the largest; unknown: stage
    assert stage(ask) == [40.0] * 5
    assert size_bucket(4096) == 12.0 and size_bucket(0) is None
    assert math.isclose(size_bucket(6000) or 0, 12.5)


def test_a_run_pickled_before_the_field_restores_with_the_input_size_unknown(fig9_path: Path):
    """A snapshot written before ``RunRecord.input_bytes`` (its last field) existed."""
    import pickle

    d = CoreDriver(block_size=1000)
    run = d.state.runs[d.start(d.register(fig9_path), max_concurrency=2, input_bytes=9)]
    state = run.__getstate__()
    assert state[-1] == 9
    old = pickle.loads(pickle.dumps(run))
    old.__setstate__(state[:-1])                       # as a pickle of before the field holds it
    assert old.input_bytes == 0 and old.concurrency == 2 and old.summary()["input_bytes"] == 0
    assert pickle.loads(pickle.dumps(run)).input_bytes == 9
