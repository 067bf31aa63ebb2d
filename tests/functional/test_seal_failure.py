"""A storage function whose COS cannot be opened or written still ends its
invocation as the daemon expects: it says BYE (carrying why its insertion log
did not reach COS), the daemon counts and logs it, the invocation returns a
result naming it, and the data it holds stays readable. Before, an exception
from the seal killed the serving thread and the invocation died before its
BYE, as the storage zip without ``storage_functions/cos`` did on every
invocation that stored data."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.cos import LocalCOS
from storage_functions.daemon import LocalStore
from tests._waiting import wait_for


@pytest.mark.parametrize("cos_url,why", [
    ("s3://bucket/p?no_such_option=1", "opening COS: COSConfigError"),  # cannot be opened at all
    ("s3://bucket/p?endpoint_url=http://127.0.0.1:9", "not written to COS"),  # nothing listens: the PUTs fail
])
def test_a_seal_that_cannot_reach_cos_still_says_bye(tmp_path: Path, cos_url: str, why: str,
                                                     caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(k, v)  # the functions inherit them: no retries against a closed port
    # the daemon's own COS is a local directory; the functions get the URL above in their events
    with LocalStore(str(tmp_path), cos=LocalCOS(tmp_path / "cos"), cos_url=cos_url, idle_s=0.2, max_functions=3,
                    group_size=3) as st, StoreClient(st.address, st.token, codec=Codec(2, 1)) as c:
        value = os.urandom(3000)
        with caplog.at_level(logging.WARNING, logger="storage_functions.daemon"):
            c.put("x", value)
            name = st.daemon.handles[st.daemon.table.latest("x").stripes[0].places[0][0]].name
            wait_for(lambda: st.daemon.counters.get("function_errors", 0) >= 1, 15, "a BYE reporting the failed seal")
            wait_for(lambda: any(r.function_name == name for r in st.platform.records(name)), 30, "the invocation's end")
        [rec] = st.platform.records(name)
        assert rec.outcome == "ok" and rec.metrics.get("seals") == 1  # it returned a result, not an error
        h = next(h for h in st.daemon.handles if h.name == name)
        assert h.last_died < 0 and h.term == 1  # the BYE was acknowledged: no connection lost without it
        assert any(name in r.getMessage() and why in r.getMessage() for r in caplog.records), caplog.text
        assert c.get("x") == value  # the same warm instance serves it
