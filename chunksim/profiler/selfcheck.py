"""Check the mixed step on a device against the fp64 CPU reference before trusting timings.

A profile of a wrong forward pass (a mask off by one, a KV head mis-grouped) would time the
wrong work; the GPU benchmark runs this first and refuses to profile if it fails.
"""

from __future__ import annotations

import torch

from chunksim.decoder.config import ModelConfig
from chunksim.decoder.kv import KVPool
from chunksim.decoder.model import build_model
from chunksim.decoder.reference import reference_logits
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step

CHECK_MODEL = ModelConfig(name="selfcheck", n_layers=2, hidden_size=128, n_heads=4,
                          n_kv_heads=2, head_dim=32, intermediate_size=256, vocab_size=512,
                          max_position=1024)
"""Small, with GQA, head_dim a multiple of 8 (what fused GPU kernels require)."""

TOLERANCE = {"float32": 2e-3, "bfloat16": 6e-2, "float16": 2e-2}
"""Max error relative to the largest reference logit, per dtype (fp32 allows TF32)."""


@torch.no_grad()
def mixed_step_error(device: str, dtype: str, seed: int = 0,
                     cuda_kernels: bool | None = None) -> float:
    """Relative max error of one mixed step (a 96-token chunk over 160 cached tokens plus
    three decodes of unequal lengths, after filling the caches with a prefill step)."""
    cfg = CHECK_MODEL
    tdtype = getattr(torch, dtype)
    model = build_model(cfg, device, tdtype, seed=seed)
    ref = build_model(cfg, "cpu", torch.float64, seed=seed)
    ref.load_state_dict({k: v.double().cpu() for k, v in model.state_dict().items()})
    gen = torch.Generator().manual_seed(seed)
    lens = {0: 160 + 96, 1: 301, 2: 77, 3: 301}  # tokens per slot after the step
    hist = {s: torch.randint(0, cfg.vocab_size, (n,), generator=gen) for s, n in lens.items()}
    pools = [KVPool(cfg, 4, 320, device, tdtype)]
    cached = {0: 160, 1: 300, 2: 76, 3: 300}
    with torch.inference_mode():
        fill = StepBatch(tuple(SeqSlice(s, 0, cached[s], needs_logits=False) for s in hist))
        tokens = torch.cat([hist[s][: cached[s]] for s in hist]).to(device)
        model.forward_step(tokens, prepare_step(fill, pools, device, cuda_kernels), pools)
        step = StepBatch((SeqSlice(0, 160, 96), SeqSlice(1, 300, 1), SeqSlice(2, 76, 1),
                          SeqSlice(3, 300, 1)))
        tokens = torch.cat([hist[s][cached[s]:] for s in hist]).to(device)
        got = model.forward_step(tokens, prepare_step(step, pools, device, cuda_kernels), pools)
    want = torch.stack([reference_logits(ref, hist[s])[-1] for s in hist])
    return ((got.double().cpu() - want).abs().max() / want.abs().max()).item()


def check_mixed_step(device: str, dtype: str, cuda_kernels: bool | None = None) -> float:
    """`mixed_step_error`, raising RuntimeError when it exceeds the dtype's tolerance."""
    err = mixed_step_error(device, dtype, cuda_kernels=cuda_kernels)
    if not err <= TOLERANCE[dtype]:
        raise RuntimeError(f"mixed step on {device}/{dtype} differs from the reference by "
                           f"{err:.3g} (relative; tolerance {TOLERANCE[dtype]}); the attention "
                           f"path is wrong on this device, so its timings would be too")
    return err
