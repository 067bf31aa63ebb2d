"""The lifetime model against baselines: strict accuracy, run shapes, the generalisation
split (no leakage: held-out fan-outs and input sizes never reach training, every
predictor is scored on exactly the held-out rows) and the report's keys."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from lifetime_model import (BUNDLED_DATASETS, BUNDLED_MODELS, DEFAULT_SPLIT, Row, Split, compare_generalisation, fit_lookup, intervals, load_rows,
                            medians, run_shapes, score, split_by_run, split_rows)
from sdk.cli._bench_predictors import GENERALISATION_DATA, NAMES, by_run, generalisation, heuristic_fit


def _row(run: str, obj: str, life: float, stage: float = 1.0, size: int = 100) -> Row:
    return Row(run, "w/1", obj, (stage, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0), size, life)


def test_strict_accuracy_is_within_25_percent_of_the_objects_median() -> None:
    rows = [_row(f"r{i}", "a", life) for i, life in enumerate((100.0, 110.0, 400.0))]   # median 110
    bounds, mids = intervals(rows), medians(rows)
    assert mids[rows[0].key] == 110.0
    inside = score(rows[:1], [137.0], bounds, mids)            # within 25% of 110 (82.5 .. 137.5)
    outside = score(rows[:1], [139.0], bounds, mids)
    assert inside.strict_accuracy == 1.0 and outside.strict_accuracy == 0.0
    assert outside.accuracy == 1.0                             # the 95% interval is wide: the noise widens it
    assert score(rows[:1], [139.0], bounds).strict_accuracy is None   # no medians: not measured
    assert set(inside.to_dict()) >= {"accuracy", "strict_accuracy", "mae_ms"}


def test_a_runs_shape_is_its_first_stages_object_count_and_bytes() -> None:
    rows = []
    for run, fan, each in (("s/r-1", 2, 50), ("s/r-2", 4, 25), ("s/r-3", 4, 100)):
        rows += [_row(run, f"chunk_{i}", 10.0, stage=0.0, size=each) for i in range(fan)]
        rows += [_row(run, f"counts_{i}", 20.0, stage=1.0, size=7) for i in range(fan * 2)]
    s = run_shapes(rows)
    assert (s["s/r-1"].fan_out, s["s/r-1"].size_class) == (2, 1.0)
    assert (s["s/r-2"].fan_out, s["s/r-2"].size_class) == (4, 1.0)       # the same input, cut in 4
    assert (s["s/r-3"].fan_out, s["s/r-3"].size_class, s["s/r-3"].input_bytes) == (4, 4.0, 400)


def test_a_split_that_leaves_nothing_to_train_on_says_what_the_runs_have() -> None:
    rows = [_row(f"r{i}", "chunk", 1.0, stage=0.0) for i in range(3)]
    with pytest.raises(Exception, match=r"leaves no training runs.*\(1, 1.0\)"):
        split_rows(rows, Split(frozenset({1}), frozenset()))


@pytest.fixture(scope="module")
def shipped() -> list[Row]:
    return load_rows(GENERALISATION_DATA, "analytics")


def test_the_shipped_dataset_has_every_shape_of_the_default_split_in_3_runs_or_more(shipped: list[Row]) -> None:
    shapes = run_shapes(shipped)
    runs: dict[tuple[int, float], int] = {}
    for s in shapes.values():
        runs[(s.fan_out, s.size_class)] = runs.get((s.fan_out, s.size_class), 0) + 1
    fans, sizes = {f for f, _ in runs}, {c for _, c in runs}
    assert DEFAULT_SPLIT.unseen_fan_outs < fans and DEFAULT_SPLIT.unseen_sizes < sizes
    assert len(fans - DEFAULT_SPLIT.unseen_fan_outs) >= 5 and len(sizes - DEFAULT_SPLIT.unseen_sizes) >= 3
    assert min(runs.values()) >= 3


def test_unseen_fan_outs_and_sizes_never_occur_in_training_and_each_predictor_scores_the_held_out_rows(
        shipped: list[Row]) -> None:
    shapes = run_shapes(shipped)
    seen, unseen = split_rows(shipped, DEFAULT_SPLIT, shapes)
    assert {shapes[r.run].fan_out for r in seen}.isdisjoint(DEFAULT_SPLIT.unseen_fan_outs)
    assert {shapes[r.run].size_class for r in seen}.isdisjoint(DEFAULT_SPLIT.unseen_sizes)
    assert all(DEFAULT_SPLIT.unseen(shapes[r.run]) for r in unseen)
    calls: dict[str, list[tuple[list[Row], list[Row], list[Row]]]] = {}

    def recorded(name: str, fit):  # type: ignore[no-untyped-def]
        def f(train: Sequence[Row], val: Sequence[Row]):  # type: ignore[no-untyped-def]
            model = fit(train, val)

            def predict(rows: Sequence[Row]) -> list[float]:
                calls.setdefault(name, []).append((list(train), list(val), list(rows)))
                return model(rows)
            return predict
        return f

    out = compare_generalisation(shipped, DEFAULT_SPLIT, {"lookup_again": recorded("lookup", fit_lookup),
                                                         "heuristic": recorded("heuristic", heuristic_fit)})
    train, val, test = split_by_run(seen)
    for name, got in calls.items():
        (tr1, va1, seen_test), (tr2, va2, unseen_test), *by_new = got
        assert tr1 == tr2 == train and va1 == va2 == val, name      # the same training rows, seen shapes only
        assert seen_test == test and unseen_test == unseen, name    # exactly the held-out rows
        assert sorted(id(r) for _, _, part in by_new for r in part) == sorted(id(r) for r in unseen)
    assert {shapes[r.run] for r in train + val}.isdisjoint({shapes[r.run] for r in unseen})
    assert out["unseen"]["rows"] == len(unseen) and out["seen"]["rows"] == len(test)
    assert sum(out[p]["rows"] for p in ("unseen_fan_out", "unseen_size", "unseen_both")) == len(unseen)
    assert out["unseen"]["lookup"] == out["unseen"]["lookup_again"]
    assert out["split"]["fan_outs_unseen"] == [12, 32] and out["split"]["sizes_unseen"] == [6.0, 16.0]


def test_the_report_has_every_predictors_scores_under_seen_and_unseen() -> None:
    g = generalisation(GENERALISATION_DATA, "analytics", [12, 32], [6, 16], epochs=20)
    for part in ("seen", "unseen"):
        assert set(NAMES) <= set(g[part])
        for name in NAMES:
            s = g[part][name]
            assert s["mae_ms"] is not None and s["mae_ms"] >= 0
            assert s["accuracy"] is not None and s["strict_accuracy"] is not None
            assert s["rows"] == g[part]["rows"] > 0


@pytest.mark.parametrize("category", ["analytics", "compile", "video"])
def test_the_served_default_is_the_mlp_and_it_beats_the_lookup_on_the_shipped_datasets(category: str,
                                                                                         tmp_path: Path) -> None:
    from metadata_server import MetadataHandler, MetadataState, attach_lifetimes

    handler = MetadataHandler(MetadataState())
    attach_lifetimes(handler, data_dir=None, models_dirs=[tmp_path, BUNDLED_MODELS])   # as the stack does
    served = handler.state.predictor.store.get(category)  # type: ignore[attr-defined]
    assert served is not None and handler.state.predictor.revision(category).startswith("model:")  # type: ignore[attr-defined]
    out = by_run(load_rows(BUNDLED_DATASETS, category), served)
    assert out["mlp"]["mae_ms"] <= out["lookup"]["mae_ms"], out
    assert out["mlp"]["strict_accuracy"] > out["lookup"]["strict_accuracy"], out
    assert out["mlp"]["accuracy"] >= out["lookup"]["accuracy"], out


@pytest.mark.slow
def test_on_unseen_fan_outs_and_sizes_the_mlp_beats_the_lookup(shipped: list[Row]) -> None:
    g = generalisation(GENERALISATION_DATA, "analytics", [12, 32], [6, 16], epochs=600)
    for part in ("unseen", "unseen_fan_out", "unseen_size", "unseen_both"):
        u = g[part]
        assert u["mlp"]["mae_ms"] < u["lookup"]["mae_ms"] <= u["stage_lookup"]["mae_ms"], (part, u)
        assert u["mlp"]["strict_accuracy"] > u["lookup"]["strict_accuracy"], (part, u)
    # issue 32's target, with the run's input size and width: an MAE at least 20% below the
    # strongest simple baseline's (the per-stage and input-size lookup); measured 30.9%
    assert g["unseen"]["mlp"]["mae_ms"] <= 0.8 * g["unseen"]["lookup"]["mae_ms"], g["unseen"]


def test_collect_grid_runs_every_combination_of_fan_out_and_input_size() -> None:
    from sdk.local._collect import grid, plan

    g = grid("wordcount", {"mappers": [2, 12], "reducers": [2]}, [0.5, 3.0])
    assert [(v.params["mappers"], v.text_share) for v in g] == [(2, 0.5), (2, 3.0), (12, 0.5), (12, 3.0)]
    runs = plan(["wordcount"], 8, grids={"wordcount": g})
    assert runs == g + g                                       # each combination as often
    with pytest.raises(Exception, match="wordcount only"):
        grid("video", {"segments": [4]}, [2.0])
