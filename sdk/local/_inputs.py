"""What a run needs before any stack or run exists, checked up front so bad input is
refused at once (exit 2) and never leaves a half-started run: the WDS, the
``--crash`` targets, and the input files (regular files only: a FIFO would
block, ``/dev/zero`` would never end) with ``default_inputs()`` (or
``default_inputs(params)``) of an ``inputs.py`` beside the WDS for the rest.

An input file is passed as text when it is UTF-8, else as bytes; an ``inputs.py``
can say which inputs must be text, in a literal ``INPUT_ENCODINGS = {"raw_text":
"utf-8"}``, and a file that is not is refused before the run with the byte offset
of the first bad byte (read from the file's source, not run: an example's inputs.py
may import what a run given every --input does not need).

``input_bytes`` is the run's input size, which the driver passes to ``start_run`` (the
lifetime model's input-size feature).
"""

from __future__ import annotations

import ast
import codecs
import importlib.util
import inspect
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hdag
import wds

from ..exceptions import TaskError
from ._executor import ExecutorOptions, check_crash_targets

__all__ = ["InputError", "PreparedRun", "prepare_run", "default_inputs", "input_encodings", "input_bytes"]


class InputError(TaskError):
    """A workflow input is missing or cannot be read."""


@dataclass(frozen=True)
class PreparedRun:
    """A workflow with its inputs read, ready to run."""

    path: Path
    graph: hdag.HDAG
    values: dict[str, Any]
    params: dict[str, int] = field(default_factory=dict)
    text: str = ""  # the WDS as read and validated: what the run registers

    @property
    def input_bytes(self) -> int:
        """The bytes of the run's inputs (``input_bytes``)."""
        return input_bytes(self.values)


def input_bytes(values: Mapping[str, Any]) -> int:
    """The bytes of a run's inputs as their PUTs encode them: bytes as they are, text as UTF-8,
    a file-like value as its bytes from where it stands to its end, anything else in the codec
    ``put`` picks for it (JSON). What ``start_run(input_bytes=...)`` carries."""
    from .._codecs import encode
    from .._values import is_file_like

    total = 0
    for v in values.values():
        if isinstance(v, (bytes, bytearray, memoryview)):
            total += memoryview(v).nbytes
        elif isinstance(v, str):
            total += len(v.encode("utf-8"))
        elif is_file_like(v):
            try:
                here = v.tell()
                total += max(v.seek(0, os.SEEK_END) - here, 0)
                v.seek(here)
            except (OSError, AttributeError, ValueError):   # a pipe: its size is not known before it is read
                continue
        else:
            total += len(encode(v)[0])
    return total


def prepare_run(wds_path: str | Path, *, inputs: Mapping[str, str] | None = None,
                params: Mapping[str, int] | None = None, options: ExecutorOptions | None = None,
                limits: wds.Limits | None = None) -> PreparedRun:
    """Load and check everything a run needs (the WDS within ``limits``); raises a
    ``FuncsionError`` naming what is wrong."""
    path = Path(wds_path)
    limits = limits or wds.Limits()
    text = wds.read_text(path, limits)  # read once: what is validated is what is registered
    graph = hdag.build(wds.loads(text, source=str(path), params=params, limits=limits))
    if options is not None:
        check_crash_targets(graph, options.crash)
    return PreparedRun(path, graph, _load_inputs(graph, path, inputs or {}), dict(params or {}), text)


def default_inputs(wds_path: Path, params: Mapping[str, int] | None = None) -> dict[str, Any]:
    """``default_inputs()`` of the ``inputs.py`` module next to the WDS file, if there is one.
    A ``default_inputs(params)`` that takes an argument gets the workflow's parameters (the
    WDS defaults with ``--param`` over them), so the inputs can grow with the fan-out."""
    mod_path = wds_path.parent / "inputs.py"
    if not mod_path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"funcsion_inputs_{abs(hash(mod_path))}", mod_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        fn = getattr(mod, "default_inputs", None)
        if not callable(fn):
            return {}
        if inspect.signature(fn).parameters:
            return dict(fn(dict(params or {})))
        return dict(fn())
    except Exception as exc:  # the example's own code: say where it failed, no traceback
        raise InputError(f"{mod_path}: default_inputs() failed: {type(exc).__name__}: {exc}; fix it, or give "
                         "every input with --input NAME=PATH") from exc


def input_encodings(wds_path: Path) -> dict[str, str]:
    """``INPUT_ENCODINGS`` of the ``inputs.py`` beside the WDS (input name -> text encoding),
    read from its source as a literal; ``{}`` without one. A value that is not a literal
    dict of names to known codecs is an ``InputError``."""
    mod_path = wds_path.parent / "inputs.py"
    try:
        tree = ast.parse(mod_path.read_bytes(), str(mod_path))
    except (OSError, SyntaxError, ValueError):
        return {}  # no inputs.py, or one default_inputs() will report on if it is needed
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, expr = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, expr = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == "INPUT_ENCODINGS"):
            continue
        try:
            value = ast.literal_eval(expr)
            if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                for enc in value.values():
                    codecs.lookup(enc)
                return dict(value)
        except (ValueError, TypeError, SyntaxError, LookupError):
            pass
        raise InputError(f"{mod_path}, line {node.lineno}: INPUT_ENCODINGS must be a literal dict of input name to "
                         'a Python codec name, e.g. INPUT_ENCODINGS = {"raw_text": "utf-8"}')
    return {}


def _decode(name: str, path: str, data: bytes, encoding: str, mod_path: Path) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"--input {name}={path}: not {encoding} text: byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start:,} (line {line}): {exc.reason}; the workflow reads {name!r} as {encoding} text "
                         f"(INPUT_ENCODINGS in {mod_path}): convert the file first, e.g. from Latin-1 with "
                         f"iconv -f latin1 -t {encoding} {path} > {Path(path).stem}.{encoding}.txt") from None


def _read_input(name: str, path: str) -> bytes:
    """The bytes of a regular file; a FIFO, device or directory is refused (a FIFO would block
    until a writer came, ``/dev/zero`` would never end)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"--input {name}={path}: cannot read the file: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"--input {name}={path}: not a regular file (a {_kind(mode)}); give the path "
                         "of a file, e.g. copy the stream to one first")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise InputError(f"--input {name}={path}: cannot read the file: {exc.strerror or exc}") from None


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return what
    return "special file"


def _load_inputs(h: hdag.HDAG, wds_path: Path, given: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(h.inputs))
    if unknown:
        raise InputError(f"--input names {', '.join(map(repr, unknown))}, which the workflow does not read "
                         f"as input; its inputs are {', '.join(h.inputs) or 'none'}")
    values: dict[str, Any] = {}
    encodings = input_encodings(wds_path) if given else {}
    for name, path in given.items():
        data = _read_input(name, path)
        if name in encodings:
            values[name] = _decode(name, path, data, encodings[name], wds_path.parent / "inputs.py")
            continue
        try:
            values[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            values[name] = data
    missing = [n for n in h.inputs if n not in values]
    if missing:
        defaults = default_inputs(wds_path, h.workflow.params)
        for n in missing:
            if n in defaults:
                values[n] = defaults[n]
    missing = [n for n in h.inputs if n not in values]
    if missing:
        raise InputError(f"no value for workflow input(s) {', '.join(map(repr, missing))}; pass "
                         f"--input NAME=PATH for each (or give inputs.py a default_inputs())")
    return values
