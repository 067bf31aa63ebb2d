"""A deployment of several daemons seen as one store, for a run's report: each daemon's
counters (``STAT``) and what its storage functions held for a run (its ledger's
``MEMORY`` figures) merged into the figures one daemon would give, with each daemon's
own beside them (``daemons``). Pure: dicts in, dicts out; asking the daemons is
``_run``'s. One daemon: its figures as they are.

Counters sum. A run's memory: the integrals (MB-s) and what is held now sum; the
time series are step functions of (time, allocated, live) and are summed at every
time any daemon's changed, and the peaks are the merged series' (the sum of the
daemons' peaks when no series came). Not covered: the model's figures (the
metadata server's, already deployment-wide).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["merge_physical", "merge_stats"]

_SUMMED = ("allocated_bytes", "live_bytes", "allocated_mb_s", "live_mb_s", "block_bytes", "block_mb_s")
_PEAKS = ("peak_allocated_bytes", "peak_live_bytes", "peak_block_bytes")


def merge_stats(per_daemon: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every daemon's ``STAT`` as one: numbers summed (top level), the rest the first's;
    with several, ``daemons`` holds each one's as it came."""
    if len(per_daemon) == 1:
        return dict(next(iter(per_daemon.values())))
    out: dict[str, Any] = {}
    for stat in per_daemon.values():
        for k, v in stat.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    out["daemons"] = {d: dict(s) for d, s in per_daemon.items()}
    return out


def merge_physical(per_daemon: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """One run's ledger figures of every daemon as one (None when no daemon could say);
    with several, ``daemons`` holds each one's figures without its series."""
    got = {d: p for d, p in per_daemon.items() if p is not None}
    if not got:
        return None
    if len(per_daemon) == 1:
        return dict(next(iter(got.values())))
    out: dict[str, Any] = {k: sum(float(p.get(k, 0) or 0) for p in got.values()) for k in _SUMMED}
    for k in ("allocated_bytes", "live_bytes", "block_bytes"):
        out[k] = int(out[k])
    firsts = [float(p["first_t"]) for p in got.values() if p.get("first_t") is not None]
    lasts = [float(p["last_t"]) for p in got.values() if p.get("last_t") is not None]
    out["first_t"] = min(firsts) if firsts else None
    out["last_t"] = max(lasts) if lasts else None
    series = _sum_series([p.get("series") or [] for p in got.values()])
    out["series"] = series
    if series:
        out["peak_allocated_bytes"] = max(int(a) for _, a, _ in series)
        out["peak_live_bytes"] = max(int(v) for _, _, v in series)
        out["peak_block_bytes"] = sum(int(p.get("peak_block_bytes", 0) or 0) for p in got.values())
    else:
        for k in _PEAKS:
            out[k] = sum(int(p.get(k, 0) or 0) for p in got.values())
    out["daemons"] = {d: {k: v for k, v in p.items() if k != "series"} for d, p in got.items()}
    return out


def _sum_series(series: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """Step functions ``[t, allocated, live]`` (each holds until its next point) summed."""
    events = sorted((float(p[0]), i, int(p[1]), int(p[2])) for i, s in enumerate(series) for p in s)
    now: dict[int, tuple[int, int]] = {}
    out: list[list[float]] = []
    for t, i, a, v in events:
        now[i] = (a, v)
        point = [t, sum(x for x, _ in now.values()), sum(y for _, y in now.values())]
        if out and out[-1][0] == t:
            out[-1] = point
        else:
            out.append(point)
    return out
