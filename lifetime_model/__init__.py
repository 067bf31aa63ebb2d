"""Lifetime prediction (FuncStore Sec. III-C2): feature datasets recorded from runs
(``_dataset``, each row with its run's input size and width), FuncStore's accuracy measure
and a split by run (``_measure``), a torch MLP (7 graph features: FuncStore's 5 and two
wave features, and when the runs recorded it the run's input size, width and bytes per
function -> 3 hidden layers of 64, ReLU -> 1, in ms) trained per application category
(``_train``, the only module that imports torch, imported on demand), the model file
(``_model_file``) and a predictor for serving that needs numpy, not torch
(``_predictor``), and the model against baselines (a constant per workflow, the per-stage
median lookup, the per-stage and input-size lookup) on held-out runs and on fan-outs and
input sizes never trained on (``_compare``, ``_split``). Models shipped with funcsion live in ``models/`` (``BUNDLED_MODELS``),
the datasets they were trained on in ``datasets/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataset import (COLUMNS, FEATURES, VERSION, Row, append_rows, categories, check_category, dataset_path,
                       dataset_version, load_rows, move_aside)
from ._compare import (BASELINES, Fit, Model, compare_by_run, compare_generalisation, fit_constant, fit_lookup,
                       fit_stage_lookup, size_bucket)
from ._measure import MIN_RUNS, STRICT, Score, feature_ceiling, intervals, medians, score, split_by_run
from ._model_file import Mlp, load_model, model_path, read_meta, save_model
from ._predictor import ModelPredictor, ModelStore
from ._split import DEFAULT_SPLIT, Shape, Split, run_shapes, split_rows
from .exceptions import DatasetError, LifetimeModelError, ModelFileError

if TYPE_CHECKING:
    from ._train import Outcome

__all__ = ["BASELINES", "BUNDLED_DATASETS", "BUNDLED_MODELS", "COLUMNS", "DEFAULT_SPLIT", "DatasetError", "FEATURES",
           "Fit", "LifetimeModelError", "MIN_RUNS", "Mlp", "Model", "ModelFileError", "ModelPredictor", "ModelStore",
           "Outcome", "Row", "STRICT", "Score", "Shape", "Split", "append_rows", "VERSION", "categories",
           "check_category", "compare_by_run", "compare_generalisation", "dataset_path", "dataset_version",
           "feature_ceiling", "fit_constant", "fit_lookup", "fit_stage_lookup", "size_bucket", "intervals", "load_model", "load_rows", "medians",
           "model_path", "move_aside", "read_meta", "retrain", "run_shapes", "save_model", "score", "split_by_run",
           "split_rows", "train"]

#: The trained models shipped with funcsion (the example categories), and the datasets
#: they were trained on (``funcsion collect`` on the examples).
BUNDLED_MODELS = Path(__file__).resolve().parent / "models"
BUNDLED_DATASETS = Path(__file__).resolve().parent / "datasets"


def train(*args: Any, **kwargs: Any) -> Mlp:
    """``_train.train`` (imports torch)."""
    from ._train import train as _t

    return _t(*args, **kwargs)


def retrain(*args: Any, **kwargs: Any) -> Outcome:
    """``_train.retrain`` (imports torch)."""
    from ._train import retrain as _r

    return _r(*args, **kwargs)
