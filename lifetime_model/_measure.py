"""FuncStore's accuracy measure and the split by run. Pure Python, no numpy.

Accuracy (FuncStore Sec. III-C2): for each object (``Row.key``: the same object
of the same workflow with the same features, across runs), take the mean and standard deviation of its
measured lifetimes over every run recorded; under a normal distribution its
lifetimes lie in ``mean +- 1.96 sd`` 95% of the time. A prediction for that
object is accurate when it lies in that interval. Objects seen in fewer than
``MIN_RUNS`` runs have no interval and are left out of the measure (counted in
``unmeasured``). Mean absolute error is over every row, in milliseconds.

Strict accuracy: a prediction within ``STRICT`` (25%) of the object's median lifetime
over the runs (``medians``; the same ``MIN_RUNS`` rule). FuncStore's interval is as wide
as the object's lifetimes vary, so on a noisy machine it accepts predictions far from
any lifetime; the strict measure does not widen with the noise. Both take a ``key``:
what makes rows "the same object" (``Row.key``; the generalisation split adds the run's
shape, ``_split``).

The split keeps each run whole (80/10/10 of the runs, by a hash of the run id),
so validation and test measure predictions for runs the model never saw, and a
run stays in its part as the dataset grows (``split_by_run``).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._dataset import Row

Key = tuple[str, str, tuple[float, ...]]

__all__ = ["Key", "Z95", "MIN_RUNS", "STRICT", "Score", "intervals", "medians", "score", "split_by_run",
           "feature_ceiling"]

Z95 = 1.959964
MIN_RUNS = 3
#: Strict accuracy: a prediction within this share of the object's median lifetime.
STRICT = 0.25


@dataclass(frozen=True, slots=True)
class Score:
    accuracy: float | None        # share of measured rows whose prediction lies in the object's interval
    mae_ms: float | None
    rows: int
    measured: int                 # rows whose object has an interval
    unmeasured: int
    strict_accuracy: float | None = None   # share of rows with a median whose prediction is within STRICT of it

    def to_dict(self) -> dict[str, float | int | None]:
        return {"accuracy": self.accuracy, "strict_accuracy": self.strict_accuracy, "mae_ms": self.mae_ms,
                "rows": self.rows, "measured": self.measured, "unmeasured": self.unmeasured}


def _row_key(r: Row) -> Key:
    return r.key


def _by_key(rows: Sequence[Row], key: Callable[[Row], Hashable]) -> dict[Hashable, list[float]]:
    by: dict[Hashable, list[float]] = {}
    for r in rows:
        by.setdefault(key(r), []).append(r.lifetime_ms)
    return by


def medians(rows: Sequence[Row], key: Callable[[Row], Hashable] = _row_key) -> dict[Hashable, float]:
    """``key(row) -> median lifetime`` over the object's runs, for objects recorded in at
    least ``MIN_RUNS`` runs."""
    return {k: statistics.median(xs) for k, xs in _by_key(rows, key).items() if len(xs) >= MIN_RUNS}


def intervals(rows: Sequence[Row], z: float = Z95,
              key: Callable[[Row], Hashable] = _row_key) -> dict[Any, tuple[float, float]]:
    """``key(row) -> (low, high)``: ``mean +- z sd`` of the object's lifetimes, for objects
    recorded in at least ``MIN_RUNS`` runs."""
    by = _by_key(rows, key)
    out: dict[Any, tuple[float, float]] = {}
    for k, xs in by.items():
        if len(xs) < MIN_RUNS:
            continue
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        out[k] = (m - z * sd, m + z * sd)
    return out


def score(rows: Sequence[Row], predicted_ms: Sequence[float], bounds: Mapping[Any, tuple[float, float]],
          mids: Mapping[Any, float] | None = None, key: Callable[[Row], Hashable] = _row_key) -> Score:
    """Accuracy and MAE of ``predicted_ms[i]`` for ``rows[i]``; the strict accuracy too when
    given the objects' ``mids`` (``medians``). ``key`` must be the one the bounds and
    medians were computed with."""
    if len(rows) != len(predicted_ms):
        raise ValueError(f"{len(rows)} rows but {len(predicted_ms)} predictions")
    hit = measured = strict = strict_n = 0
    err = 0.0
    for r, p in zip(rows, predicted_ms):
        err += abs(p - r.lifetime_ms)
        k = key(r)
        b = bounds.get(k)
        if b is not None:
            measured += 1
            hit += b[0] <= p <= b[1]
        m = mids.get(k) if mids is not None else None
        if m is not None:
            strict_n += 1
            strict += abs(p - m) <= STRICT * m
    n = len(rows)
    return Score(hit / measured if measured else None, err / n if n else None, n, measured, n - measured,
                 strict / strict_n if strict_n else None)


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
    return score(test_rows, pred, intervals(rows), medians(rows))
