"""Release policies and the lifetime predictor. Pure classes, no clock of their own.

A run picks its policy by name when it starts, so one trace can be replayed
under each and the memory-time products compared:

- ``funcstore`` (default): free when the object's counter reaches zero at a
  commit (deferred commit); small objects grouped in block pools by predicted
  lifetime (log2 buckets, ``pool_key``). ``funcstore:expiry[:<window_ms>]``
  groups by predicted expiry instead, the put's time plus its predicted lifetime,
  in windows of ``window_ms`` (default 250) since the run started, so objects
  that die together share blocks whatever their lifetimes (``group_key``);
  ``funcstore:nogroup`` puts every slice of a run in one pool (the baseline the
  grouping is measured against). An object's *function memory* goes at its last
  declared read (the read that makes every declared reader have read it; a retried
  reader's read counts once), while the object itself (its read counter, its durable
  copy in the daemon's persistent buffer or COS) lives until the last reader commits:
  a reader re-run after its read reads the durable copy, so deferred commit's
  guarantee holds and memory is held no longer than the reads need
  (``releases_at_read``). ``:commit`` after any funcstore spec (``funcstore:commit``,
  ``funcstore:nogroup:commit``) keeps the memory until the commit, as FuncStore's
  paper does (the baseline the release is measured against).
- ``pocket``: keep everything until the run ends, one object per block (a
  ``Solo`` pool key: FuncStore Sec. V-A, "a block can store only one data
  object"), no prediction. Pocket reserves the job's peak for the whole job
  (Sec. V-C, Fig. 12a): the server allocates at write like the others, so the
  physical peak is measured, and the utilization study charges that peak from
  the run's start to its end (``sdk.local._study.reserved_mb_s``).
- ``jiffy:<lease_ms>``: allocate at write, free an object when ``lease_ms``
  passed with no access to it (a put or a get renews the lease); one object per
  block (``Solo``), no prediction.
- ``oracle``: free at the exact last declared read (the moment the last
  declared reader reads it, without waiting for a commit) and charge exact
  bytes, no block rounding: the lower bound the others are measured against.
  It is a measuring baseline: a reader retried after the object went is
  refused, as in any system without deferred commit.

``funcstore`` and ``oracle`` pack slices and chunks of every pool of a run into
shared blocks (``_allocator``); ``pocket`` and ``jiffy`` do not.

The predictor turns an object's HDAG facts into a predicted lifetime in
seconds; ``HeuristicPredictor`` serves when no trained model does
(``lifetime_model.ModelPredictor`` falls back to it per category).
``predict_lifetimes`` asks a predictor for every object of a workflow at once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

from funcsion_rpc.errors import InvalidRequest
from hdag import HDAG, ObjectInfo

from ._allocator import Solo

__all__ = ["ReleasePolicy", "parse_policy", "LifetimePredictor", "HeuristicPredictor", "pool_key", "group_key",
           "predict_lifetimes", "predictor_revision", "EXPIRY_WINDOW_MS"]

#: ``funcstore:expiry``'s default window: objects predicted to expire within it share a pool.
EXPIRY_WINDOW_MS = 250


@dataclass(frozen=True, slots=True)
class ReleasePolicy:
    name: str                      # "funcstore" | "pocket" | "jiffy" | "oracle"
    lease_s: float = 0.0
    grouping: str = "lifetime"     # funcstore's pools: "lifetime" | "expiry" | "none"
    window_s: float = 0.0          # grouping "expiry": the window
    at_commit: bool = False        # funcstore: keep function memory until the last commit (":commit")

    @property
    def spec(self) -> str:
        if self.name == "jiffy":
            return f"jiffy:{int(round(self.lease_s * 1000))}"
        tail = ":commit" if self.at_commit else ""
        if self.name == "funcstore" and self.grouping == "expiry":
            return f"funcstore:expiry:{int(round(self.window_s * 1000))}{tail}"
        if self.name == "funcstore" and self.grouping == "none":
            return f"funcstore:nogroup{tail}"
        return self.name + tail

    @property
    def frees_on_commit(self) -> bool:
        return self.name == "funcstore"

    @property
    def frees_on_last_read(self) -> bool:
        return self.name == "oracle"

    @property
    def releases_at_read(self) -> bool:
        """Function memory goes at the last declared read, the object (its durable copy) at
        the last commit: funcstore unless ``:commit``."""
        return self.name == "funcstore" and not self.at_commit

    @property
    def counts_readers(self) -> bool:
        """Objects remember which declared readers read them (``ObjectRecord.read_by``)."""
        return self.frees_on_last_read or self.releases_at_read

    @property
    def fills_holes(self) -> bool:
        """Whether a freed entry's space in a held block is reused (not the oracle's: it frees
        an object at its read's lookup, before the reader has the bytes)."""
        return not self.frees_on_last_read

    @property
    def has_lease(self) -> bool:
        return self.name == "jiffy"

    @property
    def lifetime_pools(self) -> bool:
        return self.name == "funcstore" and self.grouping != "none"

    @property
    def exact_bytes(self) -> bool:
        return self.name == "oracle"

    @property
    def one_object_per_block(self) -> bool:
        """Pocket and Jiffy as FuncStore models them: an object's blocks hold it alone."""
        return self.name in ("pocket", "jiffy")


def parse_policy(spec: str) -> ReleasePolicy:
    """``funcstore[:expiry[:<window_ms>]|:nogroup][:commit]`` | ``pocket`` | ``oracle`` |
    ``jiffy:<lease_ms>``; "" means funcstore."""
    text = (spec or "funcstore").strip().lower()
    if text.startswith("funcstore") and text.endswith(":commit"):
        head = text[:-len(":commit")]
        if not head.endswith(":commit"):
            try:
                return dataclasses.replace(parse_policy(head), at_commit=True)
            except InvalidRequest:
                pass
    if text in ("funcstore", "pocket", "oracle"):
        return ReleasePolicy(text)
    name, sep, rest = text.partition(":")
    if name == "jiffy" and sep and rest.isdigit() and int(rest) > 0:
        return ReleasePolicy("jiffy", int(rest) / 1000.0)
    if name == "funcstore":
        if rest == "nogroup":
            return ReleasePolicy("funcstore", grouping="none")
        how, sep2, window = rest.partition(":")
        if how == "lifetime" and not sep2:
            return ReleasePolicy("funcstore")
        if how == "expiry" and (not sep2 or (window.isdigit() and int(window) > 0)):
            return ReleasePolicy("funcstore", grouping="expiry",
                                 window_s=(int(window) if sep2 else EXPIRY_WINDOW_MS) / 1000.0)
    raise InvalidRequest(f"unknown release policy {spec!r}: use funcstore (or funcstore:expiry[:<window_ms>], "
                         "funcstore:nogroup, each with :commit to keep memory until the last commit), pocket, "
                         "oracle or jiffy:<lease_ms> (e.g. jiffy:5000)")


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


def group_key(policy: ReleasePolicy, predicted_s: float, since_start_s: float, name: str = "") -> int | Solo:
    """The pool of object ``name`` put ``since_start_s`` after its run started with a
    predicted lifetime of ``predicted_s``: its lifetime bucket, its predicted expiry's
    window, ``Solo(name)`` (blocks of its own) under pocket and jiffy, or 0 (one pool)
    when the policy does not group."""
    if policy.one_object_per_block:
        return Solo(name)
    if not policy.lifetime_pools:
        return 0
    if policy.grouping == "expiry":
        return int(math.floor(max(since_start_s + max(predicted_s, 0.0), 0.0) / policy.window_s))
    return pool_key(predicted_s)


def predict_lifetimes(predictor: LifetimePredictor, graph: HDAG, concurrency: int = 0,
                      input_bytes: int = 0) -> dict[str, float]:
    """Predicted seconds for every object of ``graph`` that has features, for a run of
    ``concurrency`` tasks at once and ``input_bytes`` of inputs (0: unknown), in one call when
    the predictor can (``predict_graph(graph, concurrency, input_bytes=...)``: a trained model
    per category, whose wave features depend on the concurrency and whose input-size feature
    on the input; ``input_bytes`` is passed only when known)."""
    many = getattr(predictor, "predict_graph", None)
    if many is not None:
        return dict(many(graph, concurrency, input_bytes=input_bytes) if input_bytes > 0 else many(graph, concurrency))
    return {n: predictor.predict(o) for n, o in graph.objects.items() if o.features is not None}


def predictor_revision(predictor: LifetimePredictor, category: str) -> str:
    """What predicts for ``category`` now (``model:<version>``, ``heuristic``): a workflow's
    predictions are made again at run start when this changed since its registration."""
    rev = getattr(predictor, "revision", None)
    return str(rev(category)) if rev is not None else type(predictor).__name__
