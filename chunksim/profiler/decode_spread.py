"""What unequal contexts cost a decode step, against the table's equal-length points.

The profiler times a decode point with every sequence at the same context `kv_len`: one
unmasked SDPA call per pool. A serving loop's decodes have different contexts, so its
decode group is padded to the longest and masked (`decoder.step.DecodeGroup`): the call
reads members x longest key positions, and on CUDA a masked call cannot use the flash
kernel (no `attn_mask` there) and goes to the memory-efficient one. The simulator prices
a decode step by its mean context, so this difference is unpriced.

`decode_spread_ratios` times, per (decodes, mean context, spread), the equal-length step
and a step whose contexts spread evenly over mean x [1 - spread, 1 + spread] (same mean,
same token count, adjacent slots of one pool, as the live loop batches them), both warm,
in alternating rounds (the machine's drift cancels), and returns the ratio. A spread of a
few tokens isolates the mask (the kernel path) from the padding. `benchmarks/validate_gpu.py`
runs it before the GPU suite; figures: docs/results/.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from chunksim.decoder.kv import KVPool
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step
from chunksim.profiler.timing import measure

CASES = ((8, 512, 0.5), (32, 1024, 0.002), (32, 1024, 0.25), (32, 1024, 0.5),
         (128, 1024, 0.002), (128, 1024, 0.5))
"""(decodes, mean context in tokens, spread) timed by default: spread 0.002 is a mask with
next to no padding; 0.5 pads the read to ~1.5x. The largest case's KV pool holds 128 x
1537 tokens: 24 GiB on Llama-3.1-8B (128 KiB a token), beside its 16 GB of weights."""


def spread_lengths(decodes: int, mean_kv: int, spread: float) -> list[int]:
    """`decodes` cached lengths evenly spaced over mean x [1 - spread, 1 + spread], with
    the mean exactly `mean_kv` (the rounding rest goes to the longest)."""
    if decodes == 1 or spread == 0:
        return [mean_kv] * decodes
    lo, hi = mean_kv * (1 - spread), mean_kv * (1 + spread)
    lens = [max(1, round(lo + (hi - lo) * i / (decodes - 1))) for i in range(decodes)]
    lens[-1] += mean_kv * decodes - sum(lens)
    return lens


def _batch(lengths: list[int]) -> StepBatch:
    return StepBatch(tuple(SeqSlice(slot=i, cached_tokens=c, new_tokens=1)
                           for i, c in enumerate(lengths)))


def decode_spread_ratios(model, device: str, dtype: torch.dtype, sync: Callable[[], None],
                         cases: tuple[tuple[int, int, float], ...] = CASES, rounds: int = 3,
                         warmup: int = 3, repeats: int = 10) -> list[dict]:
    """Per case: `decodes`, `mean_kv`, `spread`, the padded read (longest x decodes over
    the sum of contexts), the median forward time of the equal-length and the spread step
    (s; median over `rounds` alternating rounds of `measure`), and `ratio` = spread /
    equal. KV pools are allocated per case and freed after it."""
    cfg = model.cfg
    out = []
    first = True
    for decodes, mean_kv, spread in cases:
        equal = [mean_kv] * decodes
        spread_lens = spread_lengths(decodes, mean_kv, spread)
        capacity = max(spread_lens) + 1
        if capacity > cfg.max_position:
            raise ValueError(f"case ({decodes}, {mean_kv}, {spread}): contexts up to "
                             f"{capacity} tokens exceed the model's max_position "
                             f"{cfg.max_position}")
        row = {"decodes": decodes, "mean_kv": mean_kv, "spread": spread,
               "padded_read": (max(spread_lens) + 1) * decodes / sum(c + 1 for c in spread_lens)}
        pools = [KVPool(cfg, decodes, capacity, device, dtype)]
        if first:  # the process's first steps run slow: not what is compared
            _median_s(model, equal, pools, device, sync, warmup, repeats)
            first = False
        times: dict[str, list[float]] = {"equal": [], "spread": []}
        for _ in range(rounds):
            for label, lengths in (("equal", equal), ("spread", spread_lens)):
                times[label].append(_median_s(model, lengths, pools, device, sync, warmup,
                                              repeats))
        del pools  # the next case allocates its own
        row["equal_s"] = float(np.median(times["equal"]))
        row["spread_s"] = float(np.median(times["spread"]))
        row["ratio"] = row["spread_s"] / row["equal_s"]
        out.append(row)
    return out


def _median_s(model, lengths: list[int], pools: list[KVPool], device: str,
              sync: Callable[[], None], warmup: int, repeats: int) -> float:
    prepared = prepare_step(_batch(lengths), pools, device)
    ids = torch.zeros(len(lengths), dtype=torch.long, device=device)
    with torch.inference_mode():
        return measure(lambda: model.forward_step(ids, prepared, pools), warmup, repeats,
                       sync).median_s


def format_decode_spread(rows: list[dict]) -> str:
    """One line per case: equal vs spread forward time and their ratio."""
    head = (f"{'decodes':>8}{'mean kv':>9}{'spread':>8}{'padded read':>13}{'equal ms':>10}"
            f"{'spread ms':>11}{'ratio':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['decodes']:>8}{r['mean_kv']:>9}{r['spread']:>8.3g}"
                     f"{r['padded_read']:>12.2f}x"
                     f"{r['equal_s'] * 1e3:>10.2f}{r['spread_s'] * 1e3:>11.2f}"
                     f"{r['ratio']:>7.2f}x")
    return "\n".join(lines)
