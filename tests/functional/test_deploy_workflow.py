"""The task zip's contents; the `funcsion deploy WDS` shorthand against an
embedded local stack. The AWS stack is tested in ``test_deploy_stack.py``."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from sdk._config import Config
from sdk.cli import main
from sdk.deploy.aws import build_task_zip
from sdk.local._stack import Stack


def test_task_zip_has_handlers_and_sdk_but_no_server_code(example_paths: dict[str, Path]) -> None:
    z = build_task_zip(example_paths["wordcount"].parent)
    names = set(zipfile.ZipFile(io.BytesIO(z)).namelist())
    assert {"handlers.py", "sdk/__init__.py", "sdk/_task.py", "sdk/_cleanup.py", "funcsion_rpc/client.py",
            "funcsion_errors/__init__.py", "storage_functions/exceptions.py", "wds/__init__.py"} <= names
    # nothing a task does not import: no server, daemon, storage runtime, platform, invoker, deploy or COS
    # code (COS-tier and persisted copies go through the daemon)
    assert not any(n.startswith(("sdk/cli/", "sdk/local/", "sdk/deploy/", "storage_functions/local/",
                                 "storage_functions/daemon/", "storage_functions/runtime/", "metadata_server/",
                                 "storage_functions/cos/", "hdag/", "lifetime_model/"))
                   or n in ("storage_functions/invoker.py", "storage_functions/deploy.py") for n in names), names
    assert "sdk/torch.py" not in names  # torch is no layer package: training code stays out of task Lambdas
    assert "inputs.py" not in names  # funcsion run makes a run's inputs with it, on the developer's machine
    assert build_task_zip(example_paths["wordcount"].parent) == z  # reproducible


def test_task_zip_carries_the_handlers_modules_and_what_they_import(example_paths: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    from sdk.deploy._zip import own_modules

    (tmp_path / "handlers.py").write_text("import helper\nfrom util import x\n")
    (tmp_path / "helper.py").write_text("def f():\n    import deep\n")
    for name in ("util", "deep", "unused", "inputs"):
        (tmp_path / f"{name}.py").write_text("x = 1\n")
    got = [p.name for p in own_modules(tmp_path, ["handlers:map", "sdk._cleanup:handler"])]
    assert got == ["deep.py", "handlers.py", "helper.py", "util.py"]
    assert [p.name for p in own_modules(tmp_path)] == ["deep.py", "handlers.py", "helper.py", "unused.py", "util.py"]
    gg = example_paths["wordcount"].parent.parent / "gg_compile"
    names = set(zipfile.ZipFile(io.BytesIO(build_task_zip(gg, ["handlers:compile"]))).namelist())
    assert "handlers.py" in names and not {"inputs.py", "cproject.py"} & names  # cproject makes inputs only


def test_deploy_wds_shorthand_is_deploy_workflow(example_paths: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    wc = str(example_paths["wordcount"])
    opts = ["--target", "local", "--state-dir", str(tmp_path), "--json"]
    with Stack(Config.load(state_dir=str(tmp_path), env={}), metadata_port=0, daemon_port=0) as st:
        st.write_stack_file()
        assert main(["deploy", wc, *opts]) == 0
        short = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert main(["deploy", "workflow", wc, *opts]) == 0
        long = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert short == long == {"workflow": short["workflow"], "target": "local", "metadata": st.endpoints.metadata}
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "--help"])
    assert exit_info.value.code == 0
    assert "funcsion deploy WDS" in " ".join(capsys.readouterr().out.split())


def test_deploy_shorthand_with_an_unknown_file_is_a_clear_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.wds.json"
    assert main(["deploy", str(missing), "--target", "local", "--state-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"funcsion deploy: {str(missing)!r} is neither a subcommand (storage, workflow) nor a WDS file" in err
    assert "no such file" in err and "Traceback" not in err


def test_long_form_with_a_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "workflow", str(tmp_path / "missing.wds.json"), "--target", "local",
              "--state-dir", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "missing.wds.json: no such workflow description file" in err and "Traceback" not in err
