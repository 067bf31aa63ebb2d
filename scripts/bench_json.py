#!/usr/bin/env python3
"""Run one `funcsion bench` and check in its JSON for the documentation site.

    python scripts/bench_json.py hdag --functions 2000
    python scripts/bench_json.py store --iters 60 --no-redis

runs `funcsion bench <NAME> <ARGS...> --json` and writes docs/bench/<NAME>.json holding the
benchmark's own JSON object (its last output line) under "result", beside the exact command
that made it, when it ran, how long it took, the commit it ran on and the machine's load
average (`os.getloadavg()`, what `uptime` prints) before and after. scripts/render_bench.py
renders those files into the benchmark pages; nothing on those pages is typed by hand.

What this does not do: it does not judge the figures or compare them with earlier runs.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: scripts/bench_json.py NAME [ARGS...] (runs `funcsion bench NAME ARGS --json`)", file=sys.stderr)
        return 2
    name, args = argv[0], [a for a in argv[1:] if a != "--json"]
    command = ["funcsion", "bench", name, *args, "--json"]
    started, commit = datetime.datetime.now(datetime.timezone.utc), _commit()  # the code that is measured
    load_before, t0 = _load(), time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds, load_after = time.monotonic() - t0, _load()
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        print(f"bench_json: `{shlex.join(command)}` exited {proc.returncode} without a JSON last line; "
              "nothing written", file=sys.stderr)
        return 1
    record = {
        "benchmark": name,
        "command": shlex.join(command),
        "started_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(seconds, 1),
        "commit": commit,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_after,
        "result": json.loads(lines[-1]),
    }
    out = ROOT / "docs" / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    print(f"bench_json: wrote {out.relative_to(ROOT)} ({seconds:.0f} s, load {load_before} -> {load_after})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
