"""Workflow descriptions (WDS): the FuncStore JSON format, fan-out templates,
and validation that reports every problem with its file, JSON path and fix.

Imports only the standard library: everything else in funcsion builds on it.
"""

from __future__ import annotations

from ._model import FunctionDoc, FunctionSpec, Stage, StageDoc, WDSDocument, Workflow
from ._parse import load, loads, validate
from .exceptions import FuncsionError, Issue, WDSError, WDSValidationError

__all__ = [
    "FuncsionError",
    "FunctionDoc",
    "FunctionSpec",
    "Issue",
    "Stage",
    "StageDoc",
    "WDSDocument",
    "WDSError",
    "WDSValidationError",
    "Workflow",
    "load",
    "loads",
    "validate",
]
