"""Workflow descriptions (WDS): the FuncStore JSON format, fan-out templates,
validation that reports every problem with its file, JSON path and fix, the
limits that bound what one file may expand to, and the names a workflow
gives the outside world (Lambda names, object names as storage keys).

Imports only the standard library: everything else in funcsion builds on it.
"""

from __future__ import annotations

from ._lambda import MAX_LAYERS, LambdaSettings, layer_arn_region
from ._limits import Limits
from ._model import FunctionDoc, FunctionSpec, Stage, StageDoc, WDSDocument, Workflow
from ._names import CLEANUP_ENTRY, OBJECT_NAME_MAX, lambda_name, lambda_prefix, object_name_problem
from ._parse import load, loads, read_text, validate
from .exceptions import FuncsionError, Issue, WDSError, WDSValidationError

__all__ = [
    "CLEANUP_ENTRY",
    "FuncsionError",
    "FunctionDoc",
    "FunctionSpec",
    "Issue",
    "LambdaSettings",
    "Limits",
    "MAX_LAYERS",
    "OBJECT_NAME_MAX",
    "Stage",
    "StageDoc",
    "WDSDocument",
    "WDSError",
    "WDSValidationError",
    "Workflow",
    "lambda_name",
    "lambda_prefix",
    "layer_arn_region",
    "load",
    "loads",
    "object_name_problem",
    "read_text",
    "validate",
]
