"""Names a workflow gives to the outside world: Lambda function names of its
entries and the object names that become storage keys.

- ``lambda_name(app, entry)``: the one mapping from a WDS entry to the Lambda
  (local or AWS) that runs its handler: ``<app>-<entry without templates>``,
  every character outside ``[A-Za-z0-9_-]`` replaced by ``-``, cut at 64. It
  is not injective (``gen.a`` and ``gen-a`` both give ``<app>-gen-a``), so
  validation rejects entries whose names meet (``lambda_clashes``).
- ``object_name_problem(name)``: why an object name is not a safe storage key
  segment (S3 key segment and local file name alike), or ``None``.

Pure string work; ``sdk.deploy`` and ``sdk.local`` import the mapping from here
so that what validation checks is what deployment does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["CLEANUP_ENTRY", "LAMBDA_NAME_MAX", "OBJECT_NAME_MAX", "all_safe_object_names", "lambda_clashes",
           "lambda_name", "lambda_prefix", "object_name_problem"]

#: Longest Lambda function name AWS accepts.
LAMBDA_NAME_MAX = 64
#: Longest object name: a local COS file is ``<name>%obj`` and file names stop at 255 bytes.
OBJECT_NAME_MAX = 200
#: The entry of the cleanup task every deployed workflow gets (``sdk._cleanup``); no WDS entry may map onto it.
CLEANUP_ENTRY = "funcsion-cleanup"

_TEMPLATE = re.compile(r"\{[^}]*\}")
_UNSAFE_LAMBDA = re.compile(r"[^A-Za-z0-9_-]")
_OBJECT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_BAD_OBJECT_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_ONE = rf"[A-Za-z0-9_-][A-Za-z0-9._-]{{0,{OBJECT_NAME_MAX - 1}}}"
_MANY = re.compile(rf"{_ONE}(?:\n{_ONE})*")


def lambda_name(app: str, entry: str) -> str:
    """A Lambda function name for a WDS entry: ``<app>-<entry without templates>``, at most 64 chars."""
    base = _TEMPLATE.sub("", entry).strip("_-") or "task"
    return _UNSAFE_LAMBDA.sub("-", f"{app}-{base}")[:LAMBDA_NAME_MAX]


def lambda_prefix(app: str) -> str:
    """What every Lambda name of ``app`` starts with (for globs such as fault injection's)."""
    return lambda_name(app, "x")[:-1]


def lambda_clashes(app: str, entries: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(earlier entry, later entry, Lambda name)`` for every entry whose Lambda name an
    earlier one (or the cleanup task) already has; each later entry is reported once."""
    owner: dict[str, str] = {lambda_name(app, CLEANUP_ENTRY): CLEANUP_ENTRY}
    out: list[tuple[str, str, str]] = []
    for entry in dict.fromkeys(entries):
        name = lambda_name(app, entry)
        if name in owner:
            out.append((owner[name], entry, name))
        else:
            owner[name] = entry
    return out


def all_safe_object_names(names: list[str]) -> bool:
    """``object_name_problem(n) is None`` for every name, in one regex pass over them all."""
    if not names:
        return True
    joined = "\n".join(names)
    return joined.count("\n") == len(names) - 1 and ".." not in joined and _MANY.fullmatch(joined) is not None


def object_name_problem(name: str) -> str | None:
    """What keeps ``name`` from being an object name, or ``None`` when it is a safe one:
    letters, digits, ``.``, ``_`` and ``-``, not starting with ``.``, no ``..``, at most
    ``OBJECT_NAME_MAX`` characters."""
    if not name:
        return "is empty"
    if len(name) > OBJECT_NAME_MAX:
        return f"is {len(name)} characters long, over the {OBJECT_NAME_MAX} an object name may have"
    if _OBJECT.fullmatch(name) and ".." not in name:
        return None
    bad = _BAD_OBJECT_CHAR.search(name)
    if bad:
        return f"contains {bad.group()!r}"
    if name.startswith("."):
        return "starts with '.'"
    return "contains '..'"
