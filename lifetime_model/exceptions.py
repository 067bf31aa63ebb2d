"""Errors of ``lifetime_model``::

    FuncsionError
    └── LifetimeModelError      a dataset or a model file cannot be used
        ├── DatasetError        a dataset file is malformed, or too small to train on
        └── ModelFileError      a model file is not one ``save_model`` wrote
"""

from __future__ import annotations

from funcsion_errors import FuncsionError

__all__ = ["LifetimeModelError", "DatasetError", "ModelFileError"]


class LifetimeModelError(FuncsionError):
    """A lifetime dataset or model cannot be used."""


class DatasetError(LifetimeModelError):
    """A dataset file is malformed, or holds too little to train on."""


class ModelFileError(LifetimeModelError):
    """A model file is not one ``save_model`` wrote (or is from a newer version)."""
