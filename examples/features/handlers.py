"""A feature pipeline as a funcsion workflow (see features.wds.json), written so that every
stage mixes lifetimes: objects read at once by the next stage beside objects read only by
the last one.

``loader`` cuts ``samples`` into one shard per featurizer (read at once) and writes the
``schema`` (read only by the evaluator). Each ``featurizer_NN`` lifts its shard's training
rows to random Fourier features in ``parts`` objects (read at once by its solver), its
held-out rows likewise in ``holdout_NN`` and the shard's column statistics in ``stats_NN``
(both read only by the evaluator). Each ``solver_NN`` reduces its features to a Gram matrix
``gram_NN``; the ``trainer`` sums them and solves ridge regression into the ``checkpoint``;
the ``evaluator`` scores the checkpoint on every held-out row and merges the statistics into
the workflow output ``report``. Arrays travel as ``.npy`` bytes; the fan-out follows the WDS
parameters through ``sdk.inputs()`` / ``sdk.outputs()``.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

import sdk

#: random Fourier frequencies (the features are their cosines and sines: twice as many)
FREQUENCIES = 112
#: bandwidth of the Gaussian kernel the features approximate
BANDWIDTH = 2.0
#: ridge penalty
RIDGE = 1e-5
#: the projection's seed: every featurizer draws the same frequencies
PROJECTION_SEED = 7


def to_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def from_bytes(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(b), allow_pickle=False)


def projection(columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The frequencies (columns x FREQUENCIES) and phases every featurizer uses."""
    rng = np.random.default_rng(PROJECTION_SEED)
    return rng.standard_normal((columns, FREQUENCIES)) / BANDWIDTH, rng.uniform(0, 2 * np.pi, FREQUENCIES)


def featurize(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Random Fourier features of standardised rows (float32, 2 * FREQUENCIES columns)."""
    w, b = projection(x.shape[1])
    z = ((x - mean) / std) @ w + b
    return (np.hstack([np.cos(z), np.sin(z)]) * np.sqrt(1.0 / FREQUENCIES)).astype(np.float32)


def with_target(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Features and target in one float32 array (the target last)."""
    return np.column_stack([features, y.astype(np.float32)])


def gram(parts: list[np.ndarray]) -> np.ndarray:
    """[Phi^T Phi | Phi^T y] of the rows of ``parts`` (float64)."""
    a = np.vstack(parts).astype(np.float64)
    phi, y = a[:, :-1], a[:, -1]
    return np.column_stack([phi.T @ phi, phi.T @ y])


def solve(grams: list[np.ndarray], rows: int) -> np.ndarray:
    """Ridge weights from summed Gram matrices."""
    g = np.sum(grams, axis=0)
    k = g.shape[0]
    return np.linalg.solve(g[:, :k] + RIDGE * rows * np.eye(k), g[:, k])


@sdk.task
def loader(event: dict, context: object) -> dict:
    (source,) = sdk.inputs()
    data = from_bytes(sdk.get(source))
    outs = sdk.outputs()
    shard_names = [o for o in outs if o.startswith("shard_")]
    x = data[:, :-1]
    # the schema: how to standardise (from the whole set) and the layout of a shard
    schema = {"columns": x.shape[1], "rows": len(data), "mean": x.mean(axis=0).tolist(),
              "std": x.std(axis=0).tolist(), "shards": len(shard_names)}
    values: dict[str, Any] = dict(zip(shard_names, (to_bytes(s) for s in np.array_split(data, len(shard_names)))))
    values["schema"] = schema
    sdk.put_many(values)
    return {"rows": len(data), "shards": len(shard_names)}


@sdk.task
def featurizer(event: dict, context: object) -> dict:
    (shard,) = sdk.inputs()
    data = from_bytes(sdk.get(shard))
    outs = sdk.outputs()
    parts = [o for o in outs if o.startswith("features_")]
    (holdout,) = [o for o in outs if o.startswith("holdout_")]
    (stats,) = [o for o in outs if o.startswith("stats_")]
    x, y = data[:, :-1], data[:, -1]
    # standardise by this shard's own columns: the evaluator merges the statistics
    mean, std = x.mean(axis=0), x.std(axis=0)
    blocks = np.array_split(np.arange(len(data)), len(parts) + 1)
    values: dict[str, Any] = {p: to_bytes(with_target(featurize(x[r], mean, std), y[r]))
                              for p, r in zip(parts, blocks)}
    values[holdout] = to_bytes(with_target(featurize(x[blocks[-1]], mean, std), y[blocks[-1]]))
    values[stats] = {"rows": len(data), "sum": x.sum(axis=0).tolist(), "sumsq": (x * x).sum(axis=0).tolist(),
                     "y_sum": float(y.sum()), "y_sumsq": float((y * y).sum())}
    sdk.put_many(values)
    return {"rows": len(data), "parts": len(parts)}


@sdk.task
def solver(event: dict, context: object) -> dict:
    parts = [from_bytes(v) for v in sdk.get_many(sdk.inputs()).values()]
    (out,) = sdk.outputs()
    sdk.put(out, to_bytes(gram(parts)))
    return {"rows": sum(len(p) for p in parts)}


@sdk.task
def trainer(event: dict, context: object) -> dict:
    grams = [from_bytes(v) for v in sdk.get_many(sdk.inputs()).values()]
    # every feature row has unit norm (cos^2 + sin^2 over D frequencies, scaled by 1/D): tr(Phi^T Phi) = rows
    rows = int(round(float(np.sum([g[:, :-1].trace() for g in grams]))))
    w = solve(grams, rows)
    (out,) = sdk.outputs()
    sdk.put(out, to_bytes(w))
    return {"weights": len(w), "rows": rows}


@sdk.task
def evaluator(event: dict, context: object) -> dict:
    got = sdk.get_many(sdk.inputs())
    w = from_bytes(got["checkpoint"])
    schema = got["schema"]
    holdouts = [from_bytes(v) for k, v in sorted(got.items()) if k.startswith("holdout_")]
    stats = [v for k, v in sorted(got.items()) if k.startswith("stats_")]
    a = np.vstack(holdouts).astype(np.float64)
    pred, y = a[:, :-1] @ w, a[:, -1]
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    r2 = 1.0 - float(np.sum((pred - y) ** 2)) / float(np.sum((y - y.mean()) ** 2))
    rows = sum(s["rows"] for s in stats)
    mean = np.sum([s["sum"] for s in stats], axis=0) / rows
    var = np.sum([s["sumsq"] for s in stats], axis=0) / rows - mean ** 2
    y_mean = sum(s["y_sum"] for s in stats) / rows
    report = {"rows": rows, "holdout_rows": len(a), "features": len(w), "rmse": rmse, "r2": r2,
              "weights_norm": float(np.linalg.norm(w)), "column_mean": mean.tolist(),
              "column_std": np.sqrt(np.maximum(var, 0.0)).tolist(), "target_mean": y_mean,
              "schema_rows": schema["rows"]}
    (out,) = sdk.outputs()
    sdk.put(out, report)
    return {"rmse": rmse, "r2": r2}
