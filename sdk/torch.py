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

Compound objects (SION v2 Sec. 6.1.3: samples packed 16 to an object so that one GET feeds a
batch): ``pack_samples``/``unpack_samples`` are the format (a header with the count and each
sample's end offset, then the samples back to back); ``CompoundWriter`` puts them with an index
object naming every compound object and its sample count; ``CompoundDataset`` maps a sample index
to an object and an offset and keeps the object it read last, so the samples of one object cost
one GET; ``CompoundSampler`` orders the indices object by object (shuffled across and within
objects), so that with ``batch_size`` a multiple of the packing each loader worker reads whole
objects. Not here: a format for anything but bytes samples (``save_sample`` makes bytes).
"""

from __future__ import annotations

import bisect
import io
import json
import os
import random
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ._client import Client, Endpoints
from .exceptions import ConfigError, FuncsionError

__all__ = ["ObjectDataset", "save_sample", "load_sample", "pack_samples", "unpack_samples", "CompoundWriter",
           "CompoundDataset", "CompoundSampler", "COMPOUND_MAGIC", "INDEX_NAME"]

#: The first bytes of a compound object (format version 1).
COMPOUND_MAGIC = b"FSC1"
#: The index object's name under a compound dataset's prefix.
INDEX_NAME = "index"
_COUNT = struct.Struct("<4sI")


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


def pack_samples(samples: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """One compound object: ``COMPOUND_MAGIC``, the sample count (u32), each sample's end offset
    in the payload (u64 each), then the samples back to back."""
    if not samples:
        raise ValueError("pack_samples: a compound object holds at least one sample; got none")
    ends, end = [], 0
    for sample in samples:
        end += len(sample)
        ends.append(end)
    return b"".join([_COUNT.pack(COMPOUND_MAGIC, len(samples)), struct.pack(f"<{len(ends)}Q", *ends),
                     *(bytes(s) for s in samples)])


def _sample_bounds(blob: bytes | bytearray | memoryview) -> list[int]:
    """``[0, end_0, end_1, ...]`` shifted to absolute offsets in ``blob``; checks the header."""
    view = memoryview(blob)
    if len(view) < _COUNT.size:
        raise ValueError(f"not a compound object: {len(view)} bytes is shorter than its header")
    magic, count = _COUNT.unpack_from(view)
    if magic != COMPOUND_MAGIC:
        raise ValueError(f"not a compound object: it starts with {bytes(magic)!r}, not {COMPOUND_MAGIC!r}")
    start = _COUNT.size + 8 * count
    ends = struct.unpack_from(f"<{count}Q", view, _COUNT.size) if count else ()
    if len(view) != start + (ends[-1] if ends else 0):
        raise ValueError(f"compound object of {count} samples is truncated: {len(view)} bytes, header says "
                         f"{start + (ends[-1] if ends else 0)}")
    return [start, *(start + e for e in ends)]


def unpack_samples(blob: bytes | bytearray | memoryview) -> list[memoryview]:
    """The samples of a compound object, as views into ``blob`` (no copy)."""
    bounds, view = _sample_bounds(blob), memoryview(blob)
    return [view[a:b] for a, b in zip(bounds, bounds[1:])]


class CompoundWriter:
    """Puts samples into a run as compound objects of ``per_object`` samples each, named
    ``<prefix>00000``, ``<prefix>00001``, ..., and on ``close`` the index ``<prefix>index``
    (JSON: each object's name and sample count). Objects go ``adhoc`` (no read count), a
    ``batch`` of them per ``put_many``. Use as a context manager or call ``close``."""

    def __init__(self, client: Client, prefix: str, *, per_object: int = 16, batch: int = 16) -> None:
        if per_object < 1 or batch < 1:
            raise ConfigError(f"CompoundWriter: per_object and batch must be at least 1; got {per_object}, {batch}")
        self.client, self.prefix, self.per_object, self.batch = client, prefix, per_object, batch
        self.objects: list[tuple[str, int]] = []
        self._samples: list[bytes] = []
        self._pending: dict[str, bytes] = {}
        self._closed = False

    def add(self, sample: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise ConfigError(f"CompoundWriter for prefix {self.prefix!r} is closed; open a new one")
        self._samples.append(bytes(sample))
        if len(self._samples) == self.per_object:
            self._seal()

    def _seal(self) -> None:
        if self._samples:
            name = f"{self.prefix}{len(self.objects):05d}"
            self._pending[name] = pack_samples(self._samples)
            self.objects.append((name, len(self._samples)))
            self._samples = []
        if len(self._pending) >= self.batch:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.client.put_many(self._pending, codec="bytes", adhoc=True)
            self._pending = {}

    def close(self) -> None:
        if self._closed:
            return
        self._seal()
        self._flush()
        index = {"per_object": self.per_object, "objects": [[n, c] for n, c in self.objects]}
        self.client.put(self.prefix + INDEX_NAME, json.dumps(index).encode(), codec="bytes", adhoc=True)
        self._closed = True

    def __enter__(self) -> CompoundWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()


class CompoundDataset(ObjectDataset):
    """The samples ``CompoundWriter`` put under ``prefix``, sample ``i`` of the whole set at
    ``__getitem__(i)``: the index maps it to an object and a position in it. The object read
    last is kept (per process), so the samples of one object cost one GET; ``CompoundSampler``
    orders the reads so that they do. ``transform`` gets each sample's bytes."""

    def __init__(self, source: Client, prefix: str = "", *,
                 transform: Callable[[Any], Any] | None = None) -> None:
        if not isinstance(source, Client) or not source.run_id:
            raise ConfigError("CompoundDataset needs a Client bound to a run (Client.start_run or Client.bind("
                              f"run_id=, token=)); got {source!r}")
        try:
            index = json.loads(bytes(source.get(prefix + INDEX_NAME)))
            objects = [(str(n), int(c)) for n, c in index["objects"]]
        except (FuncsionError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"CompoundDataset: run {source.run_id} has no readable compound index "
                              f"{prefix + INDEX_NAME!r} ({type(exc).__name__}); write the samples with "
                              "CompoundWriter first") from None
        super().__init__(source, prefix, names=[n for n, _ in objects], transform=transform)
        self.counts = [c for _, c in objects]
        self.starts: list[int] = []
        total = 0
        for c in self.counts:
            self.starts.append(total)
            total += c
        self.total = total
        self._cached: tuple[int, list[memoryview]] | None = None
        self.gets = 0

    def __len__(self) -> int:
        return self.total

    def locate(self, index: int) -> tuple[int, int]:
        """(object number, position in it) of sample ``index``."""
        if not 0 <= index < self.total:
            raise IndexError(f"sample {index} out of range: the dataset holds {self.total}")
        obj = bisect.bisect_right(self.starts, index) - 1
        return obj, index - self.starts[obj]

    def samples_of(self, obj: int) -> list[memoryview]:
        """The samples of object ``obj`` (one GET unless it is the object read last)."""
        if self._cached is None or self._cached[0] != obj:
            self._cached = (obj, unpack_samples(self.client().get(self.names[obj])))
            self.gets += 1
        return self._cached[1]

    def __getitem__(self, index: int) -> Any:
        obj, pos = self.locate(index)
        sample = bytes(self.samples_of(obj)[pos])
        return self.transform(sample) if self.transform is not None else sample

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_cached"] = None
        return state

    def __repr__(self) -> str:
        return (f"CompoundDataset(run {self.run_id}, prefix {self.prefix!r}, {self.total} samples in "
                f"{len(self.names)} objects)")


class CompoundSampler:
    """Sample indices object by object: the objects in a shuffled order, and the samples of
    each object (shuffled among themselves) one after another, so a ``DataLoader`` batch of a
    multiple of the packing is whole objects and its worker reads each with one GET. Each
    epoch (each ``iter``) draws a new order from ``seed``; ``shuffle=False`` keeps the stored
    order. Pass it as ``DataLoader(ds, sampler=CompoundSampler(ds), batch_size=16)``."""

    def __init__(self, dataset: CompoundDataset, *, shuffle: bool = True, seed: int = 0) -> None:
        self.starts, self.counts = list(dataset.starts), list(dataset.counts)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def __len__(self) -> int:
        return sum(self.counts)

    def __iter__(self) -> Iterator[int]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        order = list(range(len(self.counts)))
        if self.shuffle:
            rng.shuffle(order)
        for obj in order:
            within = list(range(self.counts[obj]))
            if self.shuffle:
                rng.shuffle(within)
            for pos in within:
                yield self.starts[obj] + pos
