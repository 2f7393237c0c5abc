"""Time all-reduces with torch.distributed, for `--tp N --link measured`.

N processes on this machine, one per device: NCCL over N CUDA devices, or gloo on CPU
(what a CPU tensor-parallel run would use). Each all-reduces `tokens x hidden` values of
the profile's dtype, as a sharded layer does twice per step; every process times its own
calls (synchronized, warm-up first) and the slowest process's median is the figure, since
a collective ends when its last member does. Rendezvous is a file in a temporary
directory, so no port is opened. The token counts timed are the dense axis's powers of
two and its largest value; the all-reduce component interpolates between them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKENDS = {"cuda": "nccl", "cpu": "gloo"}


def measured_tokens(tokens: tuple[int, ...]) -> tuple[int, ...]:
    """The token counts timed: 1, the powers of two on the dense axis, and its largest."""
    return tuple(sorted({1, tokens[-1], *(t for t in tokens if t & (t - 1) == 0)}))


def check_devices(device: str, tp: int, cuda_devices: int) -> None:
    """ValueError naming the flags when `tp` processes cannot each have a device."""
    if device == "cuda" and cuda_devices < tp:
        raise ValueError(f"--link measured with --tp {tp} needs {tp} CUDA devices; torch "
                         f"sees {cuda_devices}. Use a link preset (--link nvlink-h100, "
                         f"pcie, ...) or give --link-gbps and --link-latency-us")


def measure_allreduce_s(device: str, tp: int, tokens: tuple[int, ...], hidden: int,
                        dtype: str, warmup: int = 3, repeats: int = 10,
                        timeout_s: float = 600.0) -> dict[int, float]:
    """{tokens: seconds of one all-reduce of tokens x hidden `dtype` values over `tp`
    processes} (the slowest process's median). The processes are `python -m` this module,
    so nothing depends on how the caller's own main module was started."""
    import torch

    check_devices(device, tp, torch.cuda.device_count() if device == "cuda" else 0)
    with tempfile.TemporaryDirectory(prefix="chunksim-allreduce-") as tmp:
        job = json.dumps({"tp": tp, "device": device, "tokens": list(tokens),
                          "hidden": hidden, "dtype": dtype, "warmup": warmup,
                          "repeats": repeats, "tmp": tmp})
        procs = [subprocess.Popen([sys.executable, "-m", __name__, str(rank), job],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True) for rank in range(tp)]
        failed = []
        for rank, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"--link measured: the all-reduce processes did not "
                                   f"finish in {timeout_s:.0f} s") from None
            if proc.returncode != 0:
                failed.append(f"rank {rank}: {err.strip().splitlines()[-1:] or '?'}")
        if failed:
            raise RuntimeError("--link measured: timing the all-reduce failed ("
                               + "; ".join(failed) + ")")
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(tp)]
    return {t: max(r[str(t)] for r in per_rank) for t in tokens}


def _worker(rank: int, tp: int, device: str, tokens: list[int], hidden: int, dtype: str,
            warmup: int, repeats: int, tmp: str) -> None:
    import torch
    import torch.distributed as dist

    if device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank)
    dist.init_process_group(BACKENDS[device], init_method=f"file://{tmp}/rendezvous",
                            rank=rank, world_size=tp)
    try:
        dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        out = {}
        for t in tokens:
            x = torch.ones(t, hidden, dtype=getattr(torch, dtype), device=dev)
            times = []
            for i in range(warmup + repeats):
                dist.barrier()
                sync()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                sync()
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            out[str(t)] = statistics.median(times)
        tmp_out = Path(tmp) / f"rank{rank}.json.part"
        tmp_out.write_text(json.dumps(out))
        os.replace(tmp_out, Path(tmp) / f"rank{rank}.json")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    job = json.loads(sys.argv[2])
    _worker(int(sys.argv[1]), job["tp"], job["device"], job["tokens"], job["hidden"],
            job["dtype"], job["warmup"], job["repeats"], job["tmp"])
