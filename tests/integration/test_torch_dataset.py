"""``sdk.torch.ObjectDataset`` over a run's objects on the embedded stack: every item read
through the store, ``DataLoader(num_workers>0)`` with a connection per worker (also after the
parent opened its own), pickling without connections, clear errors, torch imported only when
used; and the training example end to end."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from sdk import Client, ConfigError
from sdk.local._stack import Stack
from sdk.torch import (CompoundDataset, CompoundSampler, CompoundWriter, ObjectDataset, load_sample,
                       save_sample, unpack_samples)

from .examples import EXAMPLES, REPO, require_modules

WDS = {"app": "torch-ds-test", "workflow_id": 1, "category": "ml",
       "spec": {"s": {"stage_id": 0, "functions": [
           {"start": True, "name": "f", "input": ["spec"], "output": [], "next": []}]}}}


@pytest.fixture(scope="module")
def run(stack: Stack) -> Iterator[Client]:
    with stack.client() as driver:
        r = driver.start_run(driver.register_workflow(json.dumps(WDS)))
        r.put_many({f"s_{i:03d}": save_sample((torch.full((4,), float(i)), i)) for i in range(24)},
                   codec="bytes", adhoc=True)
        r.put("other", b"not a sample", adhoc=True)
        yield r
        r.end_run("succeeded")
        r.close()


class WhoRead(ObjectDataset):
    """Each item with the pid that read it and the pid whose client it read with."""

    def __getitem__(self, index: int) -> Any:
        value = super().__getitem__(index)
        return value, os.getpid(), self._pid


def test_items_are_the_stored_samples_in_name_order(run: Client) -> None:
    ds = ObjectDataset(run, "s_", transform=load_sample)
    assert len(ds) == 24 and ds.names[0] == "s_000" and "other" not in ds.names
    x, y = ds[5]
    assert y == 5 and torch.equal(x, torch.full((4,), 5.0))
    ds.close()


def test_dataloader_workers_each_open_their_own_connection(run: Client) -> None:
    ds = WhoRead(run, "s_", transform=load_sample)
    ds[0]  # the parent opens a client first: forked workers must not use its sockets
    parent_client = ds._client
    loader = DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    labels, pids = [], set()
    for (x, y), pid, client_pid in loader:
        labels += [int(v) for v in y]
        pids |= {int(p) for p in pid}
        assert torch.equal(x[:, 0], y.float())
        assert torch.equal(pid, client_pid)  # read with a client the worker opened itself
    assert labels == list(range(24))
    assert len(pids) == 2 and os.getpid() not in pids
    assert ds._client is parent_client  # the parent's connection is still its own, and works
    assert ds[3][0][1] == 3
    ds.close()


def test_pickles_without_connections(run: Client) -> None:
    ds = ObjectDataset(run, "s_", transform=load_sample)
    ds[0]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._client is None and copy.names == ds.names
    assert "admin" not in repr(copy.endpoints.admin_token) and copy.endpoints.admin_token == ""
    assert copy[1][1] == 1
    ds.close()
    copy.close()


def test_bad_sources_are_refused_with_one_line(stack: Stack, run: Client) -> None:
    with stack.client() as unbound:
        with pytest.raises(ConfigError, match="needs a Client bound to a run"):
            ObjectDataset(unbound, "s_")
    with pytest.raises(ConfigError, match="no readable object under prefix 'nope_'.*adhoc=True"):
        ObjectDataset(run, "nope_")


def test_compound_dataset_returns_the_right_samples_with_one_get_per_object(run: Client) -> None:
    samples = [save_sample((torch.full((4,), float(i)), i)) for i in range(40)]
    with CompoundWriter(run, "c_", per_object=16, batch=2) as writer:
        for s in samples:
            writer.add(s)
    assert writer.objects == [("c_00000", 16), ("c_00001", 16), ("c_00002", 8)]
    assert [bytes(v) for v in unpack_samples(run.get("c_00001"))] == samples[16:32]  # one GET, 16 samples
    ds = CompoundDataset(run, "c_", transform=load_sample)
    assert len(ds) == 40 and ds.locate(17) == (1, 1) and ds.locate(39) == (2, 7)
    got = [ds[i] for i in range(40)]
    assert [y for _, y in got] == list(range(40)) and torch.equal(got[33][0], torch.full((4,), 33.0))
    assert ds.gets == 3
    with pytest.raises(IndexError, match="out of range"):
        ds[40]
    ds.close()


class WhoReadCompound(CompoundDataset):
    def __getitem__(self, index: int) -> Any:
        return super().__getitem__(index), os.getpid(), self.gets


def test_compound_sampler_keeps_each_loader_batch_on_one_object(run: Client) -> None:
    with CompoundWriter(run, "k_", per_object=16) as writer:
        for i in range(64):
            writer.add(save_sample((torch.full((2,), float(i)), i)))
    ds = WhoReadCompound(run, "k_", transform=load_sample)
    loader = DataLoader(ds, batch_size=16, sampler=CompoundSampler(ds, seed=1), num_workers=2)
    seen, gets_by_pid = [], {}
    for (_x, y), pid, gets in loader:
        labels = [int(v) for v in y]
        assert len({v // 16 for v in labels}) == 1  # the whole batch from one object
        seen += labels
        gets_by_pid[int(pid[0])] = max(gets_by_pid.get(int(pid[0]), 0), int(gets.max()))
    assert sorted(seen) == list(range(64)) and seen != list(range(64))
    assert sum(gets_by_pid.values()) == 4  # one GET per object across the workers
    ds.close()


def test_compound_dataset_without_an_index_is_refused_with_one_line(run: Client) -> None:
    with pytest.raises(ConfigError, match="no readable compound index 'none_index'.*CompoundWriter"):
        CompoundDataset(run, "none_")


def test_importing_sdk_torch_does_not_import_torch() -> None:
    code = "import sys, sdk.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_the_training_example_runs_in_one_command(tmp_path: Any) -> None:
    require_modules("torch-dataset", "torch")
    script = EXAMPLES / "torch_dataset" / "train.py"
    out = subprocess.run([sys.executable, str(script), "--samples", "128", "--epochs", "2", "--workers", "2",
                          "--batch", "32", "--load-samples", "256", "--state-dir", str(tmp_path / "state"), "--json"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(doc["funcsion"]) == 2 and len(doc["cos_direct"]) == 2
    for row in doc["funcsion"]:
        assert row["samples_per_s"] > 0 and 0.0 <= row["hit_ratio"] <= 1.0
    assert doc["funcsion"][0]["loss"] == pytest.approx(doc["cos_direct"][0]["loss"], rel=1e-4)  # the same samples
    assert doc["funcsion"][1]["loss"] < doc["funcsion"][0]["loss"]
    loading = doc["loading"]
    assert loading["sample_bytes"] == 4096 and loading["per_object"] == 16
    assert loading["compound_samples_per_s"] > loading["one_per_sample_samples_per_s"] > 0  # fewer GETs, faster
