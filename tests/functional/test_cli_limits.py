"""Hostile workflow descriptions through ``funcsion inspect``, ``run`` and ``deploy``
as a user runs them: each exits 2 within seconds with a one-line error and no
traceback, before any stack starts. The subprocess runs under RLIMIT_AS 1 GiB
and a timeout, so a regression fails fast instead of eating the machine."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30


def _fn(name: str, inp: list[str], out: list[str], start: bool = True, **kw: Any) -> dict[str, Any]:
    return {"start": start, "name": name, "input": inp, "output": out, "next": [], **kw}


def _wds(*functions: dict[str, Any], **top: Any) -> str:
    return json.dumps({"app": "h", "workflow_id": 1, "category": "t",
                       "spec": {"s": {"stage_id": 0, "functions": list(functions)}}, **top})


# name -> (WDS text, extra CLI arguments, what the one error line says)
HOSTILE: dict[str, tuple[Callable[[], str], list[str], str]] = {
    "replicas": (lambda: _wds(_fn("w_{i}", ["in"], ["o_{i}"], replicas=100_000)), [],
                 "'replicas' is 100,000, over the limit of 10,000"),
    "param": (lambda: _wds(_fn("w_{i}", ["in"], ["o_{i}"], replicas="mappers"), params={"mappers": 2}),
              ["--param", f"mappers={10**20}"], "over the limit of 10,000 functions"),
    "format_width": (lambda: _wds(_fn("w", ["in"], ["o_{0..3:99999999d}"])), [],
                     "width of 99,999,999 characters, over the limit of 32"),
    "range_product": (lambda: _wds(_fn("w", ["in"], ["o_{0..101}_{0..101}_{0..101}"])), [],
                      "expands to 1,030,301 names, over the limit of 100,000"),
    "nesting": (lambda: '{"app": ' + "[" * 100_000 + "]" * 100_000 + "}", [], "more than 32 levels deep"),
    "size": (lambda: _wds(_fn("w", ["in"], ["o"]), description="x" * (50 << 20)), [],
             "larger than the limit of 4,194,304 bytes"),
    "dotdot": (lambda: _wds(_fn("w", ["in"], ["../../x"])), [], "object name '../../x' contains '/'"),
    "absolute": (lambda: _wds(_fn("w", ["/etc/passwd"], ["o"])), [], "object name '/etc/passwd' contains '/'"),
    "clash": (lambda: _wds(_fn("gen.a", ["in"], ["a"], handler="handlers:wa"),
                           _fn("gen-a", ["in"], ["b"], handler="handlers:wb")), [],
              "entries 'gen.a' ($.spec.s.functions[0]) and 'gen-a' map to the same Lambda name 'h-gen-a'"),
    "long_number": (lambda: '{"app": "h", "workflow_id": ' + "9" * 5000 + ', "category": "t", "spec": {}}', [],
                    "a whole number has 5000 digits"),
}


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def funcsion(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env = {k: v for k, v in env.items() if not k.startswith("FUNCSION_")}
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd, env=env, preexec_fn=_bounded)


@pytest.mark.parametrize("command", ["inspect", "run", "deploy"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_wds_exits_2_with_one_line(case: str, command: str, tmp_path: Path) -> None:
    text, extra, needle = HOSTILE[case]
    path = tmp_path / f"{case}.wds.json"
    path.write_text(text())
    state = tmp_path / "state"
    args = [command, str(path), *extra] + {"inspect": [], "run": ["--state-dir", str(state), "--no-progress"],
                                            "deploy": ["--target", "local", "--state-dir", str(state)]}[command]
    proc = funcsion(*args, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"funcsion {command}: 1 error"), proc.stderr[:2000]
    assert needle in proc.stderr and str(path) in proc.stderr
    assert len(proc.stderr) < 1000 and proc.stdout == ""
    assert not state.exists()  # nothing ran: no stack was started for a bad file


def test_limits_are_settable_in_config(tmp_path: Path) -> None:
    path = tmp_path / "wide.wds.json"
    path.write_text(_wds(_fn("w_{i}", ["in"], ["o_{i}"], replicas=30)))
    (tmp_path / "funcsion.toml").write_text("wds_max_functions = 20\n")
    proc = funcsion("inspect", str(path), cwd=tmp_path)
    assert proc.returncode == 2 and "over the limit of 20 functions" in proc.stderr
    (tmp_path / "funcsion.toml").write_text("wds_max_functions = 30\n")
    proc = funcsion("inspect", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "30 functions" in proc.stdout
