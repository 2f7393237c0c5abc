"""Regenerate the small trace samples in this folder (run by hand, never at import time).

    python chunksim/data/workloads/make_samples.py /path/to/traces

Real traces: the first ROWS rows, verbatim (a contiguous slice keeps the arrival process).
BurstGPT is not redistributed here: its two files are synthetic, in BurstGPT's v1 and v3
column layouts, with a seeded generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
ROWS = 300


def head(src: Path, dst: Path, rows: int, header: bool) -> None:
    with open(src, encoding="utf-8") as f:
        lines = [next(f) for _ in range(rows + header)]
    dst.write_text("".join(lines), encoding="utf-8")


def burstgpt(dst_v1: Path, dst_v3: Path, rows: int = 400, seed: int = 2024) -> None:
    """Synthetic BurstGPT-like rows: bursty Gamma arrivals (CV ~2), ChatGPT/GPT-4 mix,
    log-normal lengths, ~3% failed requests (0 response tokens), conversation sessions."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(0.25, 1 / (0.5 * 0.25), size=rows)  # 0.5 req/s mean, CV 2
    t = 5.0 + np.cumsum(gaps)
    model = np.where(rng.random(rows) < 0.8, "ChatGPT", "GPT-4")
    req = np.clip(rng.lognormal(6.2, 1.0, rows), 1, 30000).astype(int)
    resp = np.clip(rng.lognormal(5.4, 0.8, rows), 1, 4000).astype(int)
    resp[rng.random(rows) < 0.03] = 0
    req[rng.random(rows) < 0.005] = 0
    log = np.where(rng.random(rows) < 0.7, "Conversation log", "API log")
    session = np.cumsum(rng.random(rows) < 0.4)  # ~2.5 turns per session
    elapsed = np.round(0.3 + resp * rng.uniform(0.015, 0.04, rows), 3)
    v1 = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    v3 = [
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
        "Total tokens,Log Type"
    ]
    for i in range(rows):
        common = f"{model[i]},{req[i]},{resp[i]},{req[i] + resp[i]},{log[i]}"
        v1.append(f"{t[i]:.0f},{common}")  # v1 timestamps are whole seconds
        v3.append(f"{t[i]:.3f},{session[i]},{elapsed[i]},{common}")
    dst_v1.write_text("\n".join(v1) + "\n", encoding="utf-8")
    dst_v3.write_text("\n".join(v3) + "\n", encoding="utf-8")


def main(traces: Path) -> None:
    az = traces / "azure_llm_2023"
    mc = traces / "mooncake_fast25"
    head(az / "AzureLLMInferenceTrace_conv.csv", HERE / "azure_conv_2023_sample.csv", ROWS, True)
    head(az / "AzureLLMInferenceTrace_code.csv", HERE / "azure_code_2023_sample.csv", ROWS, True)
    head(mc / "conversation_trace.jsonl", HERE / "mooncake_conversation_sample.jsonl", ROWS, False)
    head(mc / "synthetic_trace.jsonl", HERE / "mooncake_synthetic_sample.jsonl", ROWS, False)
    head(
        traces / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        HERE / "sharegpt_lengths_sample.csv",
        500,
        True,
    )
    burstgpt(HERE / "burstgpt_v1_synthetic.csv", HERE / "burstgpt_v3_synthetic.csv")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/traces"))
