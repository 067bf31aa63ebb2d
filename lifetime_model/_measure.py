"""FuncStore's accuracy measure and the split by run. Pure Python, no numpy.

Accuracy (FuncStore Sec. III-C2): for each object (``Row.key``: the same object
of the same workflow with the same features, across runs), take the mean and standard deviation of its
measured lifetimes over every run recorded; under a normal distribution its
lifetimes lie in ``mean +- 1.96 sd`` 95% of the time. A prediction for that
object is accurate when it lies in that interval. Objects seen in fewer than
``MIN_RUNS`` runs have no interval and are left out of the measure (counted in
``unmeasured``). Mean absolute error is over every row, in milliseconds.

The split keeps each run whole (80/10/10 of the runs, by a hash of the run id),
so validation and test measure predictions for runs the model never saw, and a
run stays in its part as the dataset grows (``split_by_run``).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ._dataset import Row

Key = tuple[str, str, tuple[float, ...]]

__all__ = ["Key", "Z95", "MIN_RUNS", "Score", "intervals", "score", "split_by_run", "feature_ceiling"]

Z95 = 1.959964
MIN_RUNS = 3


@dataclass(frozen=True, slots=True)
class Score:
    accuracy: float | None        # share of measured rows whose prediction lies in the object's interval
    mae_ms: float | None
    rows: int
    measured: int                 # rows whose object has an interval
    unmeasured: int

    def to_dict(self) -> dict[str, float | int | None]:
        return {"accuracy": self.accuracy, "mae_ms": self.mae_ms, "rows": self.rows, "measured": self.measured,
                "unmeasured": self.unmeasured}


def intervals(rows: Sequence[Row], z: float = Z95) -> dict[Key, tuple[float, float]]:
    """``(workflow, object) -> (low, high)``: ``mean +- z sd`` of the object's lifetimes,
    for objects recorded in at least ``MIN_RUNS`` runs."""
    by: dict[Key, list[float]] = {}
    for r in rows:
        by.setdefault(r.key, []).append(r.lifetime_ms)
    out: dict[Key, tuple[float, float]] = {}
    for k, xs in by.items():
        if len(xs) < MIN_RUNS:
            continue
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        out[k] = (m - z * sd, m + z * sd)
    return out


def score(rows: Sequence[Row], predicted_ms: Sequence[float],
          bounds: dict[Key, tuple[float, float]]) -> Score:
    """Accuracy and MAE of ``predicted_ms[i]`` for ``rows[i]``."""
    if len(rows) != len(predicted_ms):
        raise ValueError(f"{len(rows)} rows but {len(predicted_ms)} predictions")
    hit = measured = 0
    err = 0.0
    for r, p in zip(rows, predicted_ms):
        err += abs(p - r.lifetime_ms)
        b = bounds.get(r.key)
        if b is not None:
            measured += 1
            hit += b[0] <= p <= b[1]
    n = len(rows)
    return Score(hit / measured if measured else None, err / n if n else None, n, measured, n - measured)


def split_by_run(rows: Sequence[Row], seed: int = 0) -> tuple[list[Row], list[Row], list[Row]]:
    """Train, validation and test rows, 80/10/10 of the runs. A run's part follows from a
    hash of its id (and ``seed``), so it stays in its part as the dataset grows: a model
    trained earlier never saw a run that is test data now. With fewer than 10 runs the
    hash may leave a part empty; then the runs are dealt out in hash order instead
    (one to test, one to validation, the rest to training)."""
    runs = sorted({r.run for r in rows}, key=lambda run: _h(seed, run))
    part = {run: _bucket(_h(seed, run)) for run in runs}
    if len(runs) >= 3 and len(set(part.values())) < 3:
        part = {run: (2 if i == 0 else 1 if i == 1 else 0) for i, run in enumerate(runs)}
    out: tuple[list[Row], list[Row], list[Row]] = ([], [], [])
    for r in rows:
        out[part[r.run]].append(r)
    return out


def _h(seed: int, run: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{run}".encode(), digest_size=8).digest(), "big")


def _bucket(h: int) -> int:
    d = h % 10
    return 0 if d < 8 else 1 if d == 8 else 2


def feature_ceiling(rows: Sequence[Row], seed: int = 0, n_features: int | None = None) -> Score:
    """The test score of predicting, for each test row, the median training lifetime of
    the rows with the same workflow and features: about the best any predictor of these
    features can do (objects that share features but not lifetimes get one prediction;
    with FuncStore's five alone, e.g. the tasks of one stage that run in different waves).
    ``n_features``: use only the first n features (5: FuncStore's), the intervals stay
    those of whole objects."""
    train_rows, _, test_rows = split_by_run(rows, seed)
    by: dict[tuple[str, tuple[float, ...]], list[float]] = {}
    for r in train_rows:
        by.setdefault((r.workflow, r.features[:n_features]), []).append(r.lifetime_ms)
    med = {k: statistics.median(v) for k, v in by.items()}
    pred = [med.get((r.workflow, r.features[:n_features]), 0.0) for r in test_rows]
    return score(test_rows, pred, intervals(rows))
