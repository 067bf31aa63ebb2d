"""``funcsion train``: train each category's lifetime model (torch) on its dataset and
install it where the metadata server loads models from, only when it is more accurate on
held-out runs than the model there (``lifetime_model._train.retrain``). A running server
picks the new model up without a restart."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "train", help="train lifetime models (torch MLP per category) from the recorded datasets",
        description="Train FuncStore's lifetime model (7 features: FuncStore's 5 and 2 wave features, and when "
                    "the runs recorded their input size, the run's input bytes, width and bytes per function, "
                    "log2 -> 3x64 ReLU -> ms) per category on an 80/10/10 split by run; install it when it beats "
                    "the current model on the test runs (a model of an older format is replaced).")
    p.add_argument("--category", action="append", default=[], metavar="C",
                   help="category to train (repeatable; default: every category with a dataset)")
    p.add_argument("--data", default=None, help="dataset directory (default: lifetime_data, <state_dir>/lifetimes)")
    p.add_argument("--models", default=None,
                   help="model directory to install into (default: lifetime_models, <state_dir>/models)")
    p.add_argument("--state-dir", default=None, help="state directory (.funcsion)")
    p.add_argument("--epochs", type=int, default=600, help="training epochs (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the initial weights")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    from funcsion_rpc.errors import InvalidRequest
    from lifetime_model import categories, check_category, retrain
    from sdk._config import Config

    if args.epochs < 1:
        raise InvalidRequest(f"--epochs must be at least 1, got {args.epochs}")
    cfg = Config.load(state_dir=args.state_dir, lifetime_data=args.data, lifetime_models=args.models)
    data, models = cfg.resolved_lifetime_data, cfg.resolved_lifetime_models
    cats = [check_category(c) for c in args.category] or categories(data)
    if not cats:
        raise InvalidRequest(f"no dataset in {data}: record runs first (`funcsion collect`), or point --data at "
                             "a directory of <category>.csv files")
    import torch  # noqa: F401  (a missing torch names its extra here, before any work)

    outcomes = {}
    for c in cats:
        o = retrain(data, models, c, seed=args.seed, epochs=args.epochs)
        outcomes[c] = o.to_dict()
        print(f"{c}: {o.reason}", flush=True)
    if args.json:
        print(json.dumps({"data": str(data), "models": str(models), "categories": outcomes}))
    return 0
