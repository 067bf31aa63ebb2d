"""Lifetime prediction (FuncStore Sec. III-C2): feature datasets recorded from runs
(``_dataset``), FuncStore's accuracy measure and a split by run (``_measure``), a torch
MLP (7 features: FuncStore's 5 and two wave features -> 3 hidden layers of 64, ReLU -> 1, in ms) trained per application category
(``_train``, the only module that imports torch, imported on demand), the model file
(``_model_file``) and a predictor for serving that needs numpy, not torch
(``_predictor``). Models shipped with funcsion live in ``models/`` (``BUNDLED_MODELS``),
the datasets they were trained on in ``datasets/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataset import (COLUMNS, FEATURES, VERSION, Row, append_rows, categories, check_category, dataset_path,
                       dataset_version, load_rows, move_aside)
from ._measure import MIN_RUNS, Score, feature_ceiling, intervals, score, split_by_run
from ._model_file import Mlp, load_model, model_path, read_meta, save_model
from ._predictor import ModelPredictor, ModelStore
from .exceptions import DatasetError, LifetimeModelError, ModelFileError

if TYPE_CHECKING:
    from ._train import Outcome

__all__ = ["BUNDLED_DATASETS", "BUNDLED_MODELS", "COLUMNS", "DatasetError", "FEATURES", "LifetimeModelError", "MIN_RUNS", "Mlp",
           "ModelFileError", "ModelPredictor", "ModelStore", "Outcome", "Row", "Score", "append_rows",
           "VERSION", "categories", "check_category", "dataset_path", "dataset_version", "feature_ceiling", "intervals",
           "load_model", "load_rows", "model_path", "move_aside", "read_meta", "retrain", "save_model", "score",
           "split_by_run", "train"]

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
