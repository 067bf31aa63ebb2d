"""The daemon's side of cache functions (``_burst``): it asks the router per chunk
request of a GET (``Collector._issue``) with the pool's live loads, gives the
request to a cache function the COS copy to load from, drops a cache function
that failed, and deletes a freed version's copies; a version with many readers
(``cache_prefetch_readers``) has its copies loaded as soon as COS holds it
(``prefetch``: a GET that loads and answers no bytes). Only versions COS holds are
routed (a cache function loads from COS), and only chunks of at least
``cache_min_chunk`` bytes: a queue of small, latency-bound requests drains faster than a
cache function loads from COS.

A freed version's DEL goes on the cache function's small connection, its loads on the large
one, so the DEL can reach the function while a load is still reading COS (and delete
nothing); a load that ends after its version was freed is therefore deleted again when its
reply arrives (``_loaded_late``), as recovery does with a chunk that lands after a free."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..protocol import Frame, Op, Status
from ._burst import BurstConfig, BurstRouter
from ._objects import ObjectVersion, chunk_key

if TYPE_CHECKING:
    from ._config import DaemonConfig
    from ._functions import FunctionHandle
    from ._gc_io import ReadNotes

__all__ = ["CacheFunctions", "CacheHost"]

Reply = Callable[[Frame | None, socket.socket | None], None]


class CacheHost(Protocol):
    """What the cache functions use of the daemon: its config and COS (whether there are
    any), the function connections (their loads; ``_handle`` starts one), the counters, and
    the chunks GETs read (``reads``, for the GC window)."""

    @property
    def config(self) -> DaemonConfig: ...

    @property
    def cos(self) -> Any: ...

    @property
    def handles(self) -> Sequence[FunctionHandle]: ...

    @property
    def reads(self) -> ReadNotes: ...

    def count(self, name: str, n: int = 1) -> None: ...

    def _handle(self, index: int) -> FunctionHandle: ...


def _cos_copy(obj: ObjectVersion, s: int, i: int) -> dict[str, Any]:
    """A cache function's GET meta: where chunk ``i`` of stripe ``s`` sits in COS, its length and CRC."""
    st = obj.stripes[s]
    return dict(zip(("src", "off"), obj.cos_range(s, i)), len=st.cl, crc=st.crcs[i])


class CacheFunctions:
    def __init__(self, daemon: CacheHost) -> None:
        c = daemon.config
        self.daemon = daemon
        self.on = c.cache_copies > 0 and daemon.cos is not None
        self.router = BurstRouter(BurstConfig(depth=max(1, c.cache_queue_depth), copies=c.cache_copies))

    def _load(self, fn: int) -> int:
        hs = self.daemon.handles
        return hs[fn].inflight + len(hs[fn].backlog) if fn < len(hs) else 0

    def _warm(self, fn: int) -> bool:
        hs = self.daemon.handles
        return fn < len(hs) and hs[fn].state == "active"

    def route(self, obj: ObjectVersion, s: int, i: int, fn: int, cb: Reply
              ) -> tuple[FunctionHandle, dict[str, Any] | None, Reply]:
        """(the function to ask for chunk ``i`` of stripe ``s``, the GET's meta, its callback)."""
        d = self.daemon
        st = obj.stripes[s]
        if not self.on or not obj.uploaded or not obj.cos_key or st.cl < d.config.cache_min_chunk:
            return d.handles[fn], None, cb
        cid = (obj.key, obj.version, s, i)
        holders = frozenset(pl[0] for pl in st.places if pl is not None)
        router = self.router
        to = router.route(cid, fn, self._load, holders, range(d.config.max_functions), self._warm)
        if to == fn:
            def direct(f: Frame | None, sock: socket.socket | None) -> None:
                router.done(cid)
                cb(f, sock)
            return d.handles[fn], None, direct
        d.count("cache_gets")
        d.reads.note(fn, chunk_key(obj.key, obj.version, s, i))  # read where it lives (the GC window's marks)

        def reply(f: Frame | None, sock: socket.socket | None) -> None:
            router.done(cid, to)
            if f is None or f.status != Status.OK:
                router.dropped(cid, to)
            elif f.b == 1:
                d.count("cache_loads")  # this GET's chunk came from COS into the cache function
                self._loaded_late(obj, s, i, to)
            cb(f, sock)

        return d._handle(to), _cos_copy(obj, s, i), reply

    def wants(self, obj: ObjectVersion) -> bool:
        """Whether ``obj`` has readers enough (``cache_prefetch_readers``) for its copies to be
        loaded ahead of them, and chunks large enough to be routed."""
        c = self.daemon.config
        return self.on and 0 < c.cache_prefetch_readers <= obj.readers and \
            any(st.cl >= c.cache_min_chunk for st in obj.stripes)

    def prefetch(self, objs: list[ObjectVersion]) -> None:
        """``objs`` reached COS: load copies of the data chunks of each that has readers enough
        (``wants``) into cache functions, before its readers' GETs."""
        d = self.daemon
        for obj in objs:
            if not self.wants(obj) or obj.state != "ready" or not obj.cos_key:
                continue
            for s, st in enumerate(obj.stripes):
                if st.cl < d.config.cache_min_chunk:
                    continue
                holders = frozenset(pl[0] for pl in st.places if pl is not None)
                for i, place in enumerate(st.places[:st.d]):  # the chunks a GET asks for first
                    if place is None:
                        continue
                    cid = (obj.key, obj.version, s, i)
                    for fn in self.router.provision(cid, place[0], obj.readers, self._load, holders,
                                                    range(d.config.max_functions), self._warm):
                        d.count("cache_prefetches")
                        meta = {**_cos_copy(obj, s, i), "prefetch": True}
                        d._handle(fn).request(Op.GET, chunk_key(obj.key, obj.version, s, i), self._loaded(obj, cid, fn),
                                              large=st.cl >= d.config.large_threshold, meta=meta)
            if obj.state == "freed":  # freed meanwhile, its copies perhaps forgotten before these opened
                self.forget(obj)

    def _loaded(self, obj: ObjectVersion, cid: tuple[str, int, int, int], fn: int) -> Reply:
        """The reply to a prefetch: a cache function that could not load it is dropped."""
        def reply(f: Frame | None, sock: socket.socket | None) -> None:
            if f is None or f.status != Status.OK:
                self.router.dropped(cid, fn)
            elif f.b == 1:
                self.daemon.count("cache_loads")
                self._loaded_late(obj, cid[2], cid[3], fn)
        return reply

    def _loaded_late(self, obj: ObjectVersion, s: int, i: int, fn: int) -> None:
        """Cache function ``fn`` loaded chunk ``i`` of stripe ``s``: if ``obj`` was freed by now,
        its DEL may have come first (see the module's doc), so the copy is deleted again. A
        free after this check sends its DEL after this reply, so after the load."""
        if obj.state == "freed":
            self.daemon.count("cache_loads_freed")
            self.daemon._handle(fn).delete([chunk_key(obj.key, obj.version, s, i)])

    def forget(self, obj: ObjectVersion) -> None:
        for fn, keys in self.router.forget(obj.key, obj.version).items():
            self.daemon.handles[fn].delete(keys)
