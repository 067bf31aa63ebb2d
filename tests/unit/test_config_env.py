"""Environment variables: one registry of every ``FUNCSION_*`` name funcsion reads,
and a warning with a did-you-mean for the others. One default port per server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from funcsion_rpc import DEFAULT_METADATA_PORT, MetadataClient
from sdk import Config
from sdk.cli._common import missing_extra
from sdk.cli._env import known_env_vars, unknown_env_warnings
from storage_functions.protocol import DEFAULT_DAEMON_PORT

REPO = Path(__file__).resolve().parents[2]
CODE = ("funcsion_errors", "wds", "hdag", "funcsion_rpc", "lifetime_model", "metadata_server", "storage_functions",
        "sdk", "examples", "scripts")


@pytest.mark.parametrize("name,hint", [
    ("FUNCSION_METADTA_PORT", "did you mean FUNCSION_METADATA_PORT?"),
    ("FUNCSION_STATEDIR", "did you mean FUNCSION_STATE_DIR?"),
    ("FUNCSION_TASK_TIMEOUT", "did you mean FUNCSION_TASK_TIMEOUT_S?"),
    ("FUNCSION_KILLRATE", "did you mean FUNCSION_KILL_RATE?"),
    ("FUNCSION_METADATA_HOST", "set FUNCSION_HOST instead"),
    ("FUNCSION_ZZZ", "settings are FUNCSION_<FIELD> for the fields in docs/configuration.md"),
])
def test_unknown_variable_gets_one_line_with_a_hint(name: str, hint: str) -> None:
    (line,) = unknown_env_warnings({name: "1", "FUNCSION_POLICY": "pocket", "HOME": "/root"})
    assert line == f"environment variable {name} is not a funcsion setting and is ignored; {hint}"


def test_known_variables_raise_no_warning() -> None:
    env = {name: "1" for name in known_env_vars()}
    assert unknown_env_warnings(env) == []
    assert {"FUNCSION_METADATA_PORT", "FUNCSION_DAEMON_PORT", "FUNCSION_KILL_FILE", "FUNCSION_ADMIN_TOKEN",
            "FUNCSION_SKIP_INSTALL", "FUNCSION_WORKFLOW", "FUNCSION_INSTANCE_ID"} <= known_env_vars()


def test_every_variable_named_in_the_code_is_known() -> None:
    """The registry cannot fall behind: any FUNCSION_* literal in the code must be in it."""
    named: dict[str, str] = {}
    for top in CODE:
        for path in (REPO / top).rglob("*"):
            if path.is_file() and (path.suffix == ".py" or path.parent.name == "scripts") and path.name != "_env.py":
                for m in re.finditer(r"\bFUNCSION_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")):
                    named.setdefault(m.group(0), str(path.relative_to(REPO)))
    assert "FUNCSION_KILL_RATE" in named and "FUNCSION_SKIP_INSTALL" in named
    unknown = {n: where for n, where in named.items() if n not in known_env_vars() and n != "FUNCSION_FIELD"}
    assert unknown == {}


def test_one_default_port_per_server() -> None:
    assert Config().metadata_port == DEFAULT_METADATA_PORT == MetadataClient().port == 7917
    assert Config().daemon_port == DEFAULT_DAEMON_PORT == 7918


def test_missing_extra_names_the_extra() -> None:
    assert missing_extra(ModuleNotFoundError("no networkx", name="networkx")) == (
        "this command needs networkx, which a plain `pip install funcsion` leaves out; "
        "install it with: pip install 'funcsion[local]'")
    assert "funcsion[plot]" in (missing_extra(ModuleNotFoundError(name="matplotlib.pyplot")) or "")
    assert missing_extra(ModuleNotFoundError(name="sdk.cli.nothing")) is None


@pytest.mark.parametrize(("env", "needles"), [
    ({"FUNCSION_EC_DATA": "300"}, ["ec_data = 300 (from $FUNCSION_EC_DATA)", "302 chunks per stripe is over the "
                                   "limit of 32", "its own storage function of one group", "refuses over 256"]),
    ({"FUNCSION_EC_PARITY": "5"}, ["ec_parity = 5 (from $FUNCSION_EC_PARITY)", "isa_l_rs_vand",
                                   "cannot rebuild some sets of 10 surviving chunks out of 15"]),
    ({"FUNCSION_EC_DATA": "22", "FUNCSION_EC_PARITY": "4"}, ["use ec_parity <= 3 (or 4 with ec_data <= 21)"]),
])
def test_an_erasure_code_past_what_the_code_and_a_group_hold_is_refused(env: dict[str, str],
                                                                        needles: list[str]) -> None:
    from sdk.exceptions import ConfigError

    with pytest.raises(ConfigError) as info:
        Config.load(env=env, cwd="/nonexistent")
    for needle in needles:
        assert needle in str(info.value)


@pytest.mark.parametrize(("d", "p"), [(10, 2), (1, 0), (29, 3), (21, 4), (30, 2)])
def test_erasure_codes_within_the_bounds_load(d: int, p: int) -> None:
    cfg = Config.load(env={"FUNCSION_EC_DATA": str(d), "FUNCSION_EC_PARITY": str(p)}, cwd="/nonexistent")
    assert (cfg.ec_data, cfg.ec_parity) == (d, p)


def test_state_ids_and_the_ship_lag_are_config_fields_with_env_vars() -> None:
    d = Config()
    assert (d.metadata_state_id, d.daemon_state_id, d.control_ship_lag_s) == ("metadata-0", "daemon-0", 1.0)
    cfg = Config.load(env={"FUNCSION_METADATA_STATE_ID": "metadata-3", "FUNCSION_DAEMON_STATE_ID": "daemon-2",
                           "FUNCSION_CONTROL_SHIP_LAG_S": "0.25"}, cwd=REPO / "tests")
    assert (cfg.metadata_state_id, cfg.daemon_state_id, cfg.control_ship_lag_s) == ("metadata-3", "daemon-2", 0.25)
    from sdk._config import ConfigError
    with pytest.raises(ConfigError, match="'daemon_state_id' = '../x' .* a state id is 1-63 letters"):
        Config.load(env={"FUNCSION_DAEMON_STATE_ID": "../x"}, cwd=REPO / "tests")
    with pytest.raises(ConfigError, match="'control_ship_lag_s' = -1.0 .* must be 0 .ship before replying. or more"):
        Config.load(env={"FUNCSION_CONTROL_SHIP_LAG_S": "-1"}, cwd=REPO / "tests")
    assert Config.load(env={"FUNCSION_CONTROL_SHIP_LAG_S": "0"}, cwd=REPO / "tests").control_ship_lag_s == 0.0


def test_the_three_state_id_rules_agree() -> None:
    """The config, the metadata server and the daemon check state ids alike (each package its
    own copy: none may import another's server code)."""
    import metadata_server._ship as meta
    import sdk._config as config
    import storage_functions.daemon._control_ship as daemon
    assert config._STATE_ID.pattern == meta._STATE_ID.pattern == daemon._STATE_ID.pattern
    assert Config().control_ship_lag_s == meta.DEFAULT_SHIP_LAG_S
