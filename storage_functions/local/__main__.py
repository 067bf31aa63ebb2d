"""``python -m storage_functions.local [--n N] [--json]``: measure the local
platform's cold-start and warm-invoke latency (p50/p99, ms) with an echo
handler. Cold: a fresh instance each time (kill, then invoke); warm: the
same instance again. With ``--json`` the last line is one JSON object."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ._config import PlatformConfig
from ._platform import LocalPlatform


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m storage_functions.local", description=__doc__)
    ap.add_argument("--n", type=int, default=30, help="cold starts to measure (warm: 20x as many)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d, LocalPlatform(PlatformConfig(), environ={}) as p:
        Path(d, "bench_echo.py").write_text("def handler(event, context):\n    return event\n")
        p.deploy("echo", "bench_echo:handler", memory_mb=256, code_paths=[d])
        cold, warm = [], []
        for _ in range(args.n):
            p.kill("echo")
            t0 = time.perf_counter()
            p.invoke("echo", {"k": 1})
            cold.append((time.perf_counter() - t0) * 1000)
        for _ in range(args.n * 20):
            t0 = time.perf_counter()
            p.invoke("echo", {"k": 1})
            warm.append((time.perf_counter() - t0) * 1000)
    out = {"cold_p50_ms": _pct(cold, 0.5), "cold_p99_ms": _pct(cold, 0.99), "cold_mean_ms": statistics.mean(cold),
           "warm_p50_ms": _pct(warm, 0.5), "warm_p99_ms": _pct(warm, 0.99), "warm_mean_ms": statistics.mean(warm),
           "cold_n": len(cold), "warm_n": len(warm)}
    print(f"cold start: p50 {out['cold_p50_ms']:.1f} ms, p99 {out['cold_p99_ms']:.1f} ms (n={len(cold)})")
    print(f"warm invoke: p50 {out['warm_p50_ms']:.3f} ms, p99 {out['warm_p99_ms']:.3f} ms (n={len(warm)})")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
