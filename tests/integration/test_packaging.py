"""Packaging, checked in fresh virtual environments (slow: each builds a venv).

- A plain ``pip install`` (no extras) gives ``import sdk`` without torch,
  matplotlib or networkx, and a working ``funcsion --version`` / ``--help``;
  a command that needs an extra says which one.
- Each deployment zip, unpacked into a bare venv holding only the packages
  its Lambda layers must hold (none for storage functions), imports every
  module it carries and every handler entry point, as Lambda would with the
  zip's directory on ``sys.path``; an example's layer also holds what its
  ``requirements.txt`` declares.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import wds
from sdk.deploy._zip import TASK_LAYER_PACKAGES, build_task_zip
from storage_functions.deploy import RUNTIME_HANDLER, build_zip

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
_SKIP = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "build", "dist", "*.egg-info", ".funcsion",
                               ".pytest_cache", ".mypy_cache", ".hypothesis", "*.png")


def _venv(path: Path, *packages: str) -> Path:
    """A fresh venv at ``path`` with ``packages`` pip-installed; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    python = path / "bin" / "python"
    if packages:
        res = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
    return python


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # -I: no PYTHONPATH, no user site, no script directory: only the venv and what we put on sys.path
    return subprocess.run([str(python), "-I", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_plain_install_imports_sdk_and_runs_the_cli(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=_SKIP)  # pip builds in the source tree: keep the checkout clean
    python = _venv(tmp_path / "venv", str(src))
    bindir = python.parent
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]

    res = subprocess.run([str(bindir / "funcsion"), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"funcsion {version}", res.stderr
    res = subprocess.run([str(bindir / "funcsion"), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and "inspect" in res.stdout and "deploy" in res.stdout, res.stderr
    for group in ("serve", "bench", "deploy"):
        res = subprocess.run([str(bindir / "funcsion"), group, "--help"], capture_output=True, text=True,
                             cwd=tmp_path)
        assert res.returncode == 0, res.stderr

    res = _run(python, "-c", "import sys, sdk, sdk._cleanup; print(sdk.__file__); "
               "print(sorted(m for m in ('torch', 'matplotlib', 'networkx', 'tqdm', 'boto3') if m in sys.modules))",
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    where, loaded = res.stdout.splitlines()
    assert str(tmp_path / "venv") in where and loaded == "[]"

    # a command that needs an extra names it instead of a traceback
    res = subprocess.run([str(bindir / "funcsion"), "inspect", str(EXAMPLES / "wordcount" / "wordcount.wds.json")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and "pip install 'funcsion[local]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr

    # PEP 561: every package ships its py.typed marker
    res = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
    site = Path(res.stdout.strip())
    packages = ("funcsion_errors", "wds", "hdag", "funcsion_rpc", "lifetime_model", "metadata_server",
                "storage_functions", "sdk")
    assert [p for p in packages if not (site / p / "py.typed").is_file()] == []


def _modules_in(names: list[str]) -> list[str]:
    """Importable module names of the .py files in a zip."""
    out = []
    for n in names:
        if n.endswith(".py"):
            mod = n[:-3].replace("/", ".")
            out.append(mod[: -len(".__init__")] if mod.endswith(".__init__") else mod)
    return sorted(out)


def _import_all(python: Path, root: Path, modules: list[str], handlers: list[str]) -> None:
    """In ``python``, with only ``root`` added to sys.path (Lambda's /var/task), import every
    module and resolve every ``module:function`` handler to a callable from ``root``."""
    code = f"""
import importlib, sys
sys.path.insert(0, {str(root)!r})
bad = []
for m in {modules!r}:
    try:
        mod = importlib.import_module(m)
        assert (mod.__file__ or "").startswith({str(root)!r}), (m, mod.__file__)
    except Exception as exc:
        bad.append(f"{{m}}: {{type(exc).__name__}}: {{exc}}")
for ref in {handlers!r}:
    mod, _, fn = ref.partition(":")
    try:
        assert callable(getattr(importlib.import_module(mod), fn)), ref
    except Exception as exc:
        bad.append(f"{{ref}}: {{type(exc).__name__}}: {{exc}}")
print("\\n".join(bad) or "ok")
"""
    res = _run(python, "-c", code, cwd=root)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


def test_storage_zip_imports_with_the_standard_library_alone(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    root = tmp_path / "task"
    z = zipfile.ZipFile(io.BytesIO(build_zip()))
    z.extractall(root)
    module, _, fn = RUNTIME_HANDLER.rpartition(".")
    _import_all(python, root, _modules_in(z.namelist()), [f"{module}:{fn}"])


def _requirements(example: Path) -> list[str]:
    """What an example declares its tasks need beyond the layer (``requirements.txt``)."""
    req = example / "requirements.txt"
    lines = req.read_text().splitlines() if req.is_file() else []
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_examples_extra_holds_every_examples_requirements() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["examples"]
    for example in sorted(EXAMPLES.iterdir()):
        assert set(_requirements(example)) <= set(extra), example.name


def test_task_zips_import_with_only_the_layer_packages(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv", *TASK_LAYER_PACKAGES)
    examples = [p for p in sorted(EXAMPLES.glob("*/*.wds.json")) if (p.parent / "handlers.py").is_file()]
    assert examples
    # examples that declare nothing first, in a venv with the layer alone; then each adds its own
    for wds_path in sorted(examples, key=lambda p: bool(_requirements(p.parent))):
        extra = _requirements(wds_path.parent)
        if extra:
            res = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *extra],
                                 capture_output=True, text=True, timeout=600)
            assert res.returncode == 0, res.stderr[-3000:]
        root = tmp_path / wds_path.parent.name
        z = zipfile.ZipFile(io.BytesIO(build_task_zip(wds_path.parent)))
        z.extractall(root)
        handlers = sorted({f.handler_ref for f in wds.load(wds_path).functions.values()} | {"sdk._cleanup:handler"})
        _import_all(python, root, _modules_in(z.namelist()), handlers)
