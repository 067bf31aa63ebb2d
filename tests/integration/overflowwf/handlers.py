"""Writes a 3 MB object (one block per function of a 10+2 group) and a 20 MB one (two
blocks per function), then checks both come back whole."""

import hashlib

import sdk


def _bytes(seed: bytes, n: int) -> bytes:
    block = hashlib.sha256(seed).digest() * 32           # 1 KiB
    return (block * (n // len(block) + 1))[:n]


@sdk.task
def make(event, context):
    seed = sdk.get("seed")
    seed = seed.encode() if isinstance(seed, str) else bytes(seed)
    sdk.put("fits", _bytes(seed + b"a", 3_000_000))
    sdk.put("too_big", _bytes(seed + b"b", 20_000_000))
    return {}


@sdk.task
def check(event, context):
    fits, big = sdk.get("fits"), sdk.get("too_big")
    sdk.put("result", {"fits": [len(fits), hashlib.sha256(fits).hexdigest()],
                       "too_big": [len(big), hashlib.sha256(big).hexdigest()]})
    return {}
