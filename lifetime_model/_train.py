"""Training a category's lifetime model with torch, and replacing the served one only
when the new one is more accurate on held-out runs. Torch is imported here only.

The network is FuncStore's (Sec. III-C2) over the dataset's features (FuncStore's five
and the two wave features, ``FEATURES``) and, when the training runs' input sizes are
known and not all the same (``takes_input_size``), the run's inputs (log2 of its input
bytes, of its width and of its bytes per function of the widest stage, ``RUN_INPUTS``: a
model of format 3), standardized with the
training rows' mean and deviation, three hidden layers of 64 with ReLU, one output,
the standardized lifetime (``y_mean + y_std * out`` ms). Adam on the mean absolute
error (it fits the median of objects that share features, which lands inside more of
their 95% intervals than the mean when lifetimes are skewed), full batch, for ``epochs``; the weights kept are those of the epoch with the
lowest validation MAE. The test runs give the accuracy and MAE saved with it.

``retrain`` decides: a candidate replaces the category's current model when, on the
test runs of today's data (which neither model trained on, ``split_by_run``), its
accuracy is higher, or equal with an MAE at least 1% lower; the first model of a category is
installed when it has a test score at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._dataset import FEATURES, Row, load_rows
from ._measure import Key, Score, feature_ceiling, intervals, score, split_by_run
from ._model_file import RUN_INPUTS, Mlp, inputs_of, load_model, model_path, save_model
from .exceptions import DatasetError, ModelFileError

__all__ = ["HIDDEN", "MIN_TRAIN_RUNS", "Outcome", "fit", "train", "retrain", "evaluate", "mlp_fit",
           "takes_input_size"]

HIDDEN = (64, 64, 64)
MIN_TRAIN_RUNS = 5
#: A candidate as accurate as the current model replaces it only with an MAE this much lower.
MAE_MARGIN = 0.01


@dataclass
class Outcome:
    """What ``retrain`` did for one category."""

    category: str
    replaced: bool
    reason: str
    candidate: dict[str, Any] = field(default_factory=dict)   # its test score and data
    current: dict[str, Any] | None = None                      # the served model's score on the same runs
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "replaced": self.replaced, "reason": self.reason,
                "candidate": self.candidate, "current": self.current, "path": self.path}


def takes_input_size(rows: Sequence[Row]) -> bool:
    """Whether a model trained on ``rows`` takes the run's inputs: every run's input size and
    width are known and there are at least two sizes (a constant input would teach the
    network nothing about it, and its weights would then scale whatever size a run brings)."""
    sizes = {r.input_bytes for r in rows}
    return len(sizes) > 1 and 0 not in sizes and all(r.width > 0 for r in rows)


def evaluate(mlp: Mlp, rows: Sequence[Row], bounds: dict[Key, tuple[float, float]]) -> Score:
    if not rows:
        return Score(None, None, 0, 0, 0)
    return score(rows, mlp.predict_rows(rows), bounds)


def mlp_fit(*, seed: int = 0, epochs: int = 600, fitted: list[Mlp] | None = None
            ) -> Callable[[Sequence[Row], Sequence[Row]], Callable[[Sequence[Row]], list[float]]]:
    """A ``_compare.Fit`` for the MLP: trains on the training rows, keeps the weights of
    the epoch with the lowest MAE on the validation rows, predicts in ms. Each model it
    trains is appended to ``fitted`` (what it took, for a report)."""
    def fit_rows(train_rows: Sequence[Row], val_rows: Sequence[Row]) -> Callable[[Sequence[Row]], list[float]]:
        mlp = fit([*train_rows, *val_rows], seed=seed, epochs=epochs, parts=(list(train_rows), list(val_rows), []))[0]
        if fitted is not None:
            fitted.append(mlp)
        return mlp.predict_rows

    return fit_rows


def train(rows: Sequence[Row], *, seed: int = 0, epochs: int = 600, lr: float = 1e-2) -> Mlp:
    """Train on ``rows`` (split 80/10/10 by run); the returned model's ``meta`` holds its
    split, validation and test scores. ``DatasetError`` when there is too little data."""
    return fit(rows, seed=seed, epochs=epochs, lr=lr)[0]


def fit(rows: Sequence[Row], *, seed: int = 0, epochs: int = 600, lr: float = 1e-2,
        parts: tuple[list[Row], list[Row], list[Row]] | None = None) -> tuple[Mlp, Any]:
    """``train``, also returning the torch network holding the kept weights (its output on
    standardized features is the standardized lifetime): what the export is checked against.
    ``parts``: the training, validation and test rows of ``rows`` (default ``split_by_run``)."""
    import numpy as np
    import torch

    train_rows, val_rows, test_rows = parts if parts is not None else split_by_run(rows, seed)
    runs = len({r.run for r in rows})
    if runs < MIN_TRAIN_RUNS or not train_rows:
        raise DatasetError(f"{len(rows)} rows from {runs} runs: training needs objects from at least "
                           f"{MIN_TRAIN_RUNS} runs; record more with `funcsion collect --runs N`")
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # small nets: threads only contend (and the machine runs servers)
    inputs = (*FEATURES, *RUN_INPUTS) if takes_input_size(train_rows) else tuple(FEATURES)
    x = np.array(inputs_of(train_rows, inputs), dtype=np.float64)
    y = np.array([r.lifetime_ms for r in train_rows], dtype=np.float64)
    x_mean, x_std = x.mean(axis=0), x.std(axis=0)
    x_std = np.where(x_std > 0, x_std, 1.0)
    y_mean, y_std = float(y.mean()), float(y.std()) or 1.0
    sizes = (len(inputs), *HIDDEN, 1)
    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers).double()
    xt = torch.from_numpy((x - x_mean) / x_std)
    yt = torch.from_numpy((y - y_mean) / y_std).unsqueeze(1)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]

    def snapshot(meta: dict[str, Any]) -> Mlp:
        return Mlp(tuple(m.weight.detach().numpy().T.copy() for m in linears),
                   tuple(m.bias.detach().numpy().copy() for m in linears), x_mean, x_std, y_mean, y_std,
                   {"features": list(inputs), **meta})

    bounds = intervals(rows)
    check = val_rows or train_rows
    best: tuple[float, Mlp] | None = None
    t0 = time.monotonic()
    for epoch in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.l1_loss(net(xt), yt)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        if epoch % 10 == 9 or epoch == epochs - 1:
            cand = snapshot({})
            mae = evaluate(cand, check, bounds).mae_ms or 0.0
            if best is None or mae < best[0]:
                best = (mae, cand)
                kept = {k: v.clone() for k, v in net.state_dict().items()}
    assert best is not None
    net.load_state_dict(kept)
    mlp = best[1]
    val, test = evaluate(mlp, val_rows, bounds), evaluate(mlp, test_rows, bounds)
    meta = {"features": list(inputs), "layers": list(sizes), "activation": "relu", "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                     time.gmtime()),
            "train_s": round(time.monotonic() - t0, 3), "epochs": epochs, "seed": seed, "torch": torch.__version__,
            "rows": len(rows), "runs": runs,
            "split": {"train_rows": len(train_rows), "validation_rows": len(val_rows), "test_rows": len(test_rows),
                      "train_runs": len({r.run for r in train_rows}), "validation_runs": len({r.run for r in val_rows}),
                      "test_runs": len({r.run for r in test_rows})},
            "accuracy": test.accuracy, "mae_ms": test.mae_ms, "test": test.to_dict(), "validation": val.to_dict(),
            "feature_ceiling": feature_ceiling(rows, seed).to_dict()}
    return Mlp(mlp.weights, mlp.biases, x_mean, x_std, y_mean, y_std, meta), net


def retrain(data_dir: str | Path, models_dir: str | Path, category: str, *, seed: int = 0,
            epochs: int = 600, current_dirs: Sequence[str | Path] = ()) -> Outcome:
    """Train a candidate on the category's dataset and install it in ``models_dir`` when it
    beats the current model (the first of ``models_dir``, ``*current_dirs`` that has one)
    on today's test runs."""
    rows = load_rows(data_dir, category)
    cand = train(rows, seed=seed, epochs=epochs)
    test_rows = split_by_run(rows, seed)[2]
    bounds = intervals(rows)
    c = evaluate(cand, test_rows, bounds)
    out = Outcome(category, False, "", candidate={"test": c.to_dict(), "rows": len(rows),
                                                   "runs": cand.meta["runs"]})
    current: Mlp | None = None
    unusable = ""                      # a model file there that cannot serve (e.g. an older format): replaced
    for d in (models_dir, *current_dirs):
        try:
            current = load_model(model_path(d, category))
            break
        except ModelFileError as exc:
            if not unusable and model_path(d, category).exists():
                unusable = str(exc)
            continue
    version = 1
    if current is not None:
        cur = evaluate(current, test_rows, bounds)
        out.current = {"model_version": current.version, "test": cur.to_dict()}
        version = current.version + 1
        if not _better(c, cur):
            out.reason = (f"kept model version {current.version}: on the {c.rows} test rows the candidate's "
                          f"accuracy {_pct(c.accuracy)} (MAE {_ms(c.mae_ms)}) is not above the current "
                          f"{_pct(cur.accuracy)} (MAE {_ms(cur.mae_ms)})")
            return out
    if c.accuracy is None:
        out.reason = ("no test run has an object recorded in 3 or more runs, so accuracy cannot be measured; "
                      "record more runs")
        return out
    meta = dict(cand.meta, model_version=version)
    path = save_model(models_dir, category, Mlp(cand.weights, cand.biases, cand.x_mean, cand.x_std,
                                                cand.y_mean, cand.y_std, meta))
    out.replaced, out.path = True, str(path)
    out.reason = (f"installed model version {version}: accuracy {_pct(c.accuracy)}, MAE {_ms(c.mae_ms)} "
                  f"on {c.rows} test rows" + (f" (current {_pct(out.current['test']['accuracy'])})"
                                              if out.current else f" (replacing an unusable model: {unusable})"
                                              if unusable else ""))
    return out


def _better(c: Score, cur: Score) -> bool:
    """More accurate, or as accurate with an MAE at least ``MAE_MARGIN`` lower (noise in
    the last digits is no reason to swap models)."""
    ca, ua = c.accuracy or 0.0, cur.accuracy or 0.0
    if ca != ua:
        return ca > ua
    return (c.mae_ms or 0.0) < (cur.mae_ms or 0.0) * (1.0 - MAE_MARGIN)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} ms"
