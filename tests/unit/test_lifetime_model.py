"""lifetime_model: the dataset format, FuncStore's accuracy measure, the split by run,
training on a small generated dataset, the numpy predictor against torch, retraining
that replaces a model only when it is better, and hot reload."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

import hdag
import wds
from lifetime_model import (COLUMNS, DatasetError, ModelFileError, ModelPredictor, ModelStore, Mlp, Row,
                            append_rows, categories, intervals, load_model, load_rows, model_path, save_model,
                            score, split_by_run)


def generated(runs: int = 30, seed: int = 1, noise: float = 8.0) -> list[Row]:
    """Lifetimes that follow the features (plus noise): 12 objects per run; the wave
    features (the last two) tell apart objects that share FuncStore's five."""
    rng = random.Random(seed)
    rows = []
    for r in range(runs):
        for o in range(12):
            f = (o % 3, 1 + o % 2, 1 + o % 4, 1 + o % 3, 1 + (o // 3) % 3, (o // 6) / 2, (o % 5) / 2)
            life = 80.0 * f[3] + 25.0 * f[4] + 4.0 * f[2] + 60.0 * f[6] - 40.0 * f[5] + 40 + rng.gauss(0.0, noise)
            rows.append(Row(f"s/r-{r}", "gen/1", f"o{o}", f, 1000 + o, max(life, 0.0)))
    return rows


# -- dataset --------------------------------------------------------------------------
def test_dataset_round_trip_with_a_documented_header(tmp_path: Path):
    rows = generated(runs=2)
    assert append_rows(tmp_path, "analytics", rows[:5]) == 5
    assert append_rows(tmp_path, "analytics", rows[5:]) == len(rows) - 5
    text = (tmp_path / "analytics.csv").read_text()
    assert text.startswith("# funcsion lifetime dataset v3")
    assert text.count(",".join(COLUMNS)) == 1                       # one header, however many appends
    assert (tmp_path / "analytics.csv").stat().st_mode & 0o077 == 0
    back = load_rows(tmp_path, "analytics")
    assert [(r.key, r.size) for r in back] == [(r.key, r.size) for r in rows]
    assert all(abs(a.lifetime_ms - b.lifetime_ms) < 1e-3 for a, b in zip(back, rows))
    assert categories(tmp_path) == ["analytics"]


def test_dataset_errors_name_the_line(tmp_path: Path):
    append_rows(tmp_path, "c", generated(runs=1)[:2])
    with open(tmp_path / "c.csv", "a") as fh:
        fh.write("s/r-9,gen/1,o1,1,2,x,4,5,0,0.5,0,0,10,3.0\n")
    with pytest.raises(DatasetError, match=r"c\.csv:10: features and lifetime_ms must be numbers"):
        load_rows(tmp_path, "c")
    with pytest.raises(DatasetError, match="a row of 'o' has 5 features, the dataset 7"):
        append_rows(tmp_path, "c", [Row("s/r-1", "gen/1", "o", (1, 1, 1, 1, 1), 1, 1.0)])
    with pytest.raises(DatasetError, match="funcsion collect"):
        load_rows(tmp_path, "missing")
    with pytest.raises(DatasetError, match="cannot name a dataset"):
        append_rows(tmp_path, "../evil", generated(runs=1))


V1 = ("# funcsion lifetime dataset v1: one row per intermediate object of a finished run\n"
      "run,workflow,object,F_stage,T_read,N_functions,D_stage,M_path,size,lifetime_ms\n"
      "s/r-1,gen/1,o1,0,1,1,1,2,100,31.9\n")


def test_a_version_1_dataset_is_refused_and_moved_aside_when_a_run_records(tmp_path: Path):
    from lifetime_model import dataset_version, move_aside

    (tmp_path / "analytics.csv").write_text(V1)
    assert dataset_version(tmp_path / "analytics.csv") == 1
    with pytest.raises(DatasetError, match="format version 1 .* W_write and W_read.*funcsion collect"):
        load_rows(tmp_path, "analytics")
    rows = generated(runs=1)
    assert append_rows(tmp_path, "analytics", rows) == len(rows)      # a run records: v1 moved aside
    assert (tmp_path / "analytics.csv.v1").read_text() == V1
    assert len(load_rows(tmp_path, "analytics")) == len(rows) and categories(tmp_path) == ["analytics"]
    (tmp_path / "analytics.csv").write_text(V1)
    assert move_aside(tmp_path, "analytics") == tmp_path / "analytics.csv.v1.1"   # the first one stays
    assert move_aside(tmp_path, "analytics") is None                             # nothing left to move


# -- accuracy measure and split ---------------------------------------------------------------
def test_accuracy_is_the_share_inside_each_objects_95_percent_interval():
    f = (0, 1, 1, 1, 1)
    rows = [Row(f"s/r-{i}", "w/1", "a", f, 1, x) for i, x in enumerate([90.0, 100.0, 110.0])]
    rows += [Row(f"s/r-{i}", "w/1", "b", f, 1, x) for i, x in enumerate([10.0, 10.0, 10.0])]
    rows.append(Row("s/r-0", "w/1", "c", f, 1, 5.0))                 # seen once: no interval
    b = intervals(rows)
    lo, hi = b[("w/1", "a", f)]
    assert (lo, hi) == pytest.approx((100 - 1.959964 * 10, 100 + 1.959964 * 10))
    assert ("w/1", "c", f) not in b
    preds = [100.0, 119.0, 121.0, 10.0, 10.0, 11.0, 5.0]               # a: in, in, out; b: in, in, out
    s = score(rows, preds, b)
    assert s.measured == 6 and s.unmeasured == 1
    assert s.accuracy == pytest.approx(4 / 6)
    assert s.mae_ms == pytest.approx((10 + 19 + 11 + 0 + 0 + 1 + 0) / 7)


def test_split_keeps_runs_whole_80_10_10_and_stable_as_data_grows():
    rows = generated(runs=200)
    tr, va, te = split_by_run(rows)
    runs = [{r.run for r in part} for part in (tr, va, te)]
    assert not (runs[0] & runs[1] or runs[0] & runs[2] or runs[1] & runs[2])
    assert [len(r) for r in runs] == pytest.approx([160, 20, 20], abs=15)
    grown = split_by_run(rows + generated(runs=300, seed=2)[200 * 12:])
    assert runs[2] <= {r.run for r in grown[2]}                     # a test run stays a test run
    small = split_by_run(generated(runs=4))
    assert all(small)                                                # every part gets a run


# -- the shipped models -------------------------------------------------------------------
@pytest.mark.parametrize("category", ["analytics", "compile", "video"])
def test_shipped_models_meet_the_95_percent_target_on_their_datasets_held_out_runs(category: str):
    """The headline figures of lifetime_model/models/README.md, measured again with numpy:
    the shipped model on the test runs of the shipped dataset, against each object's 95%
    interval of the lifetimes actually recorded."""
    from lifetime_model import BUNDLED_DATASETS, BUNDLED_MODELS, feature_ceiling
    from lifetime_model._train import evaluate

    rows = load_rows(BUNDLED_DATASETS, category)
    model = load_model(model_path(BUNDLED_MODELS, category))
    s = evaluate(model, split_by_run(rows)[2], intervals(rows))
    assert s.measured >= 40 and s.accuracy is not None and s.accuracy >= 0.95
    assert s.accuracy == pytest.approx(model.meta["accuracy"]) and s.mae_ms == pytest.approx(model.meta["mae_ms"])
    assert model.meta["layers"] == [len(hdag.NAMES), 64, 64, 64, 1]
    assert feature_ceiling(rows).accuracy == 1.0                      # the wave features tell every object apart


# -- training and the exported predictor ---------------------------------------------------
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trained() -> tuple[Mlp, object, list[Row]]:
    from lifetime_model._train import fit

    rows = generated()
    mlp, net = fit(rows, epochs=300)
    return mlp, net, rows


def test_training_reaches_funcstore_accuracy_and_saves_its_metadata(trained, tmp_path: Path):
    mlp, _, rows = trained
    m = mlp.meta
    assert m["layers"] == [7, 64, 64, 64, 1] and m["activation"] == "relu"
    assert m["split"]["test_runs"] >= 1 and m["split"]["train_runs"] > m["split"]["test_runs"]
    assert m["accuracy"] >= 0.9 and m["mae_ms"] < 15.0                  # noise sd is 8 ms
    path = save_model(tmp_path, "gen", Mlp(mlp.weights, mlp.biases, mlp.x_mean, mlp.x_std, mlp.y_mean, mlp.y_std,
                                           dict(m, model_version=1)))
    back = load_model(path)
    assert back.meta["format"] == "funcsion-lifetime-mlp" and back.meta["features"] == list(hdag.NAMES)
    assert back.meta["accuracy"] == m["accuracy"] and back.version == 1


def test_numpy_predictor_matches_torch(trained, tmp_path: Path):
    import numpy as np

    mlp, net, rows = trained
    back = load_model(save_model(tmp_path, "gen", mlp))
    x = np.array([r.features for r in rows] + [(7, 3, 9, 4, 6, 3.5, 0.25)], dtype=np.float64)
    with torch.no_grad():
        t = net(torch.from_numpy((x - mlp.x_mean) / mlp.x_std)).numpy()[:, 0] * mlp.y_std + mlp.y_mean
    assert np.allclose(back.predict_ms(x), np.maximum(t, 0.0), rtol=1e-4, atol=1e-3)


def test_retrain_replaces_only_a_less_accurate_model(tmp_path: Path, trained):
    import numpy as np

    from lifetime_model import retrain

    mlp, _, rows = trained
    data, models = tmp_path / "data", tmp_path / "models"
    append_rows(data, "gen", rows)
    bad = Mlp(tuple(np.zeros_like(w) for w in mlp.weights), tuple(np.zeros_like(b) for b in mlp.biases),
              mlp.x_mean, mlp.x_std, 5000.0, 1.0, {"model_version": 3})      # always 5 s: never accurate
    save_model(models, "gen", bad)
    out = retrain(data, models, "gen", epochs=300)
    assert out.replaced and out.current is not None and out.current["test"]["accuracy"] == 0.0
    assert load_model(model_path(models, "gen")).version == 4
    again = retrain(data, models, "gen", epochs=300)                 # same data, same seed: not better
    assert not again.replaced and "kept model version 4" in again.reason
    assert load_model(model_path(models, "gen")).version == 4


def test_a_five_feature_model_of_format_1_is_refused_and_the_heuristic_serves(tmp_path: Path, trained):
    import json

    import numpy as np

    mlp, _, _ = trained
    arrays = {"w0": mlp.weights[0][:5], "b0": mlp.biases[0], "x_mean": mlp.x_mean[:5], "x_std": mlp.x_std[:5],
              "y_mean": np.float64(0.0), "y_std": np.float64(1.0),
              "meta": np.array(json.dumps({"format": "funcsion-lifetime-mlp", "format_version": 1, "features":
                                           ["F_stage", "T_read", "N_functions", "D_stage", "M_path"]}))}
    for i in range(1, len(mlp.weights)):
        arrays |= {f"w{i}": mlp.weights[i], f"b{i}": mlp.biases[i]}
    with open(model_path(tmp_path, "gen"), "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(ModelFileError, match="format version 1 .*retrain with `funcsion train`"):
        load_model(model_path(tmp_path, "gen"))
    assert ModelStore([tmp_path], check_s=0.0).get("gen") is None
    from lifetime_model import retrain

    append_rows(tmp_path / "data", "gen", generated())
    out = retrain(tmp_path / "data", tmp_path, "gen", epochs=100)     # `funcsion train` replaces it
    assert out.replaced and "replacing an unusable model" in out.reason and "format version 1" in out.reason
    assert load_model(model_path(tmp_path, "gen")).meta["features"] == list(hdag.NAMES)


def test_training_refuses_too_few_runs():
    from lifetime_model import train

    with pytest.raises(DatasetError, match="at least 5 runs"):
        train(generated(runs=3))


# -- serving ----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_store_reloads_changed_models_and_keeps_the_last_good_one(tmp_path: Path, trained):
    mlp, _, _ = trained
    clock = Clock()
    store = ModelStore([tmp_path / "mine", tmp_path / "shipped"], check_s=1.0, clock=clock)
    assert store.get("gen") is None
    save_model(tmp_path / "shipped", "gen", Mlp(*_parts(mlp), {"model_version": 1}))
    assert store.get("gen") is None                                  # not checked again yet
    clock.t = 1.0
    assert store.get("gen").version == 1                             # type: ignore[union-attr]
    save_model(tmp_path / "mine", "gen", Mlp(*_parts(mlp), {"model_version": 2}))   # first directory wins
    clock.t = 2.0
    assert store.get("gen").version == 2                             # type: ignore[union-attr]
    model_path(tmp_path / "mine", "gen").write_bytes(b"not a model")
    clock.t = 3.0
    assert store.get("gen").version == 2                             # type: ignore[union-attr]
    model_path(tmp_path / "mine", "gen").unlink()
    clock.t = 4.0
    assert store.get("gen").version == 1                             # type: ignore[union-attr]
    with pytest.raises(ModelFileError, match="not a funcsion lifetime model"):
        model_path(tmp_path / "x", "gen").parent.mkdir()
        model_path(tmp_path / "x", "gen").write_bytes(b"junk")
        load_model(model_path(tmp_path / "x", "gen"))


def _parts(m: Mlp) -> tuple:
    return (m.weights, m.biases, m.x_mean, m.x_std, m.y_mean, m.y_std)


def test_predictor_uses_the_categorys_model_else_the_fallback(tmp_path: Path, trained, fig9_path: Path):
    import numpy as np

    from metadata_server import HeuristicPredictor

    mlp, _, _ = trained
    graph = hdag.build(wds.load(fig9_path))
    category = graph.workflow.category
    p = ModelPredictor(ModelStore([tmp_path], check_s=0.0), HeuristicPredictor())
    featured = {n: o for n, o in graph.objects.items() if o.features is not None}
    assert p.predict_graph(graph) == {n: HeuristicPredictor().predict(o) for n, o in featured.items()}
    assert p.revision(category) == "heuristic"
    save_model(tmp_path, category, Mlp(*_parts(mlp), {"model_version": 7}))
    got = p.predict_graph(graph)
    want = mlp.predict_ms(np.array([o.features.vector() for o in featured.values()], dtype=np.float64)) / 1000
    assert list(got) == list(featured) and np.allclose(list(got.values()), want)
    assert p.revision(category) == "model:7"
    at2 = graph.features_at(2)                                      # a run of 2 tasks at once: its waves
    want2 = mlp.predict_ms(np.array([at2[n].vector() for n in featured], dtype=np.float64)) / 1000
    assert np.allclose(list(p.predict_graph(graph, 2).values()), want2)
    assert math.isclose(p.predict(graph.objects["a"]), HeuristicPredictor().predict(graph.objects["a"]))


def test_feature_ceiling_shows_what_shared_features_cost():
    from lifetime_model import feature_ceiling

    rows = []
    for r in range(40):                       # two objects, same features, lifetimes 100 and 300 ms
        rows.append(Row(f"s/r-{r}", "w/1", "x", (0, 1, 1, 1, 1), 1, 100.0 + r % 3))
        rows.append(Row(f"s/r-{r}", "w/1", "y", (0, 1, 1, 1, 1), 1, 300.0 + r % 3))
        rows.append(Row(f"s/r-{r}", "w/1", "z", (0, 1, 1, 2, 1), 1, 50.0 + r % 3))
    s = feature_ceiling(rows)
    assert s.accuracy == pytest.approx(1 / 3, abs=0.05)  # only z, alone with its features, can be hit
    waved = [Row(r.run, r.workflow, r.object, (*r.features, 0.0, 0.5 if r.object == "y" else 0.0), 1, r.lifetime_ms)
             for r in rows]                                 # y's reader runs in the next slot: told apart
    assert feature_ceiling(waved).accuracy == 1.0
    assert feature_ceiling(waved, n_features=5).accuracy == pytest.approx(1 / 3, abs=0.05)   # FuncStore's five
