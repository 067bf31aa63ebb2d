"""The reference ``@sdk.offload`` leaves in a Step Functions state in place of a large value.

A reference is a JSON object with one reserved key::

    {"$funcsion": {"run": "r-7", "key": "Produce", "part": 0, "bytes": 5242880, "codec": "bytes",
                   "state": "Produce", "token": "9f2c...", "see": "<doc>"}}

``run`` is the funcsion run of the execution (the execution's name), ``key`` the object
holding the value, ``part`` its place in that object when one result offloaded several
values (absent: the object is the value), ``items`` (only in a chunk of a Map's items,
``sdk.offload_items``) the first item's index and the chunk's item count, ``bytes`` and
``codec`` what it holds, ``state``
the Task state that wrote it, ``see`` where a reader that is not decorated learns what
to do. ``token`` is an HMAC of (run, key, part) under the run's token: only a task of
that run can make or check one, so a forged reference, or one copied from another
execution, is refused (``ReferenceRefused``).

Pure: the shape, the token, the walk that finds references in a value and the one that
cuts large values out of a result. Not here: storing and reading (``sdk._offload``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import ReferenceRefused

__all__ = ["REF_KEY", "SEE", "Reference", "find", "json_size", "replace", "sign", "split"]

#: The reserved key of a reference; a result may not use it for anything else.
REF_KEY = "$funcsion"
#: What a handler that is not decorated, and finds a reference in its input, should read.
SEE = ("a large value offloaded by funcsion: decorate the handler that reads it with @sdk.offload and pass "
       "\"funcsion.$\": \"$$\" in its Payload (see examples/offload/README.md)")


def sign(run_token: str, run: str, key: str, part: int | None) -> str:
    """The reference token: an HMAC of the run, key and part under the run's token."""
    msg = f"{run}\0{key}\0{'' if part is None else part}".encode()
    return hmac.new(run_token.encode(), msg, hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Reference:
    """One reference, as found in (or put into) a state."""

    run: str
    key: str
    part: int | None
    bytes: int
    codec: str
    state: str
    token: str
    items: tuple[int, int] | None = None  # a chunk of Map items: (first item's index, item count)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"run": self.run, "key": self.key}
        if self.part is not None:
            body["part"] = self.part
        if self.items is not None:
            body["items"] = list(self.items)
        body.update({"bytes": self.bytes, "codec": self.codec, "state": self.state, "token": self.token,
                     "see": SEE})
        return {REF_KEY: body}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> Reference:
        """The reference in ``doc`` (``{"$funcsion": {...}}``); ``ReferenceRefused`` naming
        ``where`` (its JSON path in the input) when it is not one."""
        body = doc.get(REF_KEY)
        if not isinstance(body, Mapping) or len(doc) != 1:
            raise ReferenceRefused(f"the value at {where} uses the reserved key {REF_KEY!r} but is not a funcsion "
                                   "reference (one key, an object); rename the key")
        try:
            part, items = body.get("part"), body.get("items")
            return cls(str(body["run"]), str(body["key"]), None if part is None else int(part),
                       int(body["bytes"]), str(body["codec"]), str(body.get("state") or body["key"]),
                       str(body["token"]), None if items is None else (int(items[0]), int(items[1])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReferenceRefused(f"the funcsion reference at {where} is malformed ({type(exc).__name__}: {exc}); "
                                   "pass references on exactly as @sdk.offload wrote them") from None

    def check(self, run: str, run_token: str, where: str) -> None:
        """Refuse a reference of another run, or one whose token this run did not sign."""
        if self.run != run:
            raise ReferenceRefused(f"the funcsion reference at {where} belongs to run {self.run!r}, not to this "
                                   f"execution's run {run!r}; references are valid only in the execution that "
                                   "made them")
        if not hmac.compare_digest(self.token, sign(run_token, self.run, self.key, self.part)):
            raise ReferenceRefused(f"the funcsion reference at {where} (key {self.key!r} of run {run}) has a token "
                                   "this run did not sign: it was forged or altered; pass references on unchanged")


def json_size(value: Any) -> int:
    """Bytes of ``value`` in a state: its compact JSON (bytes and other values JSON cannot
    hold count as their length, or as too large: they must be offloaded whatever their size)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    try:
        return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return 1 << 62


def _fits(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _is_ref(v: Any) -> bool:
    return isinstance(v, Mapping) and len(v) == 1 and isinstance(v.get(REF_KEY), Mapping)


def _is_ref_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_ref(x) for x in v)


def _holds_ref_list(v: Any) -> bool:
    if _is_ref_list(v):
        return True
    if isinstance(v, Mapping) and REF_KEY not in v:
        return any(_holds_ref_list(x) for x in v.values())
    return isinstance(v, list) and any(_holds_ref_list(x) for x in v)


def split(result: Any, threshold: int) -> tuple[Any, list[tuple[str, Any]]]:
    """Cut the values that do not fit out of ``result``: returns the result with a
    placeholder ``{"$funcsion": i}`` where the i-th cut value was, and the cut values with
    their JSON paths. The finest cut wins: a dict or list larger than ``threshold`` has
    its large members cut first, and is cut whole only if it is still larger (or holds a
    value JSON cannot carry, such as ``bytes``). A list of references (a Map's chunks,
    ``sdk.offload_items``) stays in the state, and so does whatever holds one: cut whole,
    the Map would find a reference where it needs a list."""
    cut: list[tuple[str, Any]] = []

    def walk(v: Any, path: str) -> Any:
        if _is_ref_list(v):
            return v
        small = json_size(v) <= threshold and _fits(v)
        if small:
            return v
        if isinstance(v, Mapping) and REF_KEY not in v:
            mark = len(cut)
            inner = {k: walk(x, f"{path}.{k}") for k, x in v.items()}
            if (json_size(inner) <= threshold and _fits(inner)) or _holds_ref_list(inner):
                return inner
            del cut[mark:]
        elif isinstance(v, list):
            mark = len(cut)
            items = [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
            if (json_size(items) <= threshold and _fits(items)) or _holds_ref_list(items):
                return items
            del cut[mark:]
        cut.append((path, v))
        return {REF_KEY: len(cut) - 1}

    return walk(result, "$"), cut


def replace(value: Any, fn: Callable[[Mapping[str, Any], str], Any], path: str = "$") -> Any:
    """``value`` with every ``{"$funcsion": ...}`` object replaced by ``fn(obj, json_path)``
    (nested in dicts and lists too)."""
    if isinstance(value, Mapping):
        if REF_KEY in value:
            return fn(value, path)
        return {k: replace(v, fn, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [replace(v, fn, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def find(value: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Every reference-shaped object in ``value`` with its JSON path, in document order."""
    out: list[tuple[str, Mapping[str, Any]]] = []

    def keep(obj: Mapping[str, Any], path: str) -> Any:
        out.append((path, obj))
        return obj

    replace(value, keep)
    return out
