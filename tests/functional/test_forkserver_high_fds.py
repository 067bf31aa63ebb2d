"""The fork server works when the platform holds more than FD_SETSIZE (1024) descriptors:
its control socket keeps the parent's descriptor number, which ``select`` refused ("filedescriptor
out of range in select()", seen in a long ``bench utilization``), so every later instance start
failed. The zygote waits with ``poll`` now."""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterator

import pytest

from storage_functions.local._forkserver import ForkServer


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard descriptor limit ({hard}) is below what the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_zygote_with_a_control_descriptor_past_1024_forks_and_reports_exits(many_fds: None) -> None:
    server = ForkServer((), env=dict(os.environ), sys_path=sys.path, start_timeout_s=60.0).start()
    try:
        for _ in range(2):  # the second fork needs the zygote's loop to have survived the first
            req_r, req_w = os.pipe()
            resp_r, resp_w = os.pipe()
            child = server.fork({"PATH": os.environ.get("PATH", "")}, [req_r, resp_w])
            for fd in (req_r, resp_w):
                os.close(fd)
            os.close(req_w)  # EOF on its request pipe: the worker loop ends
            assert child.wait(timeout=60.0) is not None or child.status_unknown
            os.close(resp_r)
        assert not server.dead
    finally:
        server.close()
