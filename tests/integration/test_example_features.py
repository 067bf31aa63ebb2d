"""The feature-pipeline example end to end, run with one command as a user would
(``funcsion run examples/features/features.wds.json --json``): the report's held-out
score, weights and merged column statistics are those of the same pipeline computed in
one process with numpy, every intermediate was freed by its last reader's commit, and
the held-out features and statistics (read only by the last stage) lived past the
features the next stage read at once. A missing numpy fails these tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .examples import EXAMPLES, check_freed, funcsion_run, load, output, require_modules

FEATURES = EXAMPLES / "features" / "features.wds.json"


@pytest.fixture(scope="module", autouse=True)
def packages() -> None:
    require_modules("features", "numpy")


def in_one_process(shards: int, parts: int) -> dict[str, Any]:
    """The pipeline without funcsion: the same handlers' numpy functions on the same input."""
    import numpy as np

    inputs, h = load("features", "inputs"), load("features", "handlers")
    data = inputs.samples(shards, parts)
    grams, holdouts = [], []
    for shard in np.array_split(data, shards):
        x, y = shard[:, :-1], shard[:, -1]
        mean, std = x.mean(axis=0), x.std(axis=0)
        blocks = np.array_split(np.arange(len(shard)), parts + 1)
        grams.append(h.gram([h.with_target(h.featurize(x[r], mean, std), y[r]) for r in blocks[:-1]]))
        holdouts.append(h.with_target(h.featurize(x[blocks[-1]], mean, std), y[blocks[-1]]))
    w = h.solve(grams, sum(len(b) for s in np.array_split(data, shards)
                           for b in np.array_split(np.arange(len(s)), parts + 1)[:-1]))
    a = np.vstack(holdouts).astype(np.float64)
    pred, y = a[:, :-1] @ w, a[:, -1]
    return {"rmse": float(np.sqrt(np.mean((pred - y) ** 2))), "weights_norm": float(np.linalg.norm(w)),
            "column_mean": data[:, :-1].mean(axis=0), "column_std": data[:, :-1].std(axis=0),
            "target_mean": float(data[:, -1].mean()), "rows": len(data), "holdout_rows": len(a)}


@pytest.mark.slow
def test_one_command_runs_the_pipeline_and_its_report_is_numpys(tmp_path: Path) -> None:
    import numpy as np

    d = funcsion_run(FEATURES, tmp_path / "state", "--param", "shards=4", "--param", "parts=2")
    assert d["status"] == "succeeded", d["error"]
    check_freed(d)
    report = json.loads(output(str(tmp_path / "state" / "cos"), d, "report"))
    want = in_one_process(4, 2)
    assert report["rows"] == report["schema_rows"] == want["rows"] == 4 * 3 * 1024
    assert report["holdout_rows"] == want["holdout_rows"] == 4 * 1024
    assert report["features"] == 224
    assert report["rmse"] == pytest.approx(want["rmse"], rel=1e-4)
    assert report["weights_norm"] == pytest.approx(want["weights_norm"], rel=1e-4)
    assert np.allclose(report["column_mean"], want["column_mean"], atol=1e-9)
    assert np.allclose(report["column_std"], want["column_std"], rtol=1e-9)
    assert report["target_mean"] == pytest.approx(want["target_mean"], abs=1e-9)
    # the model learnt the nonlinear target: far better than predicting its mean
    assert report["r2"] > 0.9, report["r2"]
    # lifetimes mix within a stage: a featurizer's held-out features outlive its features
    objs = d["objects"]
    for i in range(4):
        assert objs[f"holdout_{i:02d}"]["reads"] == ["evaluator"]
        assert objs[f"stats_{i:02d}"]["freed_at"] == objs[f"holdout_{i:02d}"]["freed_at"]
        for p in range(2):
            f = objs[f"features_{i:02d}_{p:02d}"]
            assert f["written_at"] == objs[f"holdout_{i:02d}"]["written_at"]
            assert f["freed_at"] < objs[f"holdout_{i:02d}"]["freed_at"]
            assert f["size"] > 512 * 1024 and f["size"] <= 1 << 20   # slices: one block at most
