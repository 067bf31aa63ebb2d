"""Helpers for the example tests: load an example's modules by path, run ``funcsion run
--json`` as a user would, read a run's outputs from COS, and fail (never skip) when a
tool or package an example needs is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from storage_functions.cos import open_cos

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def require_tools(example: str, *tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"the {example} example needs {', '.join(missing)} on PATH (apt-get install gcc binutils); "
                    "CI has them: install them here too", pytrace=False)


def require_modules(example: str, *modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"the {example} example needs the Python package(s) {', '.join(missing)}: "
                    "pip install -e '.[examples]' (CI installs '.[all]')", pytrace=False)


def load(example: str, module: str) -> ModuleType:
    """``examples/<example>/<module>.py``, with the example's directory importable (as in
    its tasks)."""
    d = EXAMPLES / example
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
    name = f"example_{example}_{module}"
    spec = importlib.util.spec_from_file_location(name, d / f"{module}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def funcsion_run(wds_path: Path, state_dir: Path, *args: str, timeout: float = 280) -> dict[str, Any]:
    """``funcsion run WDS --json ...`` in a subprocess with its own stack in ``state_dir``:
    the report (the last line of stdout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env = {k: v for k, v in env.items() if not k.startswith("FUNCSION_")}
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(wds_path), "--json", "--state-dir",
                           str(state_dir), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no report (exit {proc.returncode}): {proc.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert proc.returncode == (0 if report["status"] == "succeeded" else 1), proc.stderr[-3000:]
    return report


def output(cos_url: str, report: dict[str, Any], name: str) -> bytes:
    """The bytes of a workflow output the run saved to COS."""
    cos = open_cos(cos_url)
    try:
        return bytes(cos.get(f"outputs/{report['run_id']}/{name}"))
    finally:
        cos.close()


def check_freed(report: dict[str, Any]) -> None:
    """Nothing leaked, and every object the run wrote was freed at a known time: the
    intermediates by their last reader's commit, the outputs (kept in COS) at the end."""
    assert report["memory"]["leaked_bytes"] == 0
    for name, obj in report["objects"].items():
        assert obj["freed_at"] is not None and obj["freed_at"] >= obj["written_at"], (name, obj)
        if obj["declared_reads"]:
            assert obj["state"] == "freed" and obj["freed_reason"] == "committed", (name, obj)
            assert len(obj["reads"]) == obj["declared_reads"], (name, obj)
        else:
            assert obj["state"] == "kept", (name, obj)
