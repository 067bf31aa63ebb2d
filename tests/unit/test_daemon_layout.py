"""How a host's daemons are laid out (issue 31 item 1): ``--daemons`` takes a count or ``auto``
(one per core, at most one per erasure-code group of the pool), and ``daemon_layout`` gives
daemon-K its id, its functions ``<prefix>-dK-I`` in whole groups, its COS prefix, state id and
buffer directory; one daemon is the configuration unchanged, and too many for the pool are
refused naming the fix."""

from __future__ import annotations

import argparse

import pytest

from sdk.cli.serve_stack import daemon_count, daemons_for
from sdk.local._stack import daemon_layout, default_daemons
from storage_functions.daemon import DaemonConfig


def test_the_count_is_a_number_or_auto() -> None:
    assert daemon_count("3") == 3 and daemon_count("auto") == 0
    for bad in ("0", "-1", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="how many daemons"):
            daemon_count(bad)
    assert daemons_for(2) == 2
    assert daemons_for(0, cores=2) == 2 and daemons_for(0, cores=64) == 4    # 48 functions, groups of 12
    assert default_daemons(None, 48, 12) == 1 and default_daemons(8, 12, 12) == 1


def test_each_daemon_gets_its_id_functions_prefix_and_state() -> None:
    base = DaemonConfig(max_functions=48, group_size=12, port=7918, buffer_dir="/s/buffer", token="t")
    assert daemon_layout(base, 1) == [base]
    two = daemon_layout(base, 2)
    assert [d.daemon_id for d in two] == ["daemon-0", "daemon-1"]
    assert [d.function_prefix for d in two] == ["sion-d0", "sion-d1"]
    assert [d.max_functions for d in two] == [24, 24]
    assert [d.cos_prefix for d in two] == ["sion/daemon-0", "sion/daemon-1"]
    assert [d.state_id for d in two] == ["daemon-0", "daemon-1"]
    assert [d.buffer_dir for d in two] == ["/s/buffer", "/s/buffer-1"]
    assert [d.port for d in two] == [7918, 0] and {d.token for d in two} == {"t"}
    three = daemon_layout(base, 3)                       # 48 // 3 = 16: one whole group each
    assert [d.max_functions for d in three] == [12, 12, 12]
    with pytest.raises(ValueError, match="less than one erasure-code group of 12: run at most 4 daemons"):
        daemon_layout(base, 5)
