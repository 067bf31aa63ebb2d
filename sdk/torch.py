"""PyTorch over funcsion (SION v2 Sec. 6.1.3): ``ObjectDataset`` is a map-style dataset of
the objects a run holds under a name prefix, read through the store on every
``__getitem__``; ``save_sample``/``load_sample`` turn tensors (or dicts and tuples of them)
into bytes and back.

``DataLoader(ObjectDataset(...), num_workers=N)`` works: the dataset pickles its run's
endpoints and names, never a connection, and each process (the loader's workers, forked
or spawned) opens its own client on first use. A worker gets the run's scoped store token
only (``Endpoints.for_run``), not the store-wide or admin token.

Import-guarded: importing this module does not import torch; only ``save_sample`` and
``load_sample`` do (``pip install 'funcsion[model]'`` when it is missing). The dataset
itself needs no torch: it returns what the store holds (or what ``transform`` makes of it).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from typing import Any

from ._client import Client, Endpoints
from .exceptions import ConfigError

__all__ = ["ObjectDataset", "save_sample", "load_sample"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError("sdk.torch needs PyTorch: pip install 'funcsion[model]'") from None
    return torch


def save_sample(sample: Any) -> bytes:
    """``torch.save`` of a tensor, or a dict/list/tuple of tensors and numbers, to bytes."""
    buf = io.BytesIO()
    _torch().save(sample, buf)
    return buf.getvalue()


def load_sample(data: bytes | bytearray | memoryview) -> Any:
    """What ``save_sample`` wrote (``weights_only``: tensors and plain containers, no code)."""
    return _torch().load(io.BytesIO(bytes(data)), weights_only=True)


class ObjectDataset:
    """The objects of a run whose names start with ``prefix``, in name order.

    ``source`` is a client bound to the run (``Client.start_run``, or ``Client(...).bind(
    run_id=..., token=...)``). ``names`` skips the listing. ``transform`` is applied to each
    decoded value (e.g. ``load_sample``). Reads are a driver's reads (no read count), so put
    the samples with ``adhoc=True``: they live until the run ends or ``Client.delete``.
    """

    def __init__(self, source: Client, prefix: str = "", *, names: Sequence[str] | None = None,
                 transform: Callable[[Any], Any] | None = None) -> None:
        if not isinstance(source, Client) or not source.run_id:
            raise ConfigError("ObjectDataset needs a Client bound to a run (Client.start_run or Client.bind(run_id=, "
                              f"token=)); got {source!r}")
        self.endpoints: Endpoints = source.endpoints.for_run(source.run_id)
        self.run_id, self.token = source.run_id, source.token
        self.prefix = prefix
        if names is None:
            names = sorted(s.object_name for s in source.list(prefix) if s.state == "readable")
            if not names:
                raise ConfigError(f"ObjectDataset: run {source.run_id} holds no readable object under prefix "
                                  f"{prefix!r}; put the samples first (adhoc=True)")
        self.names = list(names)
        self.transform = transform
        self._client: Client | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> Any:
        value = self.client().get(self.names[index])
        return self.transform(value) if self.transform is not None else value

    def client(self) -> Client:
        """This process's client of the run (opened on first use, again after a fork)."""
        if self._client is None or self._pid != os.getpid():
            self._client = Client(self.endpoints, run_id=self.run_id, token=self.token)
            self._pid = os.getpid()
        return self._client

    def close(self) -> None:
        if self._client is not None and self._pid == os.getpid():
            self._client.close()
        self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"], state["_pid"] = None, -1  # connections stay in the process that opened them
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"ObjectDataset(run {self.run_id}, prefix {self.prefix!r}, {len(self.names)} objects)"
