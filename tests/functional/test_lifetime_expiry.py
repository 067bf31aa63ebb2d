"""The predicted expiry travels to the data path: the metadata server's put grant carries
``expires_at_ms`` (the put's time plus the object's predicted lifetime) for a declared
object in function memory of a run that frees on commit, and the SDK passes it in the
PUT's meta to the storage daemon; nothing is sent when nothing frees the object at a
predicted time (a workflow input, an output, a ``pocket`` run). The grant's ``readers`` (the
graph's read count, for a declared object) travels the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metadata_server import HeuristicPredictor, MetadataHandler, MetadataServer, MetadataState
from sdk._client import Client, Endpoints
from storage_functions.daemon import DaemonConfig, LocalStore

ADMIN = "admin-secret"
NOW = 1_700_000_000.0          # the metadata server's clock (Unix seconds), fixed


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[MetadataServer, LocalStore, list[tuple[str, dict[str, Any]]]]]:
    server = MetadataServer(MetadataHandler(MetadataState(), admin_token=ADMIN, clock=lambda: NOW)).start()
    try:
        with LocalStore(str(tmp_path), config=DaemonConfig(placement="metadata", group_size=2, max_functions=2,
                                                           function_memory_mb=128)) as st:
            seen: list[tuple[str, dict[str, Any]]] = []
            real = st.daemon._put_send

            def spy(sock: Any, f: Any, scratch: Any, refuse: Any = None) -> Any:   # the daemon's own PUT path
                seen.append((f.key, dict(f.meta)))
                return real(sock, f, scratch, refuse=refuse)

            st.daemon._put_send = spy  # type: ignore[method-assign]
            yield server, st, seen
    finally:
        server.close()


def _meta_of(seen: list[tuple[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    (meta,) = [m for k, m in seen if k.endswith("/" + name)]
    return meta


def test_the_grant_and_the_daemons_put_carry_the_predicted_expiry(fig9_path: Path, stack: Any) -> None:
    server, st, seen = stack
    ep = Endpoints(f"127.0.0.1:{server.port}", f"{st.address[0]}:{st.address[1]}", st.token, ADMIN)
    with Client(ep) as driver:
        driver.metadata.register_capacity("sion-0", 64)
        key = driver.register_workflow(fig9_path.read_text(), {}, str(fig9_path))
        run = driver.start_run(key, policy="funcstore")
        run.put("in1", b"i" * 500)                                     # a workflow input: no prediction
        run.put("in2", b"j" * 500)
        f1 = run.bind(function="F1")
        assert f1.get("in1") == b"i" * 500
        f1.put("a", b"a" * 300)
        state = server.handler.state.runs[run.run_id]
        predicted = state.predicted["a"]
        assert predicted == HeuristicPredictor().predict(state.graph.objects["a"]) > 0
        assert _meta_of(seen, "a")["expires_at_ms"] == round((NOW + predicted) * 1000)
        assert "expires_at_ms" not in _meta_of(seen, "in1")
        # the read count from the workflow graph goes along (the daemon readies a broadcast's copies)
        assert _meta_of(seen, "a")["readers"] == state.graph.objects["a"].read_count > 0
        assert _meta_of(seen, "in1")["readers"] == state.graph.objects["in1"].read_count > 0
        run.put("scratch", b"s" * 200, adhoc=True)                     # ad hoc: no read count
        assert "readers" not in _meta_of(seen, "scratch")
        f2 = run.bind(function="F2")
        f2.get("in2")
        (grant,) = run._md.begin_put_batch(run.run_id, "F2", [_request("b1", 10)])   # the grant itself
        assert grant.expires_at_ms == round((NOW + state.predicted["b1"]) * 1000)
        run.end_run("aborted")
        run.close()

        pocket = driver.start_run(key, policy="pocket")               # nothing frees on commit: no expiry
        pocket.put("in1", b"i" * 500)
        g = pocket.bind(function="F1")
        g.get("in1")
        g.put("a", b"a" * 300)
        assert "expires_at_ms" not in [m for k, m in seen if k.endswith("/a")][-1]
        pocket.end_run("aborted")
        pocket.close()


def _request(name: str, size: int) -> Any:
    from funcsion_rpc.gen.metadata.ttypes import PutRequest

    return PutRequest(name, size, "c", False, False)
