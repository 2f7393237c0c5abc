"""One forward step's plan: which sequences take how many new tokens, packed in one tensor.

`StepBatch` is the frozen, torch-free description a scheduler emits (sequence slot, tokens
already cached, tokens to compute now, whether logits are wanted). `prepare_step` turns it
into the index tensors and masks the forward pass needs, once, outside the timed region
(in a serving loop that is the per-step CPU overhead the simulator's `step_overhead_s`
accounts for). Packed row order is batch order: sequence i's new tokens are rows
`offset_i .. offset_i + new_tokens_i - 1`.

A sequence with `new_tokens == 1` joins its pool's batched decode group (a prefill chunk of
one token is the same computation); every other sequence is a prefill segment attended on
its own, causally over its cached prefix and its new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from chunksim.decoder.kv import KVPool

ATTENTION_BACKEND = "sdpa-per-sequence+cpu-prefix-merge"
"""Profile `attention_backend`: SDPA per prefill segment, one batched SDPA per decode group;
on CPU a chunk after cached context attends the cache and itself in two flash calls merged
by log-sum-exp (older profiles read "sdpa-per-sequence": one masked call)."""


def cpu_flash():
    """torch's CPU flash-attention op that also returns the log-sum-exp (None where this
    torch lacks it: prefill after cached context then takes the masked SDPA path)."""
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


@dataclass(frozen=True, slots=True)
class SeqSlice:
    """One sequence's share of a step."""

    slot: int
    """Slot of the sequence in its KV pool."""
    cached_tokens: int
    """Tokens of the sequence already in the KV cache; the new tokens take positions
    `cached_tokens .. cached_tokens + new_tokens - 1`."""
    new_tokens: int
    """Tokens computed this step: a prefill chunk's length, or 1 for a decode."""
    needs_logits: bool = True
    """Whether the step returns logits for this sequence's last new token (False for a
    prefill chunk that does not finish its prompt)."""
    pool: int = 0
    """Index of the pool holding the slot, in the pools handed to the step."""


@dataclass(frozen=True)
class StepBatch:
    """The sequences of one forward pass, in packed-row order."""

    seqs: tuple[SeqSlice, ...]
    """Sequences of the step; each (pool, slot) at most once."""

    def __post_init__(self) -> None:
        if not self.seqs:
            raise ValueError("StepBatch has no sequences; a step needs at least one")
        seen: set[tuple[int, int]] = set()
        for i, s in enumerate(self.seqs):
            if s.new_tokens < 1 or s.cached_tokens < 0 or s.slot < 0 or s.pool < 0:
                raise ValueError(
                    f"StepBatch seq {i}: new_tokens={s.new_tokens}, cached_tokens="
                    f"{s.cached_tokens}, slot={s.slot}, pool={s.pool}; need new_tokens >= 1 "
                    f"and the others >= 0"
                )
            if (s.pool, s.slot) in seen:
                raise ValueError(f"StepBatch seq {i}: pool {s.pool} slot {s.slot} appears "
                                 f"twice; give each sequence one entry per step")
            seen.add((s.pool, s.slot))

    @property
    def total_tokens(self) -> int:
        """Rows of the packed token tensor."""
        return sum(s.new_tokens for s in self.seqs)

    @property
    def logits_count(self) -> int:
        """Rows of the returned logits."""
        return sum(s.needs_logits for s in self.seqs)


@dataclass(frozen=True)
class KVWrite:
    """Where the new K/V rows of one pool go: `pool.k[layer][slot_idx, :, pos_idx] = k[rows]`."""

    pool: int
    rows: slice | torch.Tensor
    slot_idx: torch.Tensor
    pos_idx: torch.Tensor


@dataclass(frozen=True)
class PrefillSegment:
    """A multi-token sequence attended alone: causal over its cache plus its new tokens."""

    rows: slice
    pool: int
    slot: int
    kv_end: int
    """Keys attended: cached + new tokens."""
    mask: object | None
    """None = plain causal (nothing cached) or, with `cached`, the CPU's split attention;
    else a lower-right causal mask/bias."""
    cached: int = 0
    """Keys before the new tokens. With no mask, attention.attend runs them as a second,
    unmasked call and merges the two by log-sum-exp (CPU; attention.prefix_attention)."""


@dataclass(frozen=True)
class DecodeGroup:
    """Single-token sequences of one pool attended in one batched call."""

    rows: slice | torch.Tensor
    pool: int
    slots: slice | torch.Tensor
    kv_end: int
    """Longest key span in the group (cached + 1)."""
    mask: torch.Tensor | None
    """`[B, 1, 1, kv_end]` bool (True = attend) when lengths differ; None when equal."""
    members: int = 0
    """B: the group's sequences (its SDPA call reads B x kv_end key positions)."""
    kv_tokens: int = 0
    """Key positions the members need (sum of cached + 1), what a paged kernel reads."""


@dataclass(frozen=True)
class PreparedStep:
    """Device-side index tensors and masks of one `StepBatch`, built by `prepare_step`."""

    batch: StepBatch
    positions: torch.Tensor
    """`[T]` RoPE position of every packed row."""
    writes: tuple[KVWrite, ...]
    prefills: tuple[PrefillSegment, ...]
    decode_groups: tuple[DecodeGroup, ...]
    logits_rows: torch.Tensor
    """`[n_logits]` packed rows whose hidden state goes through the LM head."""
    cuda_kernels: bool
    """CUDA-style prefill attention: a CausalBias instead of a bool mask, KV heads repeated
    instead of `enable_gqa` (chosen by device; tests force it on CPU)."""


def _as_index(values: list[int], device: torch.device) -> slice | torch.Tensor:
    """A slice when `values` is a contiguous ascending run (a zero-copy view), else a tensor."""
    if values == list(range(values[0], values[0] + len(values))):
        return slice(values[0], values[0] + len(values))
    return torch.tensor(values, dtype=torch.long, device=device)


def prepare_step(batch: StepBatch, pools: KVPool | list[KVPool], device: torch.device | str,
                 cuda_kernels: bool | None = None) -> PreparedStep:
    """Check `batch` against the pools and build its index tensors and masks on `device`.
    `cuda_kernels` defaults to whether `device` is a GPU."""
    pools = [pools] if isinstance(pools, KVPool) else list(pools)
    device = torch.device(device)
    if cuda_kernels is None:
        cuda_kernels = device.type == "cuda"
    positions: list[int] = []
    write_rows: dict[int, list[int]] = {}
    write_slots: dict[int, list[int]] = {}
    prefills: list[PrefillSegment] = []
    decodes: dict[int, list[tuple[int, SeqSlice]]] = {}
    logits_rows: list[int] = []
    row = 0
    for i, s in enumerate(batch.seqs):
        if s.pool >= len(pools) or s.slot >= pools[s.pool].slots:
            raise ValueError(f"StepBatch seq {i}: pool {s.pool} slot {s.slot} does not exist "
                             f"({len(pools)} pool(s)); allocate enough slots")
        end = s.cached_tokens + s.new_tokens
        if end > pools[s.pool].capacity_tokens:
            raise ValueError(f"StepBatch seq {i}: needs {end} cached tokens but pool {s.pool} "
                             f"holds {pools[s.pool].capacity_tokens} per slot; use a bigger pool")
        positions.extend(range(s.cached_tokens, end))
        write_rows.setdefault(s.pool, []).extend(range(row, row + s.new_tokens))
        write_slots.setdefault(s.pool, []).extend([s.slot] * s.new_tokens)
        if s.new_tokens == 1:
            decodes.setdefault(s.pool, []).append((row, s))
        else:
            prefills.append(PrefillSegment(
                rows=slice(row, row + s.new_tokens), pool=s.pool, slot=s.slot, kv_end=end,
                mask=_prefill_mask(s.new_tokens, s.cached_tokens, device, cuda_kernels),
                cached=s.cached_tokens,
            ))
        row += s.new_tokens
        if s.needs_logits:
            logits_rows.append(row - 1)
    pos = torch.tensor(positions, dtype=torch.long, device=device)
    writes = tuple(
        KVWrite(pool=p, rows=_as_index(rows, device),
                slot_idx=torch.tensor(write_slots[p], dtype=torch.long, device=device),
                pos_idx=pos[torch.tensor(rows, dtype=torch.long, device=device)])
        for p, rows in write_rows.items()
    )
    groups = tuple(_decode_group(p, members, device) for p, members in decodes.items())
    return PreparedStep(
        batch=batch, positions=pos, writes=writes, prefills=tuple(prefills),
        decode_groups=groups,
        logits_rows=torch.tensor(logits_rows, dtype=torch.long, device=device),
        cuda_kernels=cuda_kernels,
    )


def _prefill_mask(new_tokens: int, cached_tokens: int, device: torch.device,
                  cuda_kernels: bool) -> object | None:
    """Lower-right causal mask: new token i sees keys 0 .. cached_tokens + i."""
    if cached_tokens == 0:
        return None  # square: SDPA's own is_causal (top-left == bottom-right)
    if cuda_kernels:
        # A CausalBias runs in the memory-efficient kernel without materialising n x L.
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(new_tokens, cached_tokens + new_tokens)
    if cpu_flash() is not None:
        return None  # attention.prefix_attention: no n x L mask to build or read
    ones = torch.ones(new_tokens, cached_tokens + new_tokens, dtype=torch.bool, device=device)
    return ones.tril(diagonal=cached_tokens)


def _decode_group(pool: int, members: list[tuple[int, SeqSlice]],
                  device: torch.device) -> DecodeGroup:
    kv_lens = [s.cached_tokens + 1 for _, s in members]
    kv_end = max(kv_lens)
    mask = None
    if min(kv_lens) != kv_end:
        lens = torch.tensor(kv_lens, device=device)
        mask = (torch.arange(kv_end, device=device)[None, :] < lens[:, None])[:, None, None, :]
    return DecodeGroup(
        rows=_as_index([r for r, _ in members], device), pool=pool,
        slots=_as_index([s.slot for _, s in members], device), kv_end=kv_end, mask=mask,
        members=len(members), kv_tokens=sum(kv_lens),
    )
