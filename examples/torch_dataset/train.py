"""Train a small CNN on a dataset read through funcsion, sample by sample, and read the
same samples from COS directly for comparison (SION v2 Sec. 6.1.3).

    python examples/torch_dataset/train.py [--samples 2048] [--epochs 3] [--workers 2] [--json]

Starts an embedded stack, generates a 10-class image dataset (3x32x32, each class a
pattern plus noise), puts every sample into a run (``adhoc=True``: no read count, kept
until the run ends) and into COS, then trains for a few epochs twice with the same seed:
once through ``sdk.torch.ObjectDataset`` (every ``__getitem__`` a GET through the store)
and once from COS directly. Both loaders use ``DataLoader(num_workers=N)``, each worker
with its own connection. COS is S3 on moto's server when moto is installed (the ``dev``
extra), else the stack's local COS directory; the table says which.

Then it measures loading alone (no training) on 4 KiB samples, three ways with the same
loader: one object per sample (``ObjectDataset``), compound objects of 16 samples
(``CompoundWriter``/``CompoundDataset``/``CompoundSampler``, SION v2 Sec. 6.1.3: one GET
feeds a batch of 16), and one COS object per sample.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import socket
import sys
import tempfile
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

import sdk
from sdk.local._stack import Stack
from sdk.torch import CompoundDataset, CompoundSampler, CompoundWriter, ObjectDataset, load_sample, save_sample
from storage_functions.cos import open_cos

WDS = {"app": "torch-dataset", "workflow_id": 1, "category": "ml",
       "spec": {"train_stage": {"stage_id": 0, "functions": [
           {"start": True, "name": "train", "input": ["dataset_spec"], "output": [], "next": []}]}}}
CLASSES = 10


def make_dataset(n: int, seed: int) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 3, 32, 32, generator=g)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    return [(templates[y] + 1.5 * torch.randn(3, 32, 32, generator=g), int(y)) for y in labels]


class COSDataset:
    """The same samples read from COS directly, one adapter per process."""

    def __init__(self, url: str, keys: list[str]) -> None:
        self.url, self.keys = url, keys
        self._cos: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> Any:
        if self._cos is None or self._pid != os.getpid():
            self._cos, self._pid = open_cos(self.url), os.getpid()
        return load_sample(self._cos.get(self.keys[i]))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cos": None, "_pid": -1}


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 8 * 8, CLASSES))


def as_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    return x, torch.as_tensor(y)


def train(ds: Any, epochs: int, workers: int, batch: int, on_epoch: Any = None) -> list[dict[str, float]]:
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(1))
    rows = []
    for _ in range(epochs):
        t0, seen, correct, total_loss = time.perf_counter(), 0, 0, 0.0
        before = on_epoch() if on_epoch else None
        for b in loader:
            x, y = as_batch(b)
            opt.zero_grad()
            out = net(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            correct += int((out.argmax(1) == y).sum())
            total_loss += float(loss.detach()) * len(y)
        row = {"samples_per_s": seen / (time.perf_counter() - t0), "loss": total_loss / seen, "accuracy": correct / seen}
        if on_epoch:
            after = on_epoch()
            gets = after["gets"] - before["gets"]
            missed = (after["buffer_hits"] - before["buffer_hits"]) + (after["cos_fallbacks"] - before["cos_fallbacks"])
            row["hit_ratio"] = (gets - missed) / gets if gets else 0.0
        rows.append(row)
    return rows


class RawCOS(COSDataset):
    """COS objects as bytes (the loading measurement decodes nothing)."""

    def __getitem__(self, i: int) -> Any:
        if self._cos is None or self._pid != os.getpid():
            self._cos, self._pid = open_cos(self.url), os.getpid()
        return self._cos.get(self.keys[i])


def load_rate(ds: Any, workers: int, batch: int, sampler: Any = None, rounds: int = 2) -> float:
    """Samples per second a DataLoader yields from ``ds`` (bytes samples, batches as lists);
    the best of ``rounds`` passes."""
    best = 0.0
    for _ in range(rounds):
        loader = DataLoader(ds, batch_size=batch, sampler=sampler, shuffle=sampler is None, num_workers=workers,
                            collate_fn=list, generator=torch.Generator().manual_seed(1))
        t0, seen = time.perf_counter(), 0
        for b in loader:
            seen += len(b)
        best = max(best, seen / (time.perf_counter() - t0))
    return best


def measure_loading(run: Any, cos_url: str, n: int, sample_bytes: int, workers: int, per_object: int) -> dict[str, Any]:
    """Loading rate of ``n`` random samples of ``sample_bytes`` each: one object per sample,
    compound objects of ``per_object``, and one COS object per sample."""
    rng = random.Random(11)
    blobs = [rng.randbytes(sample_bytes) for _ in range(n)]
    names = [f"raw_{i:05d}" for i in range(n)]
    for k in range(0, n, 256):
        run.put_many(dict(zip(names[k:k + 256], blobs[k:k + 256])), codec="bytes", adhoc=True)
    with CompoundWriter(run, "packed_", per_object=per_object) as writer:
        for b in blobs:
            writer.add(b)
    cos = open_cos(cos_url)
    keys = [f"dataset/{run.run_id}/raw/{n}" for n in names]
    for key, blob in zip(keys, blobs):
        cos.put(key, blob)
    compound = CompoundDataset(run, "packed_")
    assert bytes(compound[n - 1]) == blobs[-1]
    one = load_rate(ObjectDataset(run, "raw_"), workers, per_object)
    packed = load_rate(compound, workers, per_object, sampler=CompoundSampler(compound, seed=1))
    direct = load_rate(RawCOS(cos_url, keys), workers, per_object)
    for key in keys:
        cos.delete(key)
    return {"samples": n, "sample_bytes": sample_bytes, "per_object": per_object, "batch": per_object,
            "workers": workers, "one_per_sample_samples_per_s": one, "compound_samples_per_s": packed,
            "cos_samples_per_s": direct, "compound_over_one_per_sample": packed / one, "compound_over_cos": packed / direct}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_url() -> tuple[str, Any]:
    """An S3 bucket on moto's server, or ("", None) when moto is not installed."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        return "", None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for k, v in (("AWS_ACCESS_KEY_ID", "example"), ("AWS_SECRET_ACCESS_KEY", "example"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(k, v)
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="samples")
    return f"s3://samples/dataset?endpoint_url={endpoint}&region=us-east-1", server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--load-samples", type=int, default=2048, help="samples in the loading measurement (0: skip it)")
    p.add_argument("--sample-bytes", type=int, default=4096, help="each sample's size in the loading measurement")
    p.add_argument("--per-object", type=int, default=16, help="samples per compound object (and the batch size)")
    p.add_argument("--state-dir", default=None, help="the stack's state directory (a temporary one by default)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object last")
    args = p.parse_args(argv)
    if args.samples < args.batch or args.epochs < 1 or args.workers < 0:
        p.error("--samples must be at least --batch, --epochs at least 1, --workers at least 0")
    torch.set_num_threads(1)  # the loader's workers need the other cores; on 2 cores torch's threads starve them
    state = args.state_dir or tempfile.mkdtemp(prefix="funcsion-torch-")
    data = make_dataset(args.samples, seed=7)
    names = [f"sample_{i:05d}" for i in range(len(data))]
    blobs = [save_sample(s) for s in data]
    url, server = s3_url()
    cfg = sdk.Config.load(state_dir=state)
    try:
        with Stack(cfg, metadata_port=0, daemon_port=0) as stack, stack.client() as driver:
            run = driver.start_run(driver.register_workflow(json.dumps(WDS)), max_concurrency=1)
            for k in range(0, len(names), 256):
                run.put_many(dict(zip(names[k:k + 256], blobs[k:k + 256])), codec="bytes", adhoc=True)
            cos_url = url or stack.config.resolved_cos_url
            cos = open_cos(cos_url)
            keys = [f"dataset/{run.run_id}/{n}" for n in names]
            for key, blob in zip(keys, blobs):
                cos.put(key, blob)
            store_stats = stack.store.daemon.stats
            through = train(ObjectDataset(run, "sample_", transform=load_sample), args.epochs, args.workers,
                            args.batch, on_epoch=store_stats)
            direct = train(COSDataset(cos_url, keys), args.epochs, args.workers, args.batch)
            for key in keys:
                cos.delete(key)
            loading = (measure_loading(run, cos_url, args.load_samples, args.sample_bytes, args.workers,
                                       args.per_object) if args.load_samples > 0 else None)
            run.end_run("succeeded")
            run.close()
    finally:
        if server is not None:
            server.stop()
    cos_kind = "S3 (moto's server on loopback)" if url else "the stack's local COS directory"
    print(f"{args.samples} samples of 3x32x32, {args.epochs} epochs, batch {args.batch}, {args.workers} workers; "
          f"COS: {cos_kind}")
    print(f"{'epoch':>5} {'loss':>7} {'acc':>6} {'funcsion samples/s':>19} {'hit ratio':>9} {'COS samples/s':>14}")
    for e, (a, b) in enumerate(zip(through, direct)):
        print(f"{e:>5} {a['loss']:>7.3f} {a['accuracy']:>6.1%} {a['samples_per_s']:>19.0f} {a['hit_ratio']:>9.1%} "
              f"{b['samples_per_s']:>14.0f}")
    if loading is not None:
        print(f"loading {loading['samples']} samples of {loading['sample_bytes']} B, batch {loading['batch']}, "
              f"{loading['workers']} workers (samples/s): one object per sample "
              f"{loading['one_per_sample_samples_per_s']:.0f}, compound objects of {loading['per_object']} "
              f"{loading['compound_samples_per_s']:.0f} ({loading['compound_over_one_per_sample']:.1f}x), "
              f"COS {loading['cos_samples_per_s']:.0f}")
    if args.json:
        print(json.dumps({"samples": args.samples, "epochs": args.epochs, "workers": args.workers, "cos": cos_kind,
                          "funcsion": through, "cos_direct": direct, "loading": loading}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
