"""What a live run records beyond `EngineCore`'s step and request rows: per-step timings
split into forward pass and everything else, and every output token's wall time."""

from __future__ import annotations

LIVE_STEP_COLUMNS = {
    "forward_s": float,   # forward pass(es) incl. synchronize, seconds
    "launch_s": float,    # of which the host took to issue the pass(es), before synchronize
    "overhead_s": float,  # step duration minus forward_s: scheduling, input prep, sampling
    "busy": bool,         # the step started when the previous one ended (no idle wait)
    "passes": int,        # forward passes in the step (2 for a two-pass step with both parts)
    "decode_padding": float,  # key positions the decode attention read / those it needed
    "decode_groups": int,  # batched decode attention calls (one per KV pool with decodes)
}


def decode_attention(prepared) -> tuple[float, int]:
    """(padding, groups) of a step's decode attention, from its prepared passes
    (`decoder.step.PreparedStep`). Each decode group is one SDPA call padded to its
    longest context, so it reads members x longest key positions; padding = read / needed
    (1.0: no decodes, or equal lengths). The table's decode points are one group of equal
    lengths, and a paged engine reads each context once in one call, so padding and extra
    groups are live costs the table does not hold."""
    groups = [g for p in prepared for g in p.decode_groups]
    needed = sum(g.kv_tokens for g in groups)
    read = sum(g.members * g.kv_end for g in groups)
    return (read / needed if needed else 1.0), len(groups)


class LiveStepLog:
    """Column lists, one entry per step, aligned with `EngineCore.steps`."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in LIVE_STEP_COLUMNS}

    def append(self, forward_s: float, overhead_s: float, busy: bool, passes: int,
               launch_s: float, decode: tuple[float, int]) -> None:
        c = self.cols
        c["decode_padding"].append(decode[0])
        c["decode_groups"].append(decode[1])
        c["forward_s"].append(forward_s)
        c["launch_s"].append(launch_s)
        c["overhead_s"].append(overhead_s)
        c["busy"].append(busy)
        c["passes"].append(passes)

    def add_to(self, steps) -> None:
        """Append the columns to the core's steps frame (same row count)."""
        if len(steps) != len(self.cols["forward_s"]):
            raise RuntimeError(f"{len(steps)} core steps vs {len(self.cols['forward_s'])} "
                               "live step timings (a bookkeeping bug)")
        for k, t in LIVE_STEP_COLUMNS.items():
            steps[k] = [t(v) for v in self.cols[k]]


class TokenLog:
    """One row per output token: which request, which output index, when, which id."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, float, int, int]] = []

    def add(self, request_id: int, output_index: int, time_s: float, token_id: int,
            step: int) -> None:
        self.rows.append((request_id, output_index, time_s, token_id, step))

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=["request_id", "output_index", "time_s",
                                                "token_id", "step"])
