"""``python -m lifetime_model retrain --category C --data DIR --models DIR``: what the
metadata server runs in the background every N recorded runs (``retrain_every``);
prints the outcome as one JSON line. ``funcsion train`` is the command for people."""

from __future__ import annotations

import argparse
import json
import sys

from .exceptions import LifetimeModelError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lifetime_model")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("retrain", help="train a candidate; install it only when more accurate on held-out runs")
    r.add_argument("--category", required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--models", required=True)
    r.add_argument("--epochs", type=int, default=600)
    args = p.parse_args(argv)
    from ._train import retrain

    try:
        out = retrain(args.data, args.models, args.category, epochs=args.epochs)
    except LifetimeModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
