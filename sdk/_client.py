"""``sdk.Client``: one run's view of a funcsion stack, for drivers, scripts and tasks.

A put is three steps: ``begin_put`` at the metadata server (check the writer,
allocate), the bytes to the daemon (``StoreClient``: erasure-coded chunks in
storage-function memory plus the persistent buffer) or, when the server chose
the COS tier, to COS through the daemon, then ``finish_put`` (the object becomes
readable; the writer's last declared output commits its reads). Overflow never
fails a put: when the daemon has no room where the object was placed
(``NoRoom``), the client tells the server (``fallback_to_cos``) and writes the
object to the COS tier instead. A get records
the read at the metadata server, then reads the bytes (first d chunks).
Stored bytes start with one byte naming the codec, so readers decode what
writers chose. Store keys are ``<run_id>/<object>``; COS keys are in ``_cos_io``
(a task's run-scoped store token reaches only its run's of both).

Pocket's extras (Klimovic et al., OSDI'18, Sec. 3.2): ``put(persist=True)``
keeps a copy past the run (``fetch`` reads it, ``delete`` drops it);
``put(adhoc=True)`` writes a key the WDS does not declare, and
``get(delete=True)`` frees such a key once the reader commits; ``start_run``
takes the run-start hints (max concurrency, capacity, latency sensitivity).

Tasks use it through ``sdk.task``; drivers build one with ``Client(...)`` and
``start_run``. Imports no networkx, torch or server code (it runs in Lambdas).
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from funcsion_rpc import routing
from funcsion_rpc.client import MetadataClient, PutRequest
from funcsion_rpc.errors import MetadataError, UnknownObject
from funcsion_rpc.reads import ALREADY_COMMITTED, FREED_BY_READ, LAST_READ, TIER_COS, TIER_MEMORY
from storage_functions.auth import RUN_TOKEN_PREFIX, mint_run_token
from storage_functions.exceptions import COSNotFound, NoRoom, StorageError

from ._codecs import CODECS, CodecError, decode, encode
from ._cos_io import cos_location, output_key, persist_key, tier_key
from ._persist import Persist, persist_lifetime
from ._erasure import DEFAULT_D, DEFAULT_P, DEFAULT_THRESHOLD, Codec
from ._daemons import DaemonStores, parse_daemons
from ._store_client import PUT_HINTS, StoreClient
from ._values import Upload, ValueStream, is_file_like
from .exceptions import StoreFailure

__all__ = ["Client", "Endpoints", "AlreadyCommitted", "parse_addr", "DEFAULT_FAILOVER_S"]

#: How long an SDK call waits for a lost metadata shard or daemon to be replaced (config
#: ``metadata_failover_s``, ``daemon_failover_s``): a replacement process's start and restore.
DEFAULT_FAILOVER_S = 120.0

_CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
_CODEC_NAMES = {i: name for name, i in _CODEC_IDS.items()}
_BYTES_PREFIX = bytes((_CODEC_IDS["bytes"],))


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

    #: the metadata server's HOST:PORT; several shards: their addresses in shard order joined
    #: by ``;`` (``metadata_shards``)
    metadata: str
    #: the daemon's HOST:PORT; several daemons: ``ID=HOST:PORT`` entries in order joined by ``;``
    #: (``daemons``; a grant names the daemon by its id)
    daemon: str
    store_token: str
    admin_token: str = ""
    cos_url: str = ""
    #: the stack's block size and erasure code (0: the defaults, 1 MiB and 10+2): the client
    #: codes an object exactly when the metadata server's allocator does (size > one block)
    block_size: int = 0
    ec_data: int = 0
    ec_parity: int = 0
    #: the deployment CA's PEM text: every connection is TLS, each server verified against it
    #: for the host part of its address ("": plaintext)
    tls_ca: str = ""
    #: how long a call waits for an unreachable metadata shard / daemon to be replaced
    #: (config ``metadata_failover_s`` / ``daemon_failover_s``; the tasks' events carry them)
    metadata_failover_s: float = DEFAULT_FAILOVER_S
    daemon_failover_s: float = DEFAULT_FAILOVER_S

    def codec(self) -> Codec:
        """The codec for this stack's shape."""
        return Codec(self.ec_data or DEFAULT_D, self.ec_parity or DEFAULT_P,
                     threshold=self.block_size or DEFAULT_THRESHOLD)

    @property
    def metadata_shards(self) -> tuple[str, ...]:
        """The metadata servers' addresses in shard order (``metadata`` holds them joined by ``;``;
        one address: the only shard). Every run's calls go to ``routing.shard_of_run`` of them."""
        return tuple(a.strip() for a in self.metadata.split(";") if a.strip()) or (self.metadata,)

    @property
    def daemons(self) -> tuple[tuple[str, str], ...]:
        """``(id, HOST:PORT)`` of each daemon, in order (one address: the only daemon, id ``""``)."""
        return parse_daemons(self.daemon)

    def stack_alive(self) -> bool:
        """Whether any of the stack's servers (a metadata shard, the daemon) takes connections:
        while one does, a server that went away is being replaced and worth waiting for
        (``StoreClient``'s and ``MetadataClient``'s ``alive``); once none does, the whole stack
        is gone and nothing will come back."""
        for addr in (*self.metadata_shards, *([self.daemon] if self.daemon else [])):
            try:
                socket.create_connection(parse_addr(addr), timeout=1.0).close()
            except OSError:
                continue
            return True
        return False

    def for_run(self, run_id: str) -> Endpoints:
        """What a task of ``run_id`` gets: a store token for that run's keys only
        (``storage_functions.auth``) and no admin token."""
        token = self.store_token
        if not token.startswith(RUN_TOKEN_PREFIX):
            token = mint_run_token(token, run_id)
        return replace(self, store_token=token, admin_token="")

    def to_dict(self) -> dict[str, Any]:
        """What a task's event carries (never the admin token)."""
        d: dict[str, Any] = {"metadata": self.metadata, "daemon": self.daemon, "store_token": self.store_token}
        if self.cos_url:
            d["cos_url"] = self.cos_url
        if self.tls_ca:
            d["tls_ca"] = self.tls_ca
        for k, default in (("block_size", DEFAULT_THRESHOLD), ("ec_data", DEFAULT_D), ("ec_parity", DEFAULT_P),
                           ("metadata_failover_s", DEFAULT_FAILOVER_S), ("daemon_failover_s", DEFAULT_FAILOVER_S)):
            if getattr(self, k) not in (0, default):      # the defaults go without saying
                d[k] = getattr(self, k)
        return d


def _hints(grant: Any) -> dict[str, int]:
    """What a put grant says of its object for the daemon (``PUT_HINTS``); a server that
    predates a hint leaves it unset."""
    return {k: v for k in PUT_HINTS if (v := getattr(grant, k, None)) is not None}


def _checksum(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


class Client:
    """Put and get the objects of one run (``run_id`` + its ``token``) as ``function``
    (``""``: the client/driver, which may write workflow inputs)."""

    def __init__(self, endpoints: Endpoints, *, run_id: str = "", token: str = "", function: str = "",
                 metadata: MetadataClient | None = None, store: StoreClient | None = None,
                 shards: Sequence[MetadataClient] | None = None, stores: DaemonStores | None = None) -> None:
        self.endpoints = endpoints
        self.run_id, self.token, self.function = run_id, token, function
        addrs = endpoints.metadata_shards
        owns_shards = shards is None and len(addrs) > 1 and metadata is None
        if shards is None:          # one client per shard, in the shards' order (one: the run's own)
            shards = [MetadataClient(*parse_addr(a), admin_token=endpoints.admin_token, tls_ca=endpoints.tls_ca,
                                     failover_s=endpoints.metadata_failover_s, alive=endpoints.stack_alive)
                      for a in addrs] if owns_shards else []
        self._shards: tuple[MetadataClient, ...] = tuple(shards)
        if metadata is None and self._shards:    # several shards: the run's owner (none yet: the first)
            base = self._shards[routing.shard_of_run(run_id, len(self._shards)) if run_id else 0]
            metadata = base.for_run(token) if token else base
        self._md = metadata or MetadataClient(*parse_addr(addrs[0]), token=token,
                                              admin_token=endpoints.admin_token, tls_ca=endpoints.tls_ca,
                                              failover_s=endpoints.metadata_failover_s, alive=endpoints.stack_alive)
        owns_stores = store is None and stores is None
        if stores is None:     # one pooled client per daemon, each dialled when first used
            stores = DaemonStores(endpoints.daemons, lambda addr: StoreClient(
                parse_addr(addr), endpoints.store_token, codec=endpoints.codec(), alive=endpoints.stack_alive,
                tls_ca=endpoints.tls_ca, reconnect_s=endpoints.daemon_failover_s), first=store)
        self._stores = stores
        self._store = stores.first       # the first daemon's (the only one's)
        self._owns = metadata is None and not self._shards, owns_stores
        self._owns_shards = owns_shards
        self.plan: dict[str, Any] = {}

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        if self._owns[0]:
            self._md.close()
        if self._owns_shards:
            for md in self._shards:
                md.close()
        if self._owns[1]:
            self._stores.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bind(self, *, run_id: str | None = None, token: str | None = None, function: str | None = None) -> Client:
        """The same connections, seen as another run or function (with several metadata shards,
        another run's calls go to the shard that owns it: ``funcsion_rpc.routing.shard_of_run``)."""
        if len(self._shards) > 1 and run_id is not None and run_id != self.run_id:
            base = self._shards[routing.shard_of_run(run_id, len(self._shards))]
            tok = self.token if token is None else token
            md = base.for_run(tok) if tok else base
        else:
            md = self._md.for_run(token) if token is not None and token != self.token else self._md
        c = Client(self.endpoints, run_id=self.run_id if run_id is None else run_id,
                   token=self.token if token is None else token,
                   function=self.function if function is None else function, metadata=md, store=self._store,
                   shards=self._shards, stores=self._stores)
        # a run-scoped metadata client is the bound client's own (a view: closing it closes no socket)
        c._owns = (md is not self._md and md not in self._shards, False)
        return c

    @property
    def metadata(self) -> MetadataClient:
        return self._md

    @property
    def shard_clients(self) -> tuple[MetadataClient, ...]:
        """The metadata client of every shard, in shard order (one shard: ``metadata``)."""
        return self._shards or (self._md,)

    # -- driver calls (admin token) -----------------------------------------------------
    def register_workflow(self, wds_json: str, params: Mapping[str, int] | None = None, source: str = "") -> str:
        """Register a workflow (with every metadata shard: a run of it may start on any)."""
        keys = {str(md.register_workflow(wds_json, dict(params or {}), source).key) for md in self._shards or [self._md]}
        if len(keys) != 1:
            raise StoreFailure(f"the metadata shards {self.endpoints.metadata} registered the workflow under "
                               f"different keys {sorted(keys)}: do they run the same funcsion version?")
        return keys.pop()

    def start_run(self, workflow_key: str, *, policy: str = "funcstore", ttl_s: float = 0,
                  max_concurrency: int = 0, capacity_bytes: int = 0, latency_sensitive: bool = True,
                  input_bytes: int = 0) -> Client:
        """Start a run and return a client bound to it. The hints (Pocket's ``register_job``)
        rightsize the run: ``max_concurrency`` tasks at once, at most ``capacity_bytes`` in
        memory (more spills to COS), ``latency_sensitive=False`` keeps its data in COS only.
        What they decided is in the returned client's ``plan``. ``input_bytes``: the bytes of
        the run's inputs (``input_bytes(values)``; 0: unknown), which a lifetime model that
        takes the input size predicts with."""
        md = self._start_shard() if len(self._shards) > 1 else self._md
        info = md.start_run(workflow_key, policy, int(ttl_s * 1000), max_concurrency=max_concurrency,
                            capacity_bytes=capacity_bytes, latency_sensitive=latency_sensitive,
                            input_bytes=input_bytes)
        run = self.bind(run_id=info.run_id, token=info.token, function="")
        run.plan = json.loads(info.plan_json) if info.plan_json else {}
        return run

    def _start_shard(self) -> MetadataClient:
        """Where a new run starts with several shards: each mints only run ids it owns, so any
        shard may; the least loaded one that answers (fewest running runs, then least journaled
        work, then the first) takes it, so a shard that is down starts none."""
        best: tuple[tuple[int, int, int], MetadataClient] | None = None
        for i, md in enumerate(self._shards):
            try:
                h = md.health(failover=False)     # a shard that is down starts no run
            except MetadataError:         # unreachable: leave it out
                continue
            load = (int(h.running_runs), int(h.journal_seq), i)
            if best is None or load < best[0]:
                best = load, md
        return self._shards[0] if best is None else best[1]   # none answers: the first says why

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

    def _store_call(self, what: str, name: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except StorageError as exc:
            raise StoreFailure(f"{what} of {name!r} in run {self.run_id} failed in the store: {exc}") from exc

    def put(self, name: str, value: Any, *, codec: str | None = None, persist: Persist = False,
            adhoc: bool = False) -> bool:
        """Write one object; returns True when this write committed the function's reads.
        ``persist``: keep a copy past the run, ``True`` for the store's default lifetime
        (``persist_ttl_s``; 0: until ``delete``), a ``timedelta`` or seconds for that long after
        the run ends (Pocket's PERSIST timeout; the daemon's sweep deletes it then);
        ``adhoc``: a key the WDS does not declare."""
        return self.put_many({name: value}, codec=codec, persist=persist, adhoc=adhoc)

    def put_many(self, values: Mapping[str, Any], *, codec: str | None = None, persist: Persist = False,
                 adhoc: bool = False) -> bool:
        """Write several objects with two batched metadata calls (also when retried); the data goes
        in between: values in memory in one pipelined store call (one round trip each way), file-like
        ones streamed each on its own.
        A file-like value (``open(path, "rb")``, ``io.BytesIO``) is stored as its bytes and streamed
        one stripe at a time instead of being read into memory."""
        frames: dict[str, bytes | Upload] = {}
        try:
            for n, v in values.items():
                frames[n] = self._upload(n, v, codec) if is_file_like(v) else self._frame(v, codec)
            return self._put_frames(frames, persist_lifetime(persist), adhoc)
        finally:
            for f in frames.values():
                if isinstance(f, Upload):
                    f.close()

    def _upload(self, name: str, value: Any, codec: str | None) -> Upload:
        if codec not in (None, "bytes"):
            raise CodecError(f"put of {name!r}: a file-like value is stored as its bytes; drop codec={codec!r}")
        return Upload(name, value, _BYTES_PREFIX)

    def _put_frames(self, frames: Mapping[str, bytes | Upload], keep: float | None | bool, adhoc: bool) -> bool:
        """``keep``: False (no copy), None (a copy with the store's default lifetime) or seconds."""
        persist = keep is not False
        lifetime = {} if keep is None or keep is False else {"keep_s": float(keep)}
        sizes = {n: f.size + 1 if isinstance(f, Upload) else len(f) for n, f in frames.items()}
        reqs = [PutRequest(n, sizes[n], f.checksum if isinstance(f, Upload) else _checksum(f), persist, adhoc,
                           self._store.codec.chunk_bytes(sizes[n]) if self._store.codec.coded(sizes[n]) else None)
                for n, f in frames.items()]
        grants = self._md.begin_put_batch(self.run_id, self.function, reqs)
        for g in grants:
            if g.already_committed:
                raise AlreadyCommitted(self.function)
        batch: list[tuple[str, bytes, Any, str]] = []  # in-memory values: one pipelined call per daemon
        hints: dict[str, dict[str, int]] = {}  # store key -> what its grant says of it, passed with the PUT
        for g in grants:
            if g.freed:
                continue  # a retry of a write whose object was already read and freed
            if g.existing and (g.readable if g.readable is not None  # None: a server that does not say
                               else self._md.lookup(self.run_id, g.object_name).state == "readable"):
                continue  # the same write reached the store in an earlier attempt
            frame, name = frames[g.object_name], g.object_name
            hint = _hints(g)
            if hint:
                hints[self._key(name)] = hint
            cos_tier = g.placement is not None and g.placement.tier == "cos"
            daemon = _daemon_of(g.placement)
            if not cos_tier and not isinstance(frame, Upload):
                batch.append((name, frame, alloc_of(g.placement), daemon))
                continue
            # the COS paths take bytes: a file-like value is read into memory once, for both
            data = frame.read_all() if isinstance(frame, Upload) and (persist or cos_tier) else frame
            if cos_tier:
                self._cos_put("put", name, tier_key(self.run_id, name), data)
            else:
                assert isinstance(frame, Upload)
                try:
                    self._stores.of(daemon).put_stream(self._key(name), frame.read_from_start(), frame.size,
                                           prefix=frame.prefix, alloc=alloc_of(g.placement),
                                           hints=hint, rewind=frame.read_from_start)
                except NoRoom as exc:  # overflow never fails a put: the COS tier takes it
                    self._to_cos(name, frame.read_all(), exc)
                except StorageError as exc:
                    raise StoreFailure(f"put of {name!r} in run {self.run_id} failed in the store: {exc}") from exc
            if persist:
                self._cos_put("persist", name, persist_key(self.run_id, name), data, meta=lifetime)
        for daemon, items in _by_daemon(batch).items():
            try:
                stored = self._stores.of(daemon).put_many([(self._key(n), f, alloc) for n, f, alloc, _ in items],
                                                          hints=hints)
            except StorageError as exc:
                raise StoreFailure(f"put of {', '.join(repr(n) for n, *_ in items)} in run {self.run_id} failed "
                                   f"in the store: {exc}") from exc
            for (name, frame, _, _), res in zip(items, stored):
                if isinstance(res, NoRoom):  # overflow never fails a put: the COS tier takes it
                    self._to_cos(name, frame, res)
                elif isinstance(res, StorageError):
                    raise StoreFailure(f"put of {name!r} in run {self.run_id} failed in the store: {res}") from res
                if persist:
                    self._cos_put("persist", name, persist_key(self.run_id, name), frame, meta=lifetime)
        results = self._md.finish_put_batch(self.run_id, self.function, [g.object_name for g in grants])
        self._free_keys([self._key(n) for r in results for n in (r.freed or ())])  # this commit freed them
        return any(r.committed for r in results)

    def _to_cos(self, name: str, data: bytes | bytearray, why: NoRoom) -> None:
        """The daemon had no room where ``name`` was placed: tell the metadata server, write COS."""
        self._md.fallback_to_cos(self.run_id, self.function, name, str(why))
        self._cos_put("put", name, tier_key(self.run_id, name), data)

    def _cos_put(self, what: str, name: str, key: str, data: Any, **kw: Any) -> None:
        """One of the SDK's COS objects, through the daemon its key routes to (``DaemonStores.for_key``)."""
        self._cos_call(what, name, self._stores.for_key(key).cos_put, key, data, **kw)

    def get(self, name: str, *, delete: bool = False, stream: bool = False) -> Any:
        """Read one object (recorded once per function for deferred commit). ``delete=True``
        (ad-hoc objects only, Pocket's DELETE flag) frees it once this function commits, or at
        once when the caller is a driver. ``stream=True`` returns a ``ValueStream`` of the
        payload's bytes (not decoded), received one stripe at a time."""
        r = self._md.get(self.run_id, self.function, name, delete)
        if r.already_committed:
            raise AlreadyCommitted(self.function)
        if stream:
            return self._stream(name, r.placement, on_close=lambda: self._free_read([r]))
        value = self._unframe(self._fetch_frame(name, r.placement))
        self._free_read([r])
        return value

    def _free_read(self, results: Iterable[Any]) -> None:
        """Objects these reads freed (the oracle policy frees at the last declared read) leave
        function memory now that their bytes are here; best effort: the metadata server's drop
        instruction follows after a grace period anyway. Reads answered as an object's last
        (funcstore) release its function memory now (``_read_done``)."""
        results = list(results)
        for r in results:
            if r.freed_by_read and r.placement is not None and r.placement.tier == "memory":
                self._free_keys([self._key(r.object_name)], _daemon_of(r.placement))
        self._read_done([(r.object_name, _daemon_of(r.placement)) for r in results
                         if r.last_read and r.placement is not None and r.placement.tier == "memory"])

    def _read_done(self, names: list[tuple[str, str]]) -> None:
        """This reader has the bytes of ``names`` (object, the daemon holding it), reads the
        metadata server answered as their last declared ones: it releases their function memory
        (``read_done``) and the chunks leave it (the daemon keeps each object's durable copy for a
        re-run reader until the last commit; the control loop's eviction follows anyway, an
        eviction is idempotent). Best effort: if either call fails, the memory goes at the last
        reader's commit."""
        if not names:
            return
        try:
            released = set(self._md.read_done(self.run_id, self.function, [n for n, _ in names]))
        except MetadataError:
            return
        by_daemon: dict[str, list[str]] = {}
        for n, d in names:
            if n in released:
                by_daemon.setdefault(d, []).append(self._key(n))
        for daemon, keys in by_daemon.items():
            try:
                self._stores.of(daemon).evict(keys)
            except (StorageError, StoreFailure):
                pass

    def _free_keys(self, keys: list[str], daemon: str | None = None) -> None:
        """Objects the metadata server freed (a commit's, an oracle's read) leave function
        memory now rather than when the daemon's control loop carries out the drop (which
        follows anyway; a free is idempotent). ``daemon``: the one that holds them (None: not
        known, as for a commit's frees: every daemon is told, one that does not hold a key
        ignores it)."""
        if not keys:
            return
        try:
            targets = [self._stores.of(daemon)] if daemon is not None or len(self._stores) == 1 \
                else [c for _, c in self._stores.each()]
        except StoreFailure:
            return
        for store in targets:
            try:
                store.free(keys)
            except StorageError:
                pass

    def _stream(self, name: str, placement: Any, on_close: Callable[[], None] | None = None) -> ValueStream:
        if placement is not None and placement.tier == "cos":
            frame = self._fetch_frame(name, placement)
            inner: Any = io.BytesIO(memoryview(frame)[1:])
            size, head = len(frame) - 1, frame[:1]
        else:
            inner = self._store_call("get", name, self._stores.of(_daemon_of(placement)).get_stream, self._key(name))
            size = inner.size - 1
            head = self._store_call("get", name, inner.read, 1)
        codec = _CODEC_NAMES.get(head[0]) if head else None
        if codec is None:
            inner.close()
            raise CodecError(f"stored object {name!r} has {'no' if not head else 'an unknown'} codec byte")
        return ValueStream(inner, size, codec, on_close)

    def get_many(self, names: Iterable[str]) -> dict[str, Any]:
        """Read several objects: one batched metadata call (``read_batch``: a byte of tier and
        one of flags per object, no placements), then the data: the objects in function memory
        in one pipelined store call (one round trip each way), those in COS each on its own."""
        names = list(names)
        reads = self._md.read_batch(self.run_id, self.function, names)
        if any(f & ALREADY_COMMITTED for f in reads.flags):
            raise AlreadyCommitted(self.function)
        daemons = list(reads.daemons or ()) or [""] * len(names)    # several daemons: who holds each
        if len(daemons) != len(names):
            raise StoreFailure(f"read_batch of run {self.run_id} named the daemons of {len(daemons)} objects, "
                               f"not of the {len(names)} asked")
        got: dict[str, Any] = {}
        for daemon, items in _by_daemon([(n, None, None, d) for n, tier, d in zip(names, reads.tiers, daemons)
                                         if tier != TIER_COS]).items():
            keys = [n for n, *_ in items]
            try:
                got.update(zip(keys, self._stores.of(daemon).get_many([self._key(n) for n in keys])))
            except StorageError as exc:
                raise StoreFailure(f"get of {len(keys)} objects in run {self.run_id} failed in the store: "
                                   f"{exc}") from exc
        values = {}
        for n, tier in zip(names, reads.tiers):
            data = got[n] if tier != TIER_COS else self._fetch(n, True)
            if isinstance(data, StorageError):
                raise StoreFailure(f"get of {n!r} in run {self.run_id} failed in the store: {data}") from data
            values[n] = self._unframe(data)
        for n, tier, f, d in zip(names, reads.tiers, reads.flags, daemons):
            if f & FREED_BY_READ and tier == TIER_MEMORY:
                self._free_keys([self._key(n)], d)
        self._read_done([(n, d) for n, tier, f, d in zip(names, reads.tiers, reads.flags, daemons)
                         if f & LAST_READ and tier == TIER_MEMORY])
        return values

    def _fetch_frame(self, name: str, placement: Any) -> bytes | bytearray:
        return self._fetch(name, placement is not None and placement.tier == "cos", _daemon_of(placement))

    def _fetch(self, name: str, cos: bool, daemon: str = "") -> bytes | bytearray:
        if cos:
            key = tier_key(self.run_id, name)
            return self._cos_call("get", name, self._stores.for_key(key).cos_get, key)  # type: ignore[no-any-return]
        return self._store_call("get", name, self._stores.of(daemon).get_buffer,  # type: ignore[no-any-return]
                                self._key(name))

    def read_raw(self, name: str) -> bytes:
        """An object's encoded payload (no codec byte), without recording a read: for copying
        workflow outputs to COS after the run."""
        data = self._fetch_frame(name, self._md.lookup(self.run_id, name).placement)
        return bytes(memoryview(data)[1:])

    def save_output(self, name: str) -> str:
        """Copy workflow output ``name`` to COS (``outputs/<run_id>/<name>``, the payload
        only); returns its location."""
        return self.copy_output(name)[0]

    def copy_output(self, name: str) -> tuple[str, str]:
        """``save_output``, returning (location, the codec the value was written with: what
        decodes the copy, which holds the payload only)."""
        frame = self._fetch_frame(name, self._md.lookup(self.run_id, name).placement)
        codec = _CODEC_NAMES.get(frame[0], "bytes") if frame else "bytes"
        key = output_key(self.run_id, name)
        self._cos_put("output copy", name, key, bytes(memoryview(frame)[1:]))
        return cos_location(self.endpoints.cos_url, key), codec

    def persisted_lifetime(self, name: str) -> dict[str, Any] | None:
        """``{"keep_s", "expires_at"}`` of a persisted copy with a lifetime (``expires_at``: epoch
        seconds, None while its run runs), None for one kept until ``delete``."""
        key = persist_key(self.run_id, name)
        doc = json.loads(bytes(self._cos_call("lifetime", name, self._stores.for_key(key).cos_lifetime, key)))
        return doc if isinstance(doc, dict) else None

    def persisted_location(self, name: str) -> str:
        """Where the COS copy of ``put(name, ..., persist=True)`` lives."""
        return cos_location(self.endpoints.cos_url, persist_key(self.run_id, name))

    def fetch(self, name: str) -> Any:
        """A kept object of this run from COS, also after the run ended: the decoded value of a
        ``persist=True`` object, or the payload bytes of a saved workflow output."""
        try:
            key = persist_key(self.run_id, name)
            return self._unframe(self._cos_call("fetch", name, self._stores.for_key(key).cos_get, key,
                                                missing_ok=True))
        except COSNotFound:
            pass
        try:
            key = output_key(self.run_id, name)
            return bytes(self._cos_call("fetch", name, self._stores.for_key(key).cos_get, key, missing_ok=True))
        except COSNotFound:
            raise UnknownObject(f"run {self.run_id} kept no {name!r} in COS: only objects put with persist=True "
                                "and saved workflow outputs outlive a run", run_id=self.run_id,
                                object=name) from None

    def _cos_call(self, what: str, name: str, fn: Any, *args: Any, missing_ok: bool = False, **kw: Any) -> Any:
        """One of the SDK's COS objects, through the daemon (``missing_ok``: let ``COSNotFound`` out)."""
        try:
            return fn(*args, **kw)
        except COSNotFound as exc:
            if missing_ok:
                raise
            raise StoreFailure(f"{what} of {name!r} in run {self.run_id}: not in COS ({exc})") from exc
        except StorageError as exc:
            raise StoreFailure(f"{what} of {name!r} in run {self.run_id} failed in COS: {exc}") from exc

    def commit(self) -> Any:
        """Commit this function's reads (for functions that declare no outputs)."""
        res = self._md.commit(self.run_id, self.function)
        self._free_keys([self._key(n) for n in (res.freed or ())])
        return res

    def delete(self, name: str) -> None:
        """Free an object now; for a persisted object (also after its run) drop its COS copy."""
        persisted = bool(self._md.lookup(self.run_id, name).persist)
        self._md.delete(self.run_id, name)
        if persisted:
            key = persist_key(self.run_id, name)
            self._cos_call("delete", name, self._stores.for_key(key).cos_delete, key)

    def lookup(self, name: str) -> Any:
        return self._md.lookup(self.run_id, name)

    def list(self, prefix: str = "") -> list[Any]:
        return list(self._md.list_objects(self.run_id, prefix))


def _daemon_of(placement: Any) -> str:
    """The id of the daemon a placement names ("": the only daemon, or none: COS tier, empty)."""
    return str(getattr(placement, "daemon", None) or "") if placement is not None else ""


def _by_daemon(items: Sequence[tuple[str, Any, Any, str]]) -> dict[str, list[tuple[str, Any, Any, str]]]:
    """``(name, data, alloc, daemon)`` items grouped by daemon, each group in the items' order."""
    out: dict[str, list[tuple[str, Any, Any, str]]] = {}
    for item in items:
        out.setdefault(item[3], []).append(item)
    return out


def alloc_of(placement: Any) -> list[tuple[str, int, int, int]] | None:
    """The daemon's ``alloc`` for a metadata placement: per chunk, where it starts and
    the bytes reserved for it (a coded chunk's blocks are one contiguous run); None for
    placements with no function memory (COS tier, empty)."""
    if placement is None or placement.tier != "memory" or not placement.extents:
        return None
    chunks: dict[int, list[Any]] = {}
    for e in placement.extents:
        chunks.setdefault(int(e.chunk), []).append(e)
    out = []
    for i in sorted(chunks):
        ext = sorted(chunks[i], key=lambda e: e.block)
        if {e.function_name for e in ext} != {ext[0].function_name} or \
                [e.block for e in ext] != list(range(ext[0].block, ext[0].block + len(ext))):
            raise StoreFailure(f"placement of chunk {i} is not one run of blocks on one function: {ext}")
        out.append((ext[0].function_name, int(ext[0].block), int(ext[0].offset), sum(int(e.length) for e in ext)))
    return out
