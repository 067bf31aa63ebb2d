"""Default input of the feature pipeline: a synthetic regression data set drawn with numpy
from a fixed seed, ``samples`` (an ``.npy`` array of float64, one row a sample: ``COLUMNS``
inputs then the target). Its size follows the WDS parameters: every shard holds ``parts``
blocks of ``ROWS_PER_PART`` training rows plus one such block of held-out rows.

The target is a smooth nonlinear function of the inputs plus a little noise, so a linear
model on the raw columns scores poorly and one on random Fourier features scores well."""

from __future__ import annotations

import io
from typing import Any

__all__ = ["COLUMNS", "ROWS_PER_PART", "NOISE", "default_inputs", "samples", "target"]

#: inputs per sample (the target is one more column)
COLUMNS = 6
#: rows per features part (a shard has ``parts`` of them for training and one held out)
ROWS_PER_PART = 1024
#: standard deviation of the noise added to the target
NOISE = 0.05
SEED = 20240601


def target(x: Any) -> Any:
    """The function the pipeline learns: smooth, nonlinear in three of the inputs."""
    import numpy as np

    return np.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.25 * np.cos(2.0 * x[:, 3])


def samples(shards: int, parts: int, seed: int = SEED) -> Any:
    """``shards * (parts + 1) * ROWS_PER_PART`` rows of ``COLUMNS + 1`` float64 columns."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = shards * (parts + 1) * ROWS_PER_PART
    x = rng.standard_normal((rows, COLUMNS))
    y = target(x) + NOISE * rng.standard_normal(rows)
    return np.column_stack([x, y])


def default_inputs(params: dict[str, int]) -> dict[str, Any]:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, samples(int(params.get("shards", 8)), int(params.get("parts", 4))), allow_pickle=False)
    return {"samples": buf.getvalue()}
