"""Default input of the gg-style compile example: ``source_tree``, a tar of the C
project ``cproject.py`` generates for the workflow's ``units`` and ``funcs`` parameters
(the same parameters give the same bytes)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def cproject() -> ModuleType:
    """``cproject.py`` beside this file (loaded by path: the driver that reads these
    inputs does not have the example's directory on its import path)."""
    path = Path(__file__).with_name("cproject.py")
    spec = importlib.util.spec_from_file_location("gg_compile_cproject", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def default_inputs(params: dict[str, int]) -> dict[str, Any]:
    cp = cproject()
    units, funcs = int(params.get("units", 8)), int(params.get("funcs", 12))
    return {"source_tree": cp.tar_bytes(cp.files(units, funcs))}
