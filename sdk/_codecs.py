"""Codecs: how ``sdk.put`` turns a value into bytes and ``sdk.get`` back.

``bytes`` values travel as they are and ``str`` as UTF-8; anything else goes
through a codec chosen per call: ``json`` (default for other values),
``msgpack`` (compact, safe), or ``pickle`` (only when asked for: unpickling
runs code). The codec name is stored with the object, so a reader need not
know what the writer chose.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from typing import Any

import msgpack

from funcsion_errors import FuncsionError

__all__ = ["CodecError", "encode", "decode", "CODECS"]


class CodecError(FuncsionError):
    """A value could not be encoded or decoded (the same value fails again: not retryable)."""

    retryable = False


def _json_dumps(v: Any) -> bytes:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "bytes": (bytes, bytes),
    "str": (lambda v: v.encode("utf-8"), lambda b: bytes(b).decode("utf-8")),
    "json": (_json_dumps, lambda b: json.loads(bytes(b))),
    "msgpack": (lambda v: msgpack.packb(v, use_bin_type=True),
                lambda b: msgpack.unpackb(bytes(b), raw=False, strict_map_key=False)),
    "pickle": (lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL), lambda b: pickle.loads(bytes(b))),
}


def encode(value: Any, codec: str | None = None) -> tuple[bytes, str]:
    """Return (payload, codec name). ``codec=None`` picks bytes/str/json by type."""
    if codec is None:
        codec = "bytes" if isinstance(value, (bytes, bytearray, memoryview)) else \
            "str" if isinstance(value, str) else "json"
    try:
        enc, _ = CODECS[codec]
    except KeyError:
        raise CodecError(f"unknown codec {codec!r}; use one of {', '.join(CODECS)}") from None
    if codec == "str" and not isinstance(value, str):
        raise CodecError(f"codec 'str' needs a str value, not {type(value).__name__}")
    try:
        return enc(value), codec
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode a {type(value).__name__} with codec {codec!r}: {exc}"
                         f"{_encode_hint(value, codec)}") from None


def _encode_hint(value: Any, codec: str) -> str:
    """What would encode ``value``: msgpack only when it can (it cannot take a set either), a
    conversion for sets, and pickle for arbitrary objects."""
    if codec in ("bytes", "str", "pickle"):
        return ""
    tips = []
    if _holds_a_set(value):
        tips.append("convert sets to lists first, e.g. sorted(s)")
    if codec != "msgpack":
        try:
            CODECS["msgpack"][0](value)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            tips.append("use codec='msgpack'")
    tips.append("use codec='pickle' for arbitrary Python objects")
    return f" ({', or '.join(tips)})"


def _holds_a_set(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (set, frozenset)):
        return True
    if depth > 20:
        return False
    if isinstance(value, dict):
        return any(_holds_a_set(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_a_set(v, depth + 1) for v in value)
    return False


def decode(payload: bytes | memoryview, codec: str) -> Any:
    try:
        _, dec = CODECS[codec]
    except KeyError:
        raise CodecError(f"object was stored with unknown codec {codec!r}") from None
    try:
        return dec(bytes(payload) if isinstance(payload, memoryview) else payload)
    except Exception as exc:  # noqa: BLE001 - every codec failure becomes one clear error
        raise CodecError(f"cannot decode {len(payload)} bytes with codec {codec!r}: {exc}") from None
