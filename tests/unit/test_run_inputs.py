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


def test_an_input_that_is_not_its_declared_encoding_is_refused_with_the_offset(tmp_path: Path) -> None:
    """The word-count example's raw_text must be UTF-8: a Latin-1 file is refused before the
    run (it used to fail three attempts with 'TypeError: sequence item 0: expected str
    instance, bytes found'), naming the file, the byte and its offset."""
    from tests.conftest import EXAMPLES

    latin = tmp_path / "latin.txt"
    latin.write_bytes("hello world\ncafé au lait\n".encode("latin-1"))
    wds_path = EXAMPLES / "wordcount" / "wordcount.wds.json"
    with pytest.raises(InputError) as info:
        prepare_run(wds_path, inputs={"raw_text": str(latin)})
    msg = str(info.value)
    assert msg.startswith(f"--input raw_text={latin}: not utf-8 text: byte 0xe9 at offset 15 (line 2): ")
    assert "INPUT_ENCODINGS" in msg and "iconv -f latin1 -t utf-8" in msg
    good = tmp_path / "good.txt"
    good.write_text("café au lait\n", encoding="utf-8")
    assert prepare_run(wds_path, inputs={"raw_text": str(good)}).values == {"raw_text": "café au lait\n"}


def test_input_encodings_are_read_without_running_inputs_py(tmp_path: Path) -> None:
    path = example(tmp_path, "import no_such_module_here\nINPUT_ENCODINGS: dict = {'data': 'utf-16'}\n")
    data = tmp_path / "data.bin"
    data.write_bytes("x".encode("utf-16"))
    assert prepare_run(path, inputs={"data": str(data)}).values == {"data": "x"}
    data.write_bytes(b"\xff\xfe\x00\xd8")  # a lone surrogate
    with pytest.raises(InputError, match=r"not utf-16 text: byte 0x00 at offset 2 \(line 1\)"):
        prepare_run(path, inputs={"data": str(data)})
    undeclared = example(tmp_path, "INPUT_ENCODINGS = {}\n")
    data.write_bytes(b"\xff\x00")
    assert prepare_run(undeclared, inputs={"data": str(data)}).values == {"data": b"\xff\x00"}  # bytes, as before


def test_input_encodings_that_are_not_a_literal_are_refused(tmp_path: Path) -> None:
    path = example(tmp_path, "ENC = 'utf-8'\nINPUT_ENCODINGS = {'data': ENC}\n")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(InputError, match=r"inputs\.py, line 2: INPUT_ENCODINGS must be a literal dict"):
        prepare_run(path, inputs={"data": str(tmp_path / "d.txt")})
    path = example(tmp_path, "INPUT_ENCODINGS = {'data': 'no-such-codec'}\n")
    with pytest.raises(InputError, match="INPUT_ENCODINGS must be"):
        prepare_run(path, inputs={"data": str(tmp_path / "d.txt")})
