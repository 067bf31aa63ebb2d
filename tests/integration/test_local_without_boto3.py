"""The local stack runs with the ``local`` extra only: no boto3 (the ``aws`` extra) is
imported anywhere a local run goes, the storage functions' fork server included (it once
preloaded boto3, so every run printed ``sion-0: no fork server (... No module named
'boto3')`` and its instances started fresh interpreters). boto3 is made unimportable for the
CLI and every process it starts by a ``sitecustomize`` on ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BAD = Path(__file__).resolve().parent / "badwf"

BLOCKER = '''
import sys


class _NoBoto:
    """boto3 and botocore are not installed, as with only the local extra."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("boto3", "botocore"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoBoto())
'''


def test_a_local_run_needs_no_boto3(tmp_path: Path) -> None:
    blocker = tmp_path / "noboto"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    wf = tmp_path / "wf"
    shutil.copytree(BAD, wf)
    (wf / "BAD_MODE").write_text("ok")
    (wf / "src.txt").write_text("payload")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO)])}
    check = subprocess.run([sys.executable, "-c", "import boto3"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode != 0 and "No module named 'boto3'" in check.stderr  # the blocker works
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "run", str(wf / "bad.wds.json"), "--input",
                           f"src={wf / 'src.txt'}", "--no-progress", "--json", "--state-dir", str(tmp_path / "state")],
                          env=env, capture_output=True, text=True, timeout=180, cwd=wf)
    assert proc.returncode == 0, proc.stderr
    assert "boto" not in proc.stderr and "no fork server" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["status"] == "succeeded" and report["memory"]["leaked_bytes"] == 0
    log = (tmp_path / "state" / "logs").glob("sion-*.log")
    assert not any("boto" in p.read_text() for p in log)
