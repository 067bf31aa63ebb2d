"""Per-entry Lambda settings of a WDS function entry: ``memory_mb``,
``timeout_s``, ``max_attempts`` and ``layers``, each optional, checked here
with the same issues (JSON path, message, fix) as every other field.

Covers the shape and range of each value and the shape of a layer version
ARN (``layer_arn_region`` reads its region). Not here: whether a layer is in
the deploy's region (``sdk.deploy`` checks that at deploy, where the region
is known), or what the settings default to (the deploy's and the local
executor's defaults apply to an entry that sets none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._check import Checker, key_path, type_name
from ._model import LambdaSettings  # the model's type; this module checks and builds it

__all__ = ["LAMBDA_KEYS", "LAYER_ARN", "LambdaSettings", "MAX_LAYERS", "check_lambda_settings", "layer_arn_region"]

#: The keys of a function entry this module checks.
LAMBDA_KEYS = frozenset({"memory_mb", "timeout_s", "max_attempts", "layers"})
#: Lambda's own limits: memory in MB, timeout in seconds; attempts count the first try.
_RANGES: dict[str, tuple[int, int, str, int]] = {  # key: (low, high, what, an example)
    "memory_mb": (128, 10240, "megabytes of memory, as Lambda allows", 1024),
    "timeout_s": (1, 900, "seconds, as Lambda allows", 300),
    "max_attempts": (1, 10, "tries of the task, the first included", 3),
}
#: Lambda allows five layers per function.
MAX_LAYERS = 5
#: A Lambda layer *version* ARN (``arn:aws:lambda:<region>:<account>:layer:<name>:<version>``).
LAYER_ARN = re.compile(r"^arn:aws[a-zA-Z-]*:lambda:([a-z]{2}(?:-[a-z]+)+-\d+):\d{12}:layer:[A-Za-z0-9_-]{1,140}:\d+$")
_LAYER_EXAMPLE = "arn:aws:lambda:us-east-1:123456789012:layer:funcsion-deps:3"


def layer_arn_region(arn: str) -> str | None:
    """The region of a layer version ARN, or ``None`` when ``arn`` is not one."""
    m = LAYER_ARN.match(arn)
    return m.group(1) if m else None


def check_lambda_settings(chk: Checker, fdoc: Mapping[str, Any], fpath: str) -> LambdaSettings:
    """The entry's settings; every bad value is an issue (and left out of the result)."""
    ints: dict[str, int | None] = {}
    for key, (lo, hi, what, example) in _RANGES.items():
        ints[key] = None
        if key not in fdoc:
            continue
        value, path = fdoc[key], key_path(fpath, key)
        if isinstance(value, bool) or not isinstance(value, int):
            chk.add(path, f"{key!r} must be a whole number of {what}, not {type_name(value)} {value!r}",
                    f'write e.g. "{key}": {example}')
        elif not lo <= value <= hi:
            chk.add(path, f"{key!r} is {value}; it must be between {lo} and {hi} ({what})",
                    f'write a value in [{lo}, {hi}], or remove "{key}" for the deploy\'s default')
        else:
            ints[key] = value
    return LambdaSettings(ints["memory_mb"], ints["timeout_s"], ints["max_attempts"], _layers(chk, fdoc, fpath))


def _layers(chk: Checker, fdoc: Mapping[str, Any], fpath: str) -> tuple[str, ...]:
    if "layers" not in fdoc:
        return ()
    value, path = fdoc["layers"], key_path(fpath, "layers")
    if not isinstance(value, list):
        chk.add(path, f"'layers' must be an array of Lambda layer version ARNs, not {type_name(value)}",
                f'write e.g. "layers": ["{_LAYER_EXAMPLE}"]')
        return ()
    good: list[str] = []
    for k, arn in enumerate(value):
        if not isinstance(arn, str) or layer_arn_region(arn) is None:
            shown = repr(arn) if isinstance(arn, str) else f"{type_name(arn)} {arn!r}"
            chk.add(f"{path}[{k}]", f"{shown} is not a Lambda layer version ARN",
                    f"write arn:aws:lambda:<region>:<account>:layer:<name>:<version>, e.g. {_LAYER_EXAMPLE}")
        elif arn in good:
            chk.add(f"{path}[{k}]", f"layer {arn!r} is listed twice", "list each layer once")
        else:
            good.append(arn)
    if len(value) > MAX_LAYERS:
        chk.add(path, f"'layers' lists {len(value)} layers; Lambda allows {MAX_LAYERS} per function",
                "merge layers, or move packages into the task zip's directory")
    return tuple(good)
