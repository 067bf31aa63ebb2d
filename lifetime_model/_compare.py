"""The lifetime model against simple baselines, on the same held-out rows. Pure Python,
no numpy, no torch.

Baselines fitted on training rows: ``constant`` (each workflow's median lifetime),
``stage_lookup`` (the median per stage: workflow and ``F_stage``, the workflow's median
for a stage never seen) and ``lookup``, the strongest of them and the one the model is
measured against: the median per stage and input size (the run's input bytes in
quarter-octave buckets, ``size_bucket``; an input size never seen takes the stage's
nearest bucket, an unknown one the stage's median). Beside them, not a predictor but a bound: ``other_runs``, the median
of the same object in the other runs (it needs the test runs' shape recorded, which no
predictor has). Other predictors (the MLP, the server's heuristic) come in as
``Fit`` functions, so this module does not import torch or the metadata server.

Two comparisons:

- ``compare_by_run``: train on the 80% of runs ``split_by_run`` trains on, score on its
  10% test runs; FuncStore's object identity (``Row.key``).
- ``compare_generalisation``: every run has a shape (``_split.run_shapes``: its fan-out
  and input size); train on the runs whose shape is seen (``Split``), score ``seen``
  on their test runs and ``unseen`` on every run with an unseen fan-out or input size.
  "The same object" is ``Row.key`` at the same shape, so a larger input does not widen
  the interval of the object at a smaller one.

Not covered: training the MLP (``_train``), running the examples (``sdk.local._collect``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ._dataset import Row
from ._measure import intervals, medians, score, split_by_run
from ._split import Split, run_shapes, split_rows

__all__ = ["Fit", "Model", "BASELINES", "fit_constant", "fit_stage_lookup", "fit_lookup", "other_runs",
           "compare_by_run", "compare_generalisation", "size_bucket"]

#: A fitted predictor: rows -> predicted lifetimes in ms.
Model = Callable[[Sequence[Row]], list[float]]
#: Fits a predictor on training rows; validation rows (other runs) for those that stop early.
Fit = Callable[[Sequence[Row], Sequence[Row]], Model]


def fit_constant(train: Sequence[Row], val: Sequence[Row] = ()) -> Model:
    """Each workflow's median lifetime (0 for a workflow never seen)."""
    by: dict[str, list[float]] = {}
    for r in train:
        by.setdefault(r.workflow, []).append(r.lifetime_ms)
    med = {w: statistics.median(xs) for w, xs in by.items()}
    return lambda rows: [med.get(r.workflow, 0.0) for r in rows]


def fit_stage_lookup(train: Sequence[Row], val: Sequence[Row] = ()) -> Model:
    """The median lifetime per stage (workflow, ``F_stage``); the workflow's for a stage
    never seen."""
    by: dict[tuple[str, float], list[float]] = {}
    for r in train:
        by.setdefault((r.workflow, r.features[0]), []).append(r.lifetime_ms)
    med = {k: statistics.median(xs) for k, xs in by.items()}
    const = fit_constant(train)

    def predict(rows: Sequence[Row]) -> list[float]:
        fallback = const(rows)
        return [med.get((r.workflow, r.features[0]), f) for r, f in zip(rows, fallback)]

    return predict


def size_bucket(input_bytes: int) -> float | None:
    """A run's input size as a quarter-octave bucket (log2 of its bytes to 1/4); None when
    unknown (0)."""
    return round(math.log2(input_bytes) * 4) / 4 if input_bytes > 0 else None


def fit_lookup(train: Sequence[Row], val: Sequence[Row] = ()) -> Model:
    """The median lifetime per stage (workflow, ``F_stage``) and input size
    (``size_bucket``): for an input size the stage has no bucket of, its nearest bucket (the
    larger of two as near); for an unknown size or a stage without known sizes, the stage's
    median (``fit_stage_lookup``)."""
    by: dict[tuple[str, float], dict[float, list[float]]] = {}
    for r in train:
        b = size_bucket(r.input_bytes)
        if b is not None:
            by.setdefault((r.workflow, r.features[0]), {}).setdefault(b, []).append(r.lifetime_ms)
    med = {k: {b: statistics.median(xs) for b, xs in buckets.items()} for k, buckets in by.items()}
    stage = fit_stage_lookup(train)

    def predict(rows: Sequence[Row]) -> list[float]:
        out = stage(rows)
        for i, r in enumerate(rows):
            b, buckets = size_bucket(r.input_bytes), med.get((r.workflow, r.features[0]))
            if b is not None and buckets:
                out[i] = buckets[min(buckets, key=lambda k: (abs(k - b), -k))]
        return out

    return predict


BASELINES: dict[str, Fit] = {"constant": fit_constant, "stage_lookup": fit_stage_lookup, "lookup": fit_lookup}


def other_runs(test: Sequence[Row], everything: Sequence[Row], key: Callable[[Row], Hashable]) -> list[float]:
    """For each test row, the median lifetime of the same object (``key``) in the other
    runs (0 when there is none): what a table of this very object would predict, so its
    score bounds what run-to-run noise lets any predictor reach."""
    by: dict[Hashable, list[Row]] = {}
    for r in everything:
        by.setdefault(key(r), []).append(r)
    out = []
    for r in test:
        xs = [o.lifetime_ms for o in by.get(key(r), ()) if o.run != r.run]
        out.append(statistics.median(xs) if xs else 0.0)
    return out


def _evaluate(fits: Mapping[str, Fit], train: Sequence[Row], val: Sequence[Row],
              tests: Mapping[str, Sequence[Row]], everything: Sequence[Row],
              key: Callable[[Row], Hashable]) -> dict[str, dict[str, Any]]:
    """Each predictor fitted once on ``train`` (``val`` for early stopping), scored on each
    of ``tests`` (name -> rows): ``{test name: {"rows", "runs", "other_runs", predictor: score}}``."""
    bounds, mids = intervals(everything, key=key), medians(everything, key=key)
    out: dict[str, dict[str, Any]] = {}
    for part, test in tests.items():
        out[part] = {"rows": len(test), "runs": len({r.run for r in test})}
        if test:
            out[part]["other_runs"] = _rounded(score(test, other_runs(test, everything, key), bounds, mids,
                                                     key=key).to_dict())
    for name, fit in {**BASELINES, **fits}.items():
        model = fit(train, val)
        for part, test in tests.items():
            out[part][name] = _rounded(score(test, model(test), bounds, mids, key=key).to_dict()) if test else None
    return out


def _rounded(d: dict[str, float | int | None]) -> dict[str, float | int | None]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def compare_by_run(rows: Sequence[Row], fits: Mapping[str, Fit], seed: int = 0) -> dict[str, Any]:
    """Every predictor (the baselines and ``fits``), fitted on the training runs of
    ``split_by_run`` (its validation runs for early stopping), scored on its test runs."""
    train, val, test = split_by_run(rows, seed)
    return _evaluate(fits, train, val, {"test": test}, rows, lambda r: r.key)["test"]


def compare_generalisation(rows: Sequence[Row], split: Split, fits: Mapping[str, Fit],
                           seed: int = 0) -> dict[str, Any]:
    """``{"split": ..., "seen": {predictor: score}, "unseen": {predictor: score}, ...}``:
    every predictor fitted once, on the training runs (``split_by_run``; its validation
    runs for early stopping) of the seen shapes, scored on their test runs (``seen``), on
    every run of an unseen shape (``unseen``), and on the unseen runs split by what is new
    in them: ``unseen_fan_out`` (the fan-out, at a seen input size), ``unseen_size`` (the
    input size, at a seen fan-out), ``unseen_both``."""
    shapes = run_shapes(rows)
    seen, unseen = split_rows(rows, split, shapes)
    train, val, test = split_by_run(seen, seed)

    def key(r: Row) -> Hashable:
        return (shapes[r.run], r.key)

    def new(r: Row) -> str:
        s = shapes[r.run]
        fan, size = s.fan_out in split.unseen_fan_outs, s.size_class in split.unseen_sizes
        return "unseen_both" if fan and size else "unseen_fan_out" if fan else "unseen_size"

    tests: dict[str, list[Row]] = {"seen": test, "unseen": list(unseen), "unseen_fan_out": [], "unseen_size": [],
                                   "unseen_both": []}
    for r in unseen:
        tests[new(r)].append(r)
    return {"split": split.describe(rows, shapes), **_evaluate(fits, train, val, tests, rows, key)}
