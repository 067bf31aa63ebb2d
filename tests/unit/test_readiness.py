"""``storage_functions.readiness.readable``: poll(2) readiness with timeouts, end of
file counted as readable, and descriptors numbered past select(2)'s 1024."""

from __future__ import annotations

import os
import select
import socket
import time

import pytest

from storage_functions.readiness import readable


def test_readable_waits_for_data_and_times_out_without() -> None:
    a, b = socket.socketpair()
    with a, b:
        t = time.monotonic()
        assert readable([a], 0.05) == []
        assert time.monotonic() - t >= 0.04
        assert readable([a], 0) == []
        b.sendall(b"x")
        assert readable([a, b], 1) == [a.fileno()]
        b.close()
        a.recv(1)
        assert readable([a], 1) == [a.fileno()]  # end of file: a read says so


def test_readable_takes_descriptors_select_cannot() -> None:
    r, w = os.pipe()
    high = 1500
    try:
        os.dup2(r, high)
    except OSError:
        pytest.skip("this process may not open descriptor 1500 (ulimit -n)")
    try:
        with pytest.raises(ValueError):
            select.select([high], [], [], 0)
        os.write(w, b"!")
        assert readable([high], 1) == [high]
    finally:
        for fd in (r, w, high):
            os.close(fd)
