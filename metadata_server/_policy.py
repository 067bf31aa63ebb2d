"""Release policies and the lifetime predictor. Pure classes, no clock of their own.

A run picks its policy by name when it starts, so one trace can be replayed
under each and the memory-time products compared:

- ``funcstore`` (default): free when the object's counter reaches zero at a
  commit (deferred commit); small objects grouped in block pools by predicted
  lifetime.
- ``pocket``: keep everything until the run ends (one pool, no prediction).
- ``jiffy:<lease_ms>``: free an object when ``lease_ms`` passed with no access
  to it (a put or a get renews the lease); one pool, no prediction.
- ``oracle``: free at the exact last declared read (the moment the last
  declared reader reads it, without waiting for a commit) and charge exact
  bytes, no block rounding: the lower bound the others are measured against.
  It is a measuring baseline: a reader retried after the object went is
  refused, as in any system without deferred commit.

The predictor turns an object's HDAG facts into a predicted lifetime in
seconds; ``HeuristicPredictor`` serves until ``lifetime_model`` supplies a
trained one behind the same ``LifetimePredictor`` protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from funcsion_rpc.errors import InvalidRequest
from hdag import ObjectInfo

__all__ = ["ReleasePolicy", "parse_policy", "LifetimePredictor", "HeuristicPredictor", "pool_key"]


@dataclass(frozen=True, slots=True)
class ReleasePolicy:
    name: str                      # "funcstore" | "pocket" | "jiffy" | "oracle"
    lease_s: float = 0.0

    @property
    def spec(self) -> str:
        return f"jiffy:{int(round(self.lease_s * 1000))}" if self.name == "jiffy" else self.name

    @property
    def frees_on_commit(self) -> bool:
        return self.name == "funcstore"

    @property
    def frees_on_last_read(self) -> bool:
        return self.name == "oracle"

    @property
    def has_lease(self) -> bool:
        return self.name == "jiffy"

    @property
    def lifetime_pools(self) -> bool:
        return self.name == "funcstore"

    @property
    def exact_bytes(self) -> bool:
        return self.name == "oracle"


def parse_policy(spec: str) -> ReleasePolicy:
    """``funcstore`` | ``pocket`` | ``oracle`` | ``jiffy:<lease_ms>``; "" means funcstore."""
    text = (spec or "funcstore").strip().lower()
    if text in ("funcstore", "pocket", "oracle"):
        return ReleasePolicy(text)
    name, sep, lease = text.partition(":")
    if name == "jiffy" and sep and lease.isdigit() and int(lease) > 0:
        return ReleasePolicy("jiffy", int(lease) / 1000.0)
    raise InvalidRequest(f"unknown release policy {spec!r}: use funcstore, pocket, oracle or jiffy:<lease_ms> "
                         "(e.g. jiffy:5000)")


class LifetimePredictor(Protocol):
    def predict(self, obj: ObjectInfo) -> float:
        """Predicted lifetime of the object in seconds, from its HDAG facts."""
        ...


@dataclass(frozen=True, slots=True)
class HeuristicPredictor:
    """Lifetime ~ how many stages until the last reader, stretched by the longest
    impact path and the fan-in of its readers (FuncStore's features, hand-weighted)."""

    stage_s: float = 1.0

    def predict(self, obj: ObjectInfo) -> float:
        f = obj.features
        if f is None:
            return 0.0
        return self.stage_s * (max(f.D_stage, 0) + 0.25 * f.M_path + 0.05 * f.N_functions)


def pool_key(lifetime_s: float) -> int:
    """Pool of a predicted lifetime: log2 buckets, so 1 s and 1.5 s share a pool
    and 1 s and 8 s do not."""
    return int(math.floor(math.log2(1.0 + max(lifetime_s, 0.0) * 4)))
