"""``sdk.Client``: one run's view of a funcsion stack, for drivers, scripts and tasks.

A put is three steps: ``begin_put`` at the metadata server (check the writer,
allocate), the bytes to the daemon (``StoreClient``: erasure-coded chunks in
storage-function memory plus the persistent buffer), ``finish_put`` (the object
becomes readable; the writer's last declared output commits its reads). A get
records the read at the metadata server, then reads the bytes (first d chunks).
Stored bytes start with one byte naming the codec, so readers decode what
writers chose. Store keys are ``<run_id>/<object>``.

Tasks use it through ``sdk.task``; drivers build one with ``Client(...)`` and
``start_run``. Imports no networkx, torch or server code (it runs in Lambdas).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from funcsion_rpc.client import MetadataClient, PutRequest
from storage_functions.exceptions import StorageError

from ._codecs import CODECS, CodecError, decode, encode
from ._store_client import StoreClient
from .exceptions import StoreFailure

__all__ = ["Client", "Endpoints", "AlreadyCommitted", "parse_addr"]

_CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
_CODEC_NAMES = {i: name for name, i in _CODEC_IDS.items()}


class AlreadyCommitted(Exception):
    """Internal: this task committed in an earlier attempt; the decorator ends the attempt."""


def parse_addr(addr: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(addr, tuple):
        return addr
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host or "127.0.0.1", int(port)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where a stack listens and the tokens of its control plane (``sdk.local.Stack.endpoints``)."""

    metadata: str
    daemon: str
    store_token: str
    admin_token: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"metadata": self.metadata, "daemon": self.daemon, "store_token": self.store_token}


def _checksum(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


class Client:
    """Put and get the objects of one run (``run_id`` + its ``token``) as ``function``
    (``""``: the client/driver, which may write workflow inputs)."""

    def __init__(self, endpoints: Endpoints, *, run_id: str = "", token: str = "", function: str = "",
                 metadata: MetadataClient | None = None, store: StoreClient | None = None) -> None:
        self.endpoints = endpoints
        self.run_id, self.token, self.function = run_id, token, function
        host, port = parse_addr(endpoints.metadata)
        self._md = metadata or MetadataClient(host, port, token=token, admin_token=endpoints.admin_token)
        self._store = store or StoreClient(parse_addr(endpoints.daemon), endpoints.store_token)
        self._owns = metadata is None, store is None

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        if self._owns[0]:
            self._md.close()
        if self._owns[1]:
            self._store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bind(self, *, run_id: str | None = None, token: str | None = None, function: str | None = None) -> Client:
        """The same connections, seen as another run or function."""
        md = self._md.for_run(token) if token is not None and token != self.token else self._md
        c = Client(self.endpoints, run_id=self.run_id if run_id is None else run_id,
                   token=self.token if token is None else token,
                   function=self.function if function is None else function, metadata=md, store=self._store)
        c._owns = (md is not self._md, False)  # a run-scoped metadata client is the bound client's own
        return c

    @property
    def metadata(self) -> MetadataClient:
        return self._md

    # -- driver calls (admin token) -----------------------------------------------------
    def register_workflow(self, wds_json: str, params: Mapping[str, int] | None = None, source: str = "") -> str:
        return str(self._md.register_workflow(wds_json, dict(params or {}), source).key)

    def start_run(self, workflow_key: str, *, policy: str = "funcstore", ttl_s: float = 0) -> Client:
        info = self._md.start_run(workflow_key, policy, int(ttl_s * 1000))
        return self.bind(run_id=info.run_id, token=info.token, function="")

    def end_run(self, outcome: str = "succeeded") -> dict[str, Any]:
        return self._md.end_run(self.run_id, outcome)

    # -- data -------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    @staticmethod
    def _frame(value: Any, codec: str | None) -> bytes:
        payload, name = encode(value, codec)
        return bytes((_CODEC_IDS[name],)) + payload

    @staticmethod
    def _unframe(data: bytes | bytearray) -> Any:
        if not data:
            raise CodecError("stored object has no codec byte (it was not written by funcsion)")
        name = _CODEC_NAMES.get(data[0])
        if name is None:
            raise CodecError(f"stored object has unknown codec id {data[0]}")
        return decode(memoryview(data)[1:], name)

    def _store_call(self, what: str, name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except StorageError as exc:
            raise StoreFailure(f"{what} of {name!r} in run {self.run_id} failed in the store: {exc}") from exc

    def put(self, name: str, value: Any, *, codec: str | None = None, persist: bool = False) -> bool:
        """Write one object; returns True when this write committed the function's reads."""
        return self.put_many({name: value}, codec=codec, persist=persist)

    def put_many(self, values: Mapping[str, Any], *, codec: str | None = None, persist: bool = False) -> bool:
        """Write several objects with two batched metadata calls; the data goes in between, in order."""
        frames = {n: self._frame(v, codec) for n, v in values.items()}
        reqs = [PutRequest(n, len(f), _checksum(f), persist) for n, f in frames.items()]
        grants = self._md.begin_put_batch(self.run_id, self.function, reqs)
        for g in grants:
            if g.already_committed:
                raise AlreadyCommitted(self.function)
        for g in grants:
            if g.freed:
                continue  # a retry of a write whose object was already read and freed
            if g.existing and self._md.lookup(self.run_id, g.object_name).state == "readable":
                continue  # the same write reached the store in an earlier attempt
            self._store_call("put", g.object_name, self._store.put, self._key(g.object_name), frames[g.object_name])
        results = self._md.finish_put_batch(self.run_id, self.function, [g.object_name for g in grants])
        return any(r.committed for r in results)

    def get(self, name: str, *, delete: bool = False) -> Any:
        """Read one object (recorded once per function for deferred commit); ``delete=True``
        frees it after this read (Pocket's delete-after-read, for ad-hoc use)."""
        r = self._md.get(self.run_id, self.function, name)
        if r.already_committed:
            raise AlreadyCommitted(self.function)
        value = self._read(name)
        if delete:
            self._md.delete(self.run_id, name)
        return value

    def get_many(self, names: Iterable[str]) -> dict[str, Any]:
        names = list(names)
        results = self._md.get_batch(self.run_id, self.function, names)
        if any(r.already_committed for r in results):
            raise AlreadyCommitted(self.function)
        return {n: self._read(n) for n in names}

    def _read(self, name: str) -> Any:
        data = self._store_call("get", name, self._store.get_buffer, self._key(name))
        return self._unframe(data)

    def read_raw(self, name: str) -> bytes:
        """An object's encoded payload (no codec byte), without recording a read: for copying
        workflow outputs to COS after the run."""
        data = self._store_call("get", name, self._store.get_buffer, self._key(name))
        return bytes(memoryview(data)[1:])

    def commit(self) -> Any:
        """Commit this function's reads (for functions that declare no outputs)."""
        return self._md.commit(self.run_id, self.function)

    def delete(self, name: str) -> None:
        self._md.delete(self.run_id, name)

    def lookup(self, name: str) -> Any:
        return self._md.lookup(self.run_id, name)

    def list(self, prefix: str = "") -> list[Any]:
        return list(self._md.list_objects(self.run_id, prefix))

