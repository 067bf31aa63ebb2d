"""Every command takes its defaults from the one config (``FUNCSION_<FIELD>``,
funcsion.toml, the defaults of ``sdk.Config``), and the CLI warns about
``FUNCSION_*`` variables that funcsion does not read."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sdk.cli import build_parser, main, serve_daemon, serve_metadata


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No FUNCSION_* variables, and a working directory of our own for funcsion.toml."""
    for name in list(os.environ):
        if name.startswith("FUNCSION_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_misspelt_variable_is_a_warning_with_a_did_you_mean(clean_env: Path, example_paths: dict[str, Path],
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FUNCSION_METADTA_PORT", "9000")
    monkeypatch.setenv("FUNCSION_POLICY", "pocket")  # a real setting: no warning
    assert main(["inspect", str(example_paths["wordcount"])]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["funcsion: warning: environment variable FUNCSION_METADTA_PORT is not a funcsion setting and "
                   "is ignored; did you mean FUNCSION_METADATA_PORT?"]


def test_serve_metadata_takes_the_config_port(clean_env: Path) -> None:
    port = _free_port()
    (clean_env / "funcsion.toml").write_text(f"metadata_port = {port}\nblock_size = 65536\nrun_ttl_s = 60\n")
    server, journal = serve_metadata.build(build_parser().parse_args(["serve", "metadata"]))
    try:
        assert journal is None and (server.host, server.port) == ("127.0.0.1", port)
        assert server.handler.state.allocator.block_size == 65536
    finally:
        server.close()
    # an explicit option still wins
    server, _ = serve_metadata.build(build_parser().parse_args(["serve", "metadata", "--port", "0"]))
    try:
        assert server.port not in (0, port)
    finally:
        server.close()


def test_serve_daemon_takes_the_config_port_and_block_size(clean_env: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUNCSION_DAEMON_PORT", "17918")
    (clean_env / "funcsion.toml").write_text("block_size = 65536\nfunction_memory_mb = 256\nmemory_grain = 8192\n")
    got = serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon"]))
    assert (got["host"], got["port"], got["block_size"], got["function_memory_mb"], got["memory_grain"]) == (
        "127.0.0.1", 17918, 65536, 256, 8192)
    got = serve_daemon.daemon_settings(build_parser().parse_args(   # the storage Lambdas: the same grain
        ["serve", "daemon", "--invoker", "aws", "--cos", "s3://bucket/prefix", "--advertise", "10.0.0.5:7918",
         "--host", "10.0.0.5", "--insecure"]))
    assert got["memory_grain"] == 8192
    got = serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon", "--port", "0"]))
    assert got["port"] == 0
    assert "parity_upload_delay_s" not in got  # the daemon's default (2 s)


def test_serve_daemon_sets_the_write_behind_delays(clean_env: Path) -> None:
    got = serve_daemon.daemon_settings(build_parser().parse_args(
        ["serve", "daemon", "--upload-delay-s", "0.5", "--parity-upload-delay-s", "0"]))
    assert (got["upload_delay_s"], got["parity_upload_delay_s"]) == (0.5, 0.0)
    with pytest.raises(serve_daemon.ServeDaemonError, match="--parity-upload-delay-s must be >= 0"):
        serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon", "--parity-upload-delay-s",
                                                                "-1"]))


@pytest.mark.parametrize("argv,default", [
    (["serve", "metadata", "--help"], "config metadata_port, 7917"),
    (["serve", "daemon", "--help"], "config daemon_port, 7918"),
    (["serve", "stack", "--help"], "config metadata_port, 7917"),
])
def test_help_shows_the_config_defaults(argv: list[str], default: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert default in " ".join(capsys.readouterr().out.split())


def test_serve_daemon_bounds_the_connections_waiting_for_their_hello(clean_env: Path) -> None:
    got = serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon", "--hello-pending-max", "64"]))
    assert got["hello_pending_max"] == 64
    assert "hello_pending_max" not in serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon"]))
    with pytest.raises(serve_daemon.ServeDaemonError, match="--hello-pending-max 0: .* at least 1"):
        serve_daemon.daemon_settings(build_parser().parse_args(["serve", "daemon", "--hello-pending-max", "0"]))
