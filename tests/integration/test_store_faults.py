"""Fault injection over the whole local store: storage-function instances
are killed at random while many clients PUT and GET; every object written
stays readable (first-d from the survivors, parity, the persistent buffer or
COS) and no client sees an error. With TLS on as well (``tls``): an instance killed
mid-TLS-connection is handled as one killed mid-plaintext-connection."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore

MiB = 1 << 20
SIZES = [0, 1, 4096, 70_000, 900_000, MiB, 2 * MiB + 3]


def _tls(on: bool, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """The daemon's TLS settings and the CA's PEM for its clients (none when off)."""
    if not on:
        return {}, ""
    from sdk.cli.certs_cmd import make_certs

    paths = make_certs(tmp_path / "certs", ["127.0.0.1"])
    return ({"tls_cert": str(paths["server.pem"]), "tls_key": str(paths["server.key"]),
             "tls_ca": str(paths["ca.pem"])}, paths["ca.pem"].read_text())


@pytest.mark.slow
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_random_kills_under_concurrent_load_lose_nothing(tls: bool, tmp_path: Path) -> None:
    rng = random.Random(7)
    settings, ca = _tls(tls, tmp_path)
    with LocalStore(idle_s=1.0, function_memory_mb=256, group_size=6, max_functions=24, get_straggler_s=0.2,
                    put_timeout_s=20.0, **settings) as st:
        written: dict[str, bytes] = {}
        lock = threading.Lock()
        errors: list[BaseException] = []
        stop = threading.Event()

        def client(n: int) -> None:
            r = random.Random(n)
            try:
                with StoreClient(st.address, st.token, codec=Codec(4, 2, stripe_size=MiB), tls_ca=ca) as c:
                    j = 0
                    while not stop.is_set():
                        key = f"c{n}-{j}"
                        data = os.urandom(r.choice(SIZES))
                        c.put(key, data)
                        with lock:
                            written[key] = data
                            sample = r.sample(sorted(written), min(3, len(written)))
                        for k in sample:
                            assert c.get(k) == written[k], k
                        j += 1
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        kills = attempts = 0
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline and not errors:
            time.sleep(rng.uniform(0.1, 0.4))
            names = [h.name for h in st.daemon.handles]
            if names:
                attempts += 1
                kills += len(st.platform.kill(rng.choice(names)))
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        print(f"{attempts} kill attempts, {kills} instances killed, {len(written)} objects, "
              f"counters {st.daemon.counters}")
        assert kills >= 2 and len(written) >= 12
        assert st.daemon.counters["lost_functions"] >= 1
        if tls:
            edge = st.daemon._tls_edge
            assert edge is not None and edge.completed >= 6, "the clients and functions spoke TLS"
        with StoreClient(st.address, st.token, tls_ca=ca) as c:
            for k, v in written.items():
                assert c.get(k) == v, k
            st.platform.kill(st.daemon.handles[0].name)  # and once more after every upload
            assert st.daemon.wait_uploads(30)
            for k, v in written.items():
                assert c.get(k) == v, k
