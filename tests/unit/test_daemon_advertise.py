"""The address storage functions dial back to: ``DaemonConfig.advertise``
parsed and checked, and what an invocation's event tells a function (no
sockets: the daemon is not started, its invoker only records)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from storage_functions.cos import LocalCOS
from storage_functions.daemon import Daemon, DaemonConfig
from storage_functions.daemon._config import split_address
from tests._waiting import wait_for


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.5:7000", ("10.0.0.5", 7000)), ("10.0.0.5", ("10.0.0.5", 0)),
    ("daemon.internal:7000", ("daemon.internal", 7000)), ("[fd00::5]:7000", ("fd00::5", 7000)),
    ("fd00::5", ("fd00::5", 0)), (" 10.0.0.5:7000 ", ("10.0.0.5", 7000)),
])
def test_split_address(text: str, expected: tuple[str, int]) -> None:
    assert split_address(text) == expected


@pytest.mark.parametrize("text,match", [
    ("10.0.0.5:", "HOST or HOST:PORT"), (":7000", "HOST or HOST:PORT"), ("10.0.0.5:x", "port must be a number"),
    ("10.0.0.5:70000", "port must be a number"), ("[fd00::5:7000", r"\[IPv6\]:PORT"), ("a b:1", "HOST or HOST:PORT"),
])
def test_bad_addresses_are_named(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        split_address(text)
    with pytest.raises(ValueError, match=match):
        DaemonConfig(advertise=text)


def test_dial_address_defaults_to_the_bound_one() -> None:
    assert DaemonConfig().dial_address(("127.0.0.1", 5123)) == ("127.0.0.1", 5123)
    assert DaemonConfig(advertise="10.0.0.5").dial_address(("0.0.0.0", 5123)) == ("10.0.0.5", 5123)
    assert DaemonConfig(advertise="10.0.0.5:7000").dial_address(("0.0.0.0", 5123)) == ("10.0.0.5", 7000)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.called = threading.Event()

    def invoke_async(self, name: str, payload: dict[str, Any]) -> None:
        self.events.append((name, payload))
        self.called.set()


def test_an_invocation_tells_the_function_the_advertised_address(tmp_path: Path) -> None:
    inv = Recorder()
    d = Daemon(DaemonConfig(host="0.0.0.0", port=7000, advertise="10.0.0.5", function_prefix="funcsion-storage",
                            cos_url="s3://bucket/run?endpoint_url=http%3A%2F%2F10.0.0.9%3A4566",
                            buffer_dir=str(tmp_path / "buffer")), inv, cos=LocalCOS(str(tmp_path / "cos")))
    try:
        assert d.prewarm(1) == 1
        assert inv.called.wait(10)
    finally:
        d.stop()
    name, event = inv.events[0]
    assert name == "funcsion-storage-0" and event["daemon"] == ["10.0.0.5", 7000]
    assert event["cos_url"] == "s3://bucket/run?endpoint_url=http%3A%2F%2F10.0.0.9%3A4566" and event["secret"]


def test_prewarm_from_a_first_function_invokes_only_those(tmp_path: Path) -> None:
    """A scale-out warms its new group only (``prewarm(count, first)``): the older groups'
    sleeping functions get no warm-up invocation."""
    inv = Recorder()
    d = Daemon(DaemonConfig(function_prefix="sion", buffer_dir=str(tmp_path / "buffer")), inv,
               cos=LocalCOS(str(tmp_path / "cos")))
    try:
        assert d.prewarm(5, first=3) == 2
        wait_for(lambda: len(inv.events) == 2, 10, "two warm-up invocations")
    finally:
        d.stop()
    assert sorted(name for name, _ in inv.events) == ["sion-3", "sion-4"]
