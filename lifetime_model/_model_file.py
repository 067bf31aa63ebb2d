"""The model file: an MLP's weights and its metadata in one ``.npz``, written and read
with numpy alone (torch trains, never serves).

``<dir>/<category>.npz`` holds ``w0..wL`` (``(in, out)`` matrices), ``b0..bL``,
``x_mean``/``x_std`` (feature normalization), ``y_mean``/``y_std`` (the output's: the
network predicts the standardized lifetime, ``y_mean + y_std * out`` is in ms) and
``meta``, a JSON string: ``format`` (``FORMAT``), ``format_version``, ``category``,
``features`` (its inputs, in order: the seven graph features, ``FEATURES``, and for a
model of format 3 the run's inputs after them, ``RUN_INPUTS``: log2 of the run's input
bytes, of its width (the widest stage's functions) and of its input bytes per function of
that stage), ``layers`` (sizes), ``activation``, ``output`` (``lifetime_ms``),
``model_version`` (1, 2, ... per category: each replacement adds one), ``trained_at``,
the data (``rows``, ``runs``, ``split``), ``accuracy`` and ``mae_ms`` on the test
runs, ``validation`` and ``torch`` (the version that trained it). Saving writes a
temporary file and renames it, so a server that reloads never reads half a model.

A model of format 2 takes the seven graph features and serves as before; one of format 3
also takes the run's inputs, and for a run whose input size is unknown (0: a driver that
did not say) the inputs that need it are given the training runs' mean, so it predicts
for a typical input.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._dataset import FEATURES, Row, check_category
from .exceptions import ModelFileError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FORMAT", "FORMAT_VERSION", "SIZE_INPUT", "RUN_INPUTS", "Mlp", "model_path", "save_model", "load_model",
           "read_meta", "run_inputs", "inputs_of"]

FORMAT = "funcsion-lifetime-mlp"
#: 2: the seven features of dataset format 2 (version 1 models took FuncStore's five: refused);
#: 3: those and the run's inputs (``RUN_INPUTS``). A model is saved with the lowest that fits.
FORMAT_VERSION = 3
#: The run's input size, first of a format-3 model's run inputs.
SIZE_INPUT = "log2_input_bytes"
#: A format-3 model's inputs after the graph features (``run_inputs``).
RUN_INPUTS = (SIZE_INPUT, "log2_width", "log2_bytes_per_function")
_INPUTS = (tuple(FEATURES), (*FEATURES, *RUN_INPUTS))


def run_inputs(input_bytes: int, width: int) -> tuple[float, float, float]:
    """A run's ``RUN_INPUTS``: log2 of its input bytes, of its width (its widest stage's
    functions) and of the input bytes per function of that stage; NaN where unknown (0)."""
    size = math.log2(input_bytes) if input_bytes > 0 else math.nan
    wide = math.log2(width) if width > 0 else math.nan
    return size, wide, size - wide


def inputs_of(rows: Sequence[Row], inputs: Sequence[str]) -> list[list[float]]:
    """The input vectors of ``rows`` for a model taking ``inputs`` (``FEATURES``, then
    ``RUN_INPUTS`` for format 3; unknown ones are NaN: ``Mlp.predict_ms`` puts the training
    mean in their place)."""
    with_run = SIZE_INPUT in inputs
    return [[*map(float, r.features), *(run_inputs(r.input_bytes, r.width) if with_run else ())] for r in rows]


@dataclass(frozen=True)
class Mlp:
    """A ReLU MLP over normalized features with a standardized output, evaluated with numpy."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    meta: dict[str, Any]

    @property
    def inputs(self) -> tuple[str, ...]:
        """What the network takes, in order (``FEATURES``, then ``SIZE_INPUT`` for format 3)."""
        return tuple(self.meta.get("features") or FEATURES)

    @property
    def takes_input_size(self) -> bool:
        """Whether it takes the run's inputs (``RUN_INPUTS``: format 3)."""
        return SIZE_INPUT in self.inputs

    def predict_rows(self, rows: Sequence[Row]) -> list[float]:
        """Lifetimes in ms of dataset rows (their features, and their run's input size when
        the model takes it)."""
        import numpy as np

        if not rows:
            return []
        return [float(v) for v in self.predict_ms(np.array(inputs_of(rows, self.inputs), dtype=np.float64))]

    def predict_ms(self, features: np.ndarray) -> np.ndarray:
        """Lifetimes in ms (>= 0) for an ``(n, len(self.inputs))`` array of inputs; a NaN
        (an unknown input size) takes the training mean of its column."""
        import numpy as np

        x = np.asarray(features, dtype=np.float64)
        if np.isnan(x).any():
            x = np.where(np.isnan(x), self.x_mean, x)
        h = (x - self.x_mean) / self.x_std
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = h @ w + b
            if i < last:
                np.maximum(h, 0.0, out=h)
        return np.maximum(h[:, 0] * self.y_std + self.y_mean, 0.0)  # type: ignore[no-any-return]

    @property
    def version(self) -> int:
        return int(self.meta.get("model_version", 0))


def model_path(directory: str | Path, category: str) -> Path:
    return Path(directory) / f"{check_category(category)}.npz"


def save_model(directory: str | Path, category: str, mlp: Mlp) -> Path:
    """Write ``mlp`` as the category's model (atomically); returns the path."""
    import numpy as np

    path = model_path(directory, category)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    arrays: dict[str, Any] = {f"w{i}": np.asarray(w, np.float64) for i, w in enumerate(mlp.weights)}
    arrays |= {f"b{i}": np.asarray(b, np.float64) for i, b in enumerate(mlp.biases)}
    meta = dict(mlp.meta, format=FORMAT, format_version=3 if mlp.takes_input_size else 2, category=category,
                features=list(mlp.inputs), output="lifetime_ms")
    arrays |= {"x_mean": np.asarray(mlp.x_mean, np.float64), "x_std": np.asarray(mlp.x_std, np.float64),
               "y_mean": np.float64(mlp.y_mean), "y_std": np.float64(mlp.y_std),
               "meta": np.array(json.dumps(meta, sort_keys=True))}
    fd, tmp = tempfile.mkstemp(prefix=f".{category}.", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.chmod(tmp, 0o644 if path.parent.stat().st_mode & 0o077 else 0o600)  # as private as its directory
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_model(path: str | Path) -> Mlp:
    """Read a model file; ``ModelFileError`` naming what is wrong."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            meta = json.loads(str(z["meta"]))
            n = sum(1 for f in files if f.startswith("w") and f[1:].isdigit())
            weights = tuple(np.asarray(z[f"w{i}"], np.float64) for i in range(n))
            biases = tuple(np.asarray(z[f"b{i}"], np.float64) for i in range(n))
            x_mean, x_std = np.asarray(z["x_mean"], np.float64), np.asarray(z["x_std"], np.float64)
            y_mean, y_std = float(z["y_mean"]), float(z["y_std"])
    except FileNotFoundError:
        raise ModelFileError(f"no model file {path}") from None
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path} is not a funcsion lifetime model ({type(exc).__name__}: {exc}); "
                             "train one with `funcsion train`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a {FORMAT} file (format {meta.get('format') if isinstance(meta, dict) else meta!r})")
    if int(meta.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelFileError(f"{path}: format version {meta.get('format_version')} is newer than this funcsion's "
                             f"{FORMAT_VERSION}: upgrade funcsion or retrain")
    inputs = tuple(meta.get("features", []))
    if int(meta.get("format_version", 0)) < 2 or inputs not in _INPUTS:
        raise ModelFileError(f"{path}: format version {meta.get('format_version')} takes the features "
                             f"{','.join(inputs)}, this funcsion's models take {','.join(FEATURES)} (and "
                             f"{','.join(RUN_INPUTS)}): retrain with `funcsion train` on a dataset recorded by this "
                             "version")
    k = len(inputs)
    if not n or weights[0].shape[0] != k or weights[-1].shape[1] != 1 or x_std.shape != (k,) or x_mean.shape != (k,):
        raise ModelFileError(f"{path}: the network must take its {k} inputs ({','.join(inputs)}) and give 1 output")
    for i in range(1, n):
        if weights[i].shape[0] != weights[i - 1].shape[1] or biases[i].shape != (weights[i].shape[1],):
            raise ModelFileError(f"{path}: layer {i} does not fit layer {i - 1}")
    return Mlp(weights, biases, x_mean, np.where(x_std > 0, x_std, 1.0), y_mean, y_std or 1.0, meta)


def read_meta(path: str | Path) -> dict[str, Any] | None:
    """A model file's metadata, or None when there is no readable model there."""
    try:
        return load_model(path).meta
    except ModelFileError:
        return None
