"""A missing optional dependency (torch, aiconfigurator-core, vLLM) is one line naming the
extra that installs it, never an internal error; without torch the simulator runs and
the suite's tests that need torch are skipped with one line why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunksim.cli import errors

ROOT = Path(__file__).resolve().parents[1]
BLOCK_TORCH = """
import runpy, sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
"""Runs module argv[1] with argv[2:] in a process where `import torch` fails, as on an
install without the `profile` extra."""


def without_torch(module: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH, module, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [["profile"], ["profile", "--kind", "components"]])
def test_sim_profile_without_torch_names_the_extra_in_one_line(tmp_path, args):
    out = tmp_path / "p.csv"
    done = without_torch("chunksim.cli", *args, "--out", str(out))
    assert done.returncode == errors.INPUT_EXIT, done.stderr
    assert done.stderr == ("error: sim profile needs torch, an optional dependency that is "
                           "not installed: pip install 'chunksim[profile]'\n")
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_sim_run_needs_no_torch(tmp_path):
    done = without_torch("chunksim.cli", "run", "--num-requests", "20", "--out",
                         str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "summary.json").is_file()


def test_torch_marked_tests_are_skipped_without_torch_with_one_line_why():
    done = without_torch("pytest", "tests/test_component_points.py", "-q", "-rs", "-m",
                         "not slow", "-p", "no:cacheprovider")
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [ln for ln in done.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skipped and all("torch is not installed (pip install 'chunksim[profile]')" in ln
                           for ln in skipped)
    assert " passed" in done.stdout.splitlines()[-1]


@pytest.mark.parametrize("module,package,extra", [
    ("torch", "torch", "profile"),
    ("aiconfigurator_core", "aiconfigurator-core", "aic"),
    ("vllm", "vLLM", "vllm"),
])
def test_each_missing_extra_is_one_line_naming_it(monkeypatch, module, package, extra):
    monkeypatch.setattr(sys, "argv", ["sim", "profile", "--out", "p.csv"])
    exc = ModuleNotFoundError(f"No module named {module!r}", name=module)
    line, code = errors.describe(exc)
    assert code == errors.INPUT_EXIT
    assert line == (f"sim profile needs {package}, an optional dependency that is not "
                    f"installed: pip install 'chunksim[{extra}]'")
    try:  # raised while handling it, or from it: still the missing extra
        try:
            raise exc
        except ImportError as inner:
            raise RuntimeError("could not start the engine") from inner
    except RuntimeError as outer:
        assert errors.describe(outer) == (line, code)


@pytest.mark.parametrize("name", ["torch._C", "yaml", None])
def test_a_module_missing_elsewhere_is_still_a_bug(monkeypatch, tmp_path, name):
    """Only the extra's own top-level package missing is the user's to install; a part of
    an installed package missing, or a required dependency, is a bug report."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    line, code = errors.describe(ModuleNotFoundError("No module named x", name=name))
    assert code == errors.BUG_EXIT and line.startswith("internal error")
