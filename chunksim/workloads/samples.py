"""Paths of the small trace samples shipped in `chunksim/data/workloads/`."""

from __future__ import annotations

from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "data" / "workloads"
SAMPLES = {
    "azure-conv": "azure_conv_2023_sample.csv",
    "azure-code": "azure_code_2023_sample.csv",
    "mooncake-conversation": "mooncake_conversation_sample.jsonl",
    "mooncake-synthetic": "mooncake_synthetic_sample.jsonl",
    "burstgpt-v1": "burstgpt_v1_synthetic.csv",
    "burstgpt-v3": "burstgpt_v3_synthetic.csv",
    "sharegpt-lengths": "sharegpt_lengths_sample.csv",
}
"""Short name -> file name (see that folder's README for sources and licenses)."""


def sample_path(name: str) -> Path:
    """Path of a shipped sample by short name (e.g. `azure-conv`)."""
    if name not in SAMPLES:
        raise ValueError(f"unknown sample {name!r}; choose one of {sorted(SAMPLES)}")
    return SAMPLES_DIR / SAMPLES[name]
