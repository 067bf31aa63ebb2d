"""Task workers forked from a fork server that imported ``sdk`` once: the forked
worker runs the handler with the preloaded modules, crashes, timeouts and kills
are still seen and reported, nothing a worker does reaches the next one, and
the platform's start-up settings (bytecode cache, a simulated cold start,
provisioning, parallel shutdown) do what they say."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_functions.exceptions import InvocationFailed
from storage_functions.local import LocalPlatform, PlatformConfig

SOURCE = textwrap.dedent('''
    import os, sys, time
    PRELOADED = "sdk" in sys.modules  # before this module imported anything itself
    STATE = []

    def probe(event, context):
        import sdk._task as task
        seen = {"preloaded": PRELOADED, "pid": os.getpid(), "ppid": os.getppid(), "state": list(STATE),
                "leak_env": os.environ.get("LEAKED_BY_A_WORKER"), "clients": len(task._clients),
                "name": os.environ.get("AWS_LAMBDA_FUNCTION_NAME"), "app": os.environ.get("APP_X")}
        STATE.append(event.get("run"))
        os.environ["LEAKED_BY_A_WORKER"] = str(event.get("run"))
        task._clients[event.get("run")] = None  # as a warm container's cached client would be
        return seen

    def crash(event, context):
        os._exit(137)

    def sleep(event, context):
        time.sleep(event["s"])  # the handler's own work
        return os.getpid()
''')


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("workers")
    (d / "wk.py").write_text(SOURCE)
    return d


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPlatform]:
    pyc = tmp_path_factory.mktemp("pyc")
    with LocalPlatform(PlatformConfig(bytecode_dir=str(pyc)), environ={}) as p:
        yield p


def test_a_forked_worker_runs_the_handler_with_sdk_already_imported(platform: LocalPlatform, code: Path) -> None:
    platform.deploy("fk-probe", "wk:probe", code_paths=[code], preload=["sdk"], env={"APP_X": "1"})
    first = platform.invoke("fk-probe", {"run": "r-1"})
    assert first["preloaded"] is True                    # imported once, by the fork server
    assert first["ppid"] != os.getpid()                  # forked from it, not spawned by this process
    assert (first["name"], first["app"]) == ("fk-probe", "1")
    again = platform.invoke("fk-probe", {"run": "r-1"})
    assert again["pid"] == first["pid"] and again["state"] == ["r-1"]  # warm reuse keeps its globals
    cold, warm = platform.records("fk-probe")
    assert cold.cold and not warm.cold


def test_without_the_fork_server_each_worker_is_a_fresh_interpreter(code: Path, tmp_path: Path) -> None:
    with LocalPlatform(PlatformConfig(fork_server=False, bytecode_dir="off"), environ={}) as p:
        p.deploy("sp-probe", "wk:probe", code_paths=[code], preload=["sdk"])
        seen = p.invoke("sp-probe", {"run": "r-1"})
    assert seen["preloaded"] is False and seen["ppid"] == os.getpid()


def test_nothing_a_worker_did_reaches_the_next_one(platform: LocalPlatform, code: Path) -> None:
    """A task of another run gets a new worker (its own platform, or here a killed instance's
    successor): it is forked from the fork server's pristine state, never from a worker's."""
    platform.deploy("fk-leak", "wk:probe", code_paths=[code], preload=["sdk"])
    a = platform.invoke("fk-leak", {"run": "r-a"})
    assert (a["state"], a["leak_env"], a["clients"]) == ([], None, 0)
    platform.kill("fk-leak")
    b = platform.invoke("fk-leak", {"run": "r-b"})
    assert b["pid"] != a["pid"]
    assert (b["state"], b["leak_env"], b["clients"]) == ([], None, 0)


def test_a_crash_a_timeout_and_a_kill_of_forked_workers_are_reported(platform: LocalPlatform, code: Path) -> None:
    platform.deploy("fk-crash", "wk:crash", code_paths=[code], preload=["sdk"])
    with pytest.raises(InvocationFailed, match="Runtime exited with error: exit status 137") as info:
        platform.invoke("fk-crash", {})
    assert info.value.reason == "killed"

    platform.deploy("fk-slow", "wk:sleep", code_paths=[code], preload=["sdk"], timeout_s=0.5)
    pid = platform.invoke("fk-slow", {"s": 0})
    with pytest.raises(InvocationFailed, match="Task timed out after 0.50 seconds") as info:
        platform.invoke("fk-slow", {"s": 30})
    assert info.value.reason == "timeout" and not pid_alive(pid)
    assert platform.records("fk-slow")[-1].outcome == "timeout"

    platform.deploy("fk-kill", "wk:sleep", code_paths=[code], preload=["sdk"])
    platform.provision("fk-kill", 1)
    (inst,) = platform.instances("fk-kill")
    handle = platform.invoke_async("fk-kill", {"s": 30})
    killed: list[int] = []
    deadline = time.monotonic() + 30
    while not killed and time.monotonic() < deadline:  # the instance takes the invocation, then dies under it
        if platform.instances("fk-kill")[0].state == "busy":
            killed = platform.kill("fk-kill")
    with pytest.raises(InvocationFailed, match=r"signal: killed \(fault injection\)") as info:
        handle.result(30)
    assert info.value.reason == "killed" and killed == [inst.pid] and not pid_alive(inst.pid)
    assert platform.invoke("fk-kill", {"s": 0}) != inst.pid  # and the next one is forked anew


def test_kill_rate_fault_injection_reaches_forked_workers(code: Path) -> None:
    with LocalPlatform(PlatformConfig(kill_rate=1.0, kill_functions="fk-*", seed=3), environ={}) as p:
        p.deploy("fk-doomed", "wk:probe", code_paths=[code], preload=["sdk"])
        with pytest.raises(InvocationFailed) as info:
            p.invoke("fk-doomed", {"run": "r-1"})
    assert info.value.reason == "killed"


def test_workers_write_and_reuse_bytecode(platform: LocalPlatform, code: Path) -> None:
    platform.deploy("fk-pyc", "wk:probe", code_paths=[code], preload=["sdk"])
    platform.invoke("fk-pyc", {"run": "r-1"})
    prefix = Path(platform.config.bytecode_dir or "")
    assert list(prefix.glob(f"{str(code).lstrip('/')}/wk.*.pyc"))  # PYTHONPYCACHEPREFIX mirrors the source tree
    assert list(prefix.rglob("sdk/_task.*.pyc"))  # the fork server's imports too


def test_a_simulated_cold_start_lasts_at_least_as_long_as_set(code: Path) -> None:
    with LocalPlatform(PlatformConfig(cold_start_s=0.4), environ={}) as p:
        p.deploy("fk-coldsim", "wk:probe", code_paths=[code], preload=["sdk"])
        p.invoke("fk-coldsim", {"run": "r-1"})
        p.invoke("fk-coldsim", {"run": "r-1"})
        cold, warm = p.records("fk-coldsim")
    assert cold.cold and cold.init_ms >= 400 and not warm.cold and warm.init_ms == 0
    assert p.billing().to_dict()["functions"]["fk-coldsim"]["billed_ms"] >= 400  # init is billed


def test_provision_starts_what_is_missing_and_nothing_more(platform: LocalPlatform, code: Path) -> None:
    platform.deploy("fk-prov", "wk:probe", code_paths=[code], preload=["sdk"])
    assert platform.provision("fk-prov", 3) == 3
    assert [i.state for i in platform.instances("fk-prov")] == ["idle"] * 3
    assert platform.provision("fk-prov", 3) == 0


SLOW_EXIT = textwrap.dedent('''
    import atexit, os, time
    from pathlib import Path

    D, N = Path(os.environ["APP_DIR"]), int(os.environ["APP_N"])

    def _bye():  # leaves cleanly only once every instance was told to stop
        (D / f"exiting-{os.getpid()}").touch()
        deadline = time.monotonic() + 10
        while len(list(D.glob("exiting-*"))) < N and time.monotonic() < deadline:
            time.sleep(0.01)
        if len(list(D.glob("exiting-*"))) >= N:
            (D / f"done-{os.getpid()}").touch()

    atexit.register(_bye)

    def noop(event, context):
        return os.getpid()
''')


def test_shutdown_tells_every_worker_to_stop_before_waiting_for_any(tmp_path: Path) -> None:
    (tmp_path / "bye.py").write_text(SLOW_EXIT)
    marks = tmp_path / "marks"
    marks.mkdir()
    p = LocalPlatform(PlatformConfig(), environ={})
    p.deploy("bye", "bye:noop", code_paths=[tmp_path], env={"APP_DIR": str(marks), "APP_N": "3"})
    assert p.provision("bye", 3) == 3
    pids = [i.pid for i in p.instances("bye")]
    p.shutdown()
    assert sorted(f.name for f in marks.glob("done-*")) == sorted(f"done-{pid}" for pid in pids)


def test_a_bytecode_cache_others_may_write_to_is_not_used(code: Path, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared-pyc"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could plant bytecode here that the workers would run
    with LocalPlatform(PlatformConfig(bytecode_dir=str(shared)), environ={}) as p:
        p.deploy("fk-shared", "wk:probe", code_paths=[code], preload=["sdk"])
        assert p.invoke("fk-shared", {"run": "r-1"})["preloaded"] is True
    assert not list(shared.rglob("*.pyc"))
    assert "is not this user's alone" in caplog.text


def test_preload_modules_that_cannot_be_imported_fall_back_to_fresh_interpreters(
        code: Path, caplog: pytest.LogCaptureFixture) -> None:
    with LocalPlatform(PlatformConfig(), environ={}) as p:
        p.deploy("fk-nopre", "wk:probe", code_paths=[code], preload=["no_such_module_anywhere"])
        first = p.invoke("fk-nopre", {"run": "r-1"})
        p.kill("fk-nopre")
        second = p.invoke("fk-nopre", {"run": "r-1"})
    assert first["ppid"] == second["ppid"] == os.getpid()  # spawned, each
    assert caplog.text.count("no fork server") == 1          # tried once, not at every cold start
