"""The heterogeneous DAG (HDAG) of a workflow: function and pipe nodes with
SendBoxes and RecvBoxes, read counts, last outputs, stages, transfer patterns
and lifetime features (FuncStore Sec. III-B1, III-C2), and pictures of it.
"""

from __future__ import annotations

from ._features import NAMES, Features, extract_features
from ._graph import HDAG, FunctionInfo, ObjectInfo, Pattern, PipeInfo, build
from ._render import render_png, to_dot

__all__ = [
    "Features",
    "NAMES",
    "FunctionInfo",
    "HDAG",
    "ObjectInfo",
    "Pattern",
    "PipeInfo",
    "build",
    "extract_features",
    "render_png",
    "to_dot",
]
