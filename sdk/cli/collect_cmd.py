"""``funcsion collect``: run the examples many times with varied inputs, sizes and
fan-outs (``sdk.local._collect.VARIANTS``) on one embedded stack, so its metadata server
records their lifetimes into the datasets (``<state_dir>/lifetimes/<category>.csv`` or
``lifetime_data``), ready for ``funcsion train``."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "collect", help="run the examples many times to record lifetime datasets (then: funcsion train)",
        description="Run word count, gg compile and video many times with varied inputs, sizes and fan-outs; "
                    "every successful run adds its objects' measured lifetimes to the dataset of its category.")
    p.add_argument("--runs", type=int, default=50, help="runs of each example (default 50; FuncStore used > 50)")
    p.add_argument("--examples", default="wordcount,gg_compile,video",
                   help="comma-separated examples (default wordcount,gg_compile,video)")
    p.add_argument("--data", default=None, help="dataset directory (default: lifetime_data, <state_dir>/lifetimes)")
    p.add_argument("--state-dir", default=None,
                   help="state directory of the stack the runs use (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the varied inputs")
    p.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="run every combination of these parameter values instead of the built-in variants "
                        "(repeatable; one example only), e.g. --param mappers=2,4,8,12 --param reducers=2")
    p.add_argument("--text-share", default="", metavar="S1,S2,...",
                   help="wordcount: input sizes as shares of its default text (above 1 repeats it), each "
                        "combined with every --param combination")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    from funcsion_rpc.errors import InvalidRequest
    from lifetime_model import categories, load_rows
    from sdk._config import Config
    from sdk.local._collect import collect_runs, examples, plan
    from sdk.local._stack import Stack

    if args.runs < 1:
        raise InvalidRequest(f"--runs must be at least 1, got {args.runs}")
    names = examples(args.examples)
    grids = _grids(names, args.param, args.text_share)
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="funcsion-collect-")
    cfg = Config.load(state_dir=state_dir, lifetime_data=args.data)
    data = cfg.resolved_lifetime_data
    data = cfg.replace(lifetime_data=str(data.resolve())).resolved_lifetime_data
    variants = plan(names, args.runs, args.seed, grids)
    done = {"succeeded": 0, "failed": 0}
    t0 = time.monotonic()

    def progress(v: Any, d: dict[str, Any]) -> None:
        ok = d["status"] == "succeeded"
        done["succeeded" if ok else "failed"] += 1
        n = done["succeeded"] + done["failed"]
        if not args.json:
            print(f"[{n}/{len(variants)}] {v.example} {v.params}"
                  f"{f' text {v.text_share:.0%}' if v.example == 'wordcount' else ''}: {d['status']} "
                  f"in {d['wall_s']:.2f} s", flush=True)

    with Stack(cfg.replace(lifetime_data=str(data)), metadata_port=0, daemon_port=0) as stack:
        collect_runs(stack, stack.config, variants, on_run=progress)
    rows = {c: len(load_rows(data, c)) for c in categories(data)}
    out = {"data": str(data), "runs": done, "rows": rows, "wall_s": round(time.monotonic() - t0, 1)}
    print(f"{done['succeeded']} runs recorded ({done['failed']} failed) in {out['wall_s']} s; dataset {data}: "
          + ", ".join(f"{c} {n} rows" for c, n in rows.items()))
    if args.json:
        print(json.dumps(out))
    return 0 if not done["failed"] else 1


def _grids(names: list[str], params: list[str], shares: str) -> dict[str, Any]:
    """``--param``/``--text-share`` -> the one example's grid of variants (none given: {})."""
    from funcsion_rpc.errors import InvalidRequest
    from sdk.local._collect import grid

    if not params and not shares:
        return {}
    if len(names) != 1:
        raise InvalidRequest(f"--param and --text-share vary one example, got {len(names)} ({','.join(names)}): "
                             "pass --examples with one of them")
    values: dict[str, list[int]] = {}
    for spec in params:
        name, _, vals = spec.partition("=")
        try:
            values[name.strip()] = [int(v) for v in vals.split(",") if v.strip()]
        except ValueError:
            raise InvalidRequest(f"--param {spec!r}: give NAME=V1,V2,... with integer values") from None
        if not name.strip() or not values[name.strip()]:
            raise InvalidRequest(f"--param {spec!r}: give NAME=V1,V2,... with integer values")
    try:
        share_list = [float(s) for s in shares.split(",") if s.strip()]
    except ValueError:
        raise InvalidRequest(f"--text-share {shares!r}: give numbers, e.g. 0.5,1,2") from None
    return {names[0]: grid(names[0], values, share_list)}
