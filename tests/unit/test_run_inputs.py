"""Default inputs from ``inputs.py`` beside a WDS: ``default_inputs(params)`` gets the
workflow's parameters (defaults with ``--param`` over them), ``default_inputs()`` nothing,
and an ``inputs.py`` that fails is a one-line ``InputError``, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk.local._inputs import InputError, prepare_run

WDS = {"app": "gen", "workflow_id": 1, "category": "test", "params": {"parts": 2, "size": 3},
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "f", "input": ["data"], "output": ["out"], "next": []}]}}}


def example(tmp_path: Path, inputs_py: str) -> Path:
    wds_path = tmp_path / "gen.wds.json"
    wds_path.write_text(json.dumps(WDS))
    (tmp_path / "inputs.py").write_text(inputs_py)
    return wds_path


def test_default_inputs_get_the_workflow_parameters(tmp_path: Path) -> None:
    path = example(tmp_path, "def default_inputs(params):\n    return {'data': 'x' * params['size'] * params['parts']}\n")
    assert prepare_run(path).values == {"data": "x" * 6}
    assert prepare_run(path, params={"size": 5}).values == {"data": "x" * 10}


def test_default_inputs_without_an_argument_still_work(tmp_path: Path) -> None:
    path = example(tmp_path, "def default_inputs():\n    return {'data': b'raw'}\n")
    assert prepare_run(path, params={"size": 5}).values == {"data": b"raw"}


def test_a_failing_inputs_py_is_a_clear_input_error(tmp_path: Path) -> None:
    path = example(tmp_path, "import no_such_module_here\n")
    with pytest.raises(InputError, match=r"inputs\.py: default_inputs\(\) failed: ModuleNotFoundError: .*"
                                         r"no_such_module_here.*--input NAME=PATH"):
        prepare_run(path)
