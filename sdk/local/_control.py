"""The metadata server as the daemon's instruction source.

``storage_functions.daemon.Follower`` (the daemon's control loop) follows an
``InstructionSource``; storage_functions may not import the metadata server's
client, so this module, above both, adapts a ``funcsion_rpc.MetadataClient``
holding the admin token to it. Used by the embedded stack and by ``funcsion
serve daemon --metadata HOST:PORT``. Covers the translation only; what the
instructions do is the follower's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from funcsion_rpc import routing
from funcsion_rpc.client import MetadataClient
from storage_functions.daemon import Follower, Instruction, SourceView

__all__ = ["MetadataSource", "follow_metadata", "follow_shards"]


class MetadataSource:
    """``fetch`` / ``view`` / ``register_capacity`` / ``unregister_capacity`` over the
    metadata service's control calls (admin token)."""

    def __init__(self, client: MetadataClient, daemon: str = "") -> None:
        self.client = client
        self.daemon = daemon        # one of several daemons: it acknowledges for itself

    def fetch(self, after_seq: int, limit: int, loads: Mapping[str, tuple[int, int]] | None = None,
              buckets: Mapping[str, str] | None = None) -> Sequence[Instruction]:
        if loads is None and buckets is None and not self.daemon:   # nothing to report: the call as before
            got = self.client.fetch_instructions(after_seq, limit)
        else:
            got = self.client.fetch_instructions(after_seq, limit, None if loads is None else dict(loads),
                                                 None if buckets is None else dict(buckets), self.daemon)
        return [Instruction(int(i.seq), str(i.kind), i.run_id or "", i.object_name or "", i.tier or "memory",
                            i.reason or "", int(i.blocks or 0), i.function_name or "",
                            _moved(i) if i.kind == "move" else ())
                for i in got]

    def view(self) -> SourceView:
        st: dict[str, Any] = self.client.stats()
        return SourceView(int(st["block_size"]), {str(k): int(v) for k, v in st.get("functions", {}).items()},
                          frozenset(str(r["run_id"]) for r in st.get("runs", []) if r.get("state") == "running"),
                          int(st.get("last_seq", 0)), str(st.get("instance", "")))

    def register_capacity(self, function: str, blocks: int, daemon: str = "") -> None:
        if daemon:      # one of several daemons names itself; the only one never did
            self.client.register_capacity(function, blocks, daemon)
        else:
            self.client.register_capacity(function, blocks)

    def unregister_capacity(self, function: str) -> None:
        self.client.unregister_capacity(function)

    def close(self) -> None:
        self.client.close()


def _moved(i: Any) -> tuple[tuple[int, str, int, int, int], ...]:
    """A ``move``'s new places as the follower takes them: ``(chunk, function, block, offset,
    length reserved)`` for each chunk whose place changed (``alloc_of`` of old and new)."""
    from .._client import alloc_of

    new = alloc_of(SimpleNamespace(tier="memory", extents=i.extents or []))
    old = alloc_of(SimpleNamespace(tier="memory", extents=i.old_extents or [])) if i.old_extents else None
    return tuple((c, *a) for c, a in enumerate(new or []) if old is None or c >= len(old) or old[c] != a)


def follow_metadata(daemon: Any, metadata: str, admin_token: str, *, tls_ca: str = "",
                    **options: Any) -> Follower:
    """A follower (not started) of the metadata server at ``metadata`` (``HOST:PORT``) for
    ``daemon``; ``tls_ca`` (PEM text): dial it over TLS, verified against that CA; ``options``
    go to ``Follower`` (poll_s, backoff, ...)."""
    from .._client import parse_addr

    host, port = parse_addr(metadata)
    # a broken connection fails the round (no silent reconnect): the follower says hello again and
    # sees whether the server is another process (a replacement) before it acknowledges anything
    return Follower(MetadataSource(MetadataClient(host, port, admin_token=admin_token, timeout_s=10.0,
                                                  tls_ca=tls_ca, retry_stale=False),
                                   getattr(daemon.config, "daemon_id", "")),
                    daemon, **options)


def follow_shards(daemon: Any, metadata: str, admin_token: str, *, tls_ca: str = "",
                  **options: Any) -> list[Follower]:
    """One follower (not started) per metadata shard of ``metadata`` (``HOST:PORT``, or several
    joined by ``;`` in shard order). With several, each registers only the daemon's function
    groups its shard owns (``routing.shard_of_group``: the daemon's ``group_size`` must be the
    shards' d+p) and its first-start sweep spares the runs other shards own."""
    from .._client import Endpoints

    addrs = Endpoints(metadata, "", "").metadata_shards
    n = len(addrs)
    if n == 1:
        return [follow_metadata(daemon, addrs[0], admin_token, tls_ca=tls_ca, **options)]
    prefix = daemon.config.function_prefix
    return [follow_metadata(daemon, addr, admin_token, tls_ca=tls_ca,
                            owns_group=lambda g, k=k: routing.shard_of_group(prefix, g, n) == k,
                            sweep_keeps=lambda run_id, k=k: routing.shard_of_run(run_id, n) != k, **options)
            for k, addr in enumerate(addrs)]
