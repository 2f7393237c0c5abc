"""A mixture-of-experts FFN with random weights: router, top-k of the routed experts,
shared experts (Mixtral, Qwen3-MoE, DeepSeek-V3 without its grouped routing).

Eager, as a reference MoE layer runs without a fused kernel: softmax over the router's
logits, top-k, the k weights renormalised to sum to 1; then, per routed expert, the rows
routed to it are gathered, pass its SwiGLU and are added back, weighted
(`expert_apply`, what the component profiler times as `expert` at n rows). An expert no
row chose costs nothing. Shared experts run on every row, as one SwiGLU of their summed
width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from chunksim.decoder.config import MoeConfig


class MoeFFN(nn.Module):
    """Router and experts of one layer; weights stacked per expert."""

    def __init__(self, hidden: int, moe: MoeConfig):
        super().__init__()
        self.moe = moe
        e, w = moe.num_experts, moe.expert_intermediate_size
        self.router = nn.Linear(hidden, e, bias=False)
        self.w_gate = nn.Parameter(torch.empty(e, w, hidden))
        self.w_up = nn.Parameter(torch.empty(e, w, hidden))
        self.w_down = nn.Parameter(torch.empty(e, hidden, w))
        shared = moe.shared_experts * w
        self.shared_gate = nn.Linear(hidden, shared, bias=False) if shared else None
        self.shared_up = nn.Linear(hidden, shared, bias=False) if shared else None
        self.shared_down = nn.Linear(shared, hidden, bias=False) if shared else None

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [T, k], expert ids [T, k]) of each row's top-k experts."""
        probs = F.softmax(self.router(h).float(), dim=-1)
        weights, ids = torch.topk(probs, self.moe.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(h.dtype), ids

    def expert_apply(self, e: int, h: torch.Tensor, rows: torch.Tensor,
                     weights: torch.Tensor, out: torch.Tensor) -> None:
        """Expert `e` on rows `rows` of `h` (weighted by `weights` [n]), added into `out`."""
        x = h.index_select(0, rows)
        y = F.silu(x @ self.w_gate[e].T) * (x @ self.w_up[e].T)
        out.index_add_(0, rows, (y @ self.w_down[e].T) * weights[:, None])

    def forward(self, h: torch.Tensor, routed: bool = True) -> torch.Tensor:
        """The layer's FFN output. `routed=False` leaves the routed experts out (their
        dispatch included): what the profiler's `dense` component times of a MoE layer,
        the experts being the `expert` component."""
        weights, ids = self.route(h)
        out = torch.zeros_like(h)
        flat = ids.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.moe.num_experts).tolist()
        rows_all = order // self.moe.top_k
        w_all = weights.flatten()[order]
        start = 0
        for e, n in enumerate(counts):
            if n and routed:
                self.expert_apply(e, h, rows_all[start:start + n], w_all[start:start + n],
                                  out)
                start += n
        if self.shared_gate is not None:
            out += self.shared_down(F.silu(self.shared_gate(h)) * self.shared_up(h))
        return out
