"""Pure decisions of the local platform, from a config and a random source:
when an idle instance is reclaimed, and whether (and when) an invocation is
killed by fault injection. No processes, no clocks read here."""

from __future__ import annotations

import fnmatch
from typing import Protocol

from ._config import PlatformConfig

__all__ = ["reclaim_at", "kill_delay", "matches"]


class Rng(Protocol):
    def random(self) -> float: ...

    def uniform(self, a: float, b: float) -> float: ...


def reclaim_at(config: PlatformConfig, now: float, rng: Rng) -> float:
    """When an instance that goes idle at ``now`` is reclaimed."""
    assert config.idle_reclaim_s is not None, "resolve() the config first"
    lo, hi = config.idle_reclaim_s
    return now + rng.uniform(lo, hi)


def matches(globs: str, function_name: str) -> bool:
    """True if ``function_name`` matches one of the comma- or newline-separated globs."""
    pats = [p.strip() for p in globs.replace("\n", ",").split(",") if p.strip()]
    return any(fnmatch.fnmatchcase(function_name, p) for p in pats)


def kill_delay(config: PlatformConfig, function_name: str, rng: Rng) -> float | None:
    """Seconds after dispatch at which this invocation's instance is killed,
    or None if it lives. Draws from ``rng`` only when the function is a target."""
    assert config.kill_rate is not None and config.kill_functions is not None, "resolve() the config first"
    if config.kill_rate <= 0 or not matches(config.kill_functions, function_name):
        return None
    if rng.random() >= config.kill_rate:
        return None
    return rng.uniform(0.0, config.kill_delay_s or 0.0)
