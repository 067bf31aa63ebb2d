"""The storage daemons a client talks to: one pooled ``StoreClient`` per daemon of the
deployment, and which one each request goes to (issue 31 item 1).

``Endpoints.daemon`` names them: one ``HOST:PORT`` (the deployment's only daemon,
id ``""``, as always), or ``ID=HOST:PORT`` entries joined by ``;`` in order
(``daemon-0=127.0.0.1:7001;daemon-1=127.0.0.1:7002``; bare ``HOST:PORT``
entries among several are ``daemon-I`` by position). ``parse_daemons`` reads
that; ``DaemonStores`` holds the clients, dialled lazily:

- ``of(daemon)``: the daemon a placement (a grant, a lookup, a ``read_batch``
  column) names; ``""`` (a placement of a one-daemon deployment) is the first.
  A daemon the endpoints do not list is refused (``StoreFailure``), never
  dialled: a grant cannot send the client to an arbitrary host;
- ``for_key(key)``: the client's own COS objects (the COS tier, persisted
  copies, workflow outputs), which no placement names, go through the daemon
  that wins the key's rendezvous hash (``funcsion_rpc.routing.daemon_of``), so
  every writer and reader of one key agrees on it (its lifetime record lives
  there);
- ``each()``: every daemon (a free of keys whose daemon is not known, the
  report's per-daemon counters).

Imports only the stdlib, ``funcsion_rpc.routing`` and the store client (a task
Lambda carries it). Not covered: what a request does (``_store_client``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from funcsion_rpc import routing

from ._store_client import StoreClient
from .exceptions import StoreFailure

__all__ = ["DaemonStores", "parse_daemons"]


def parse_daemons(spec: str) -> tuple[tuple[str, str], ...]:
    """``(id, HOST:PORT)`` of each daemon of ``Endpoints.daemon``, in order; one bare address
    is the only daemon, id ``""``. Raises ``ValueError`` naming a malformed entry."""
    entries = [e.strip() for e in spec.split(";") if e.strip()]
    if len(entries) <= 1 and not any("=" in e for e in entries):
        return ((("", entries[0]),) if entries else (("", spec),))
    out: list[tuple[str, str]] = []
    for i, e in enumerate(entries):
        ident, sep, addr = e.rpartition("=")
        ident = ident.strip() if sep else f"daemon-{i}"
        if not ident or not addr.strip() or ":" not in addr:
            raise ValueError(f"daemon entry {e!r} of {spec!r} is not ID=HOST:PORT (several daemons: "
                             "'daemon-0=H:P;daemon-1=H:P')")
        out.append((ident, addr.strip()))
    ids = [i for i, _ in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"daemon ids repeat in {spec!r}: each daemon of a deployment has its own id")
    return tuple(out)


class DaemonStores:
    """One ``StoreClient`` per daemon (``make(address)`` builds one), in the endpoints' order;
    ``first`` is the first daemon's (given: ``first`` is used for it, not closed by ``close``)."""

    def __init__(self, daemons: tuple[tuple[str, str], ...], make: Callable[[str], StoreClient],
                 first: StoreClient | None = None) -> None:
        if not daemons:
            raise ValueError("a deployment has at least one daemon")
        self.daemons = daemons
        self.ids = tuple(i for i, _ in daemons)
        self._addr = dict(daemons)
        self._make = make
        self._lock = threading.Lock()
        self._given = first
        self._clients: dict[str, StoreClient] = {}
        self.first = first if first is not None else self._client(self.ids[0])

    def _client(self, ident: str) -> StoreClient:
        with self._lock:
            c = self._clients.get(ident)
            if c is None:
                c = self._clients[ident] = (self._given if self._given is not None and ident == self.ids[0]
                                            else self._make(self._addr[ident]))
            return c

    def of(self, daemon: str | None) -> StoreClient:
        """The client of the daemon a placement names (``""``/None: the first)."""
        if not daemon or daemon == self.ids[0]:
            return self.first
        if daemon not in self._addr:
            raise StoreFailure(f"the metadata server placed the object on daemon {daemon!r}, which this client's "
                               f"endpoints do not list (they list {', '.join(repr(i) for i in self.ids)}): "
                               "give the client the deployment's whole daemon list (Endpoints.daemon, --stack "
                               "daemon=A;B)")
        return self._client(daemon)

    def for_key(self, key: str) -> StoreClient:
        """The daemon the client's own COS object ``key`` goes through (its rendezvous winner)."""
        if len(self.ids) == 1:
            return self.first
        return self._client(routing.daemon_of(key, self.ids))

    def each(self) -> Iterator[tuple[str, StoreClient]]:
        """Every daemon's (id, client), in order."""
        for ident in self.ids:
            yield ident, self.of(ident)

    def __len__(self) -> int:
        return len(self.ids)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, {}
        for c in clients.values():
            if c is not self._given:
                c.close()
