"""Write requests' timings as a `vllm bench serve --save-result --save-detailed` JSON: how
the synthetic ground-truth test and the shipped example file are made (simulated, not
measured). Each request's token gaps are its TPOT repeated (the simulator's records pool
the gaps), so TTFT, TPOT and E2E are exact and the ITL distribution is not."""

from __future__ import annotations

import numpy as np


def vllm_result(requests, request_rate: float | str = "inf", burstiness: float = 1.0,
                label: str | None = None, start_times: bool = True,
                model_id: str | None = None) -> dict:
    """The result JSON (dict) for a simulator requests frame (rejected rows left out)."""
    done = requests[~requests["rejected"].to_numpy()]
    arrival = done["arrival_s"].to_numpy(float)
    ttft = done["first_token_s"].to_numpy(float) - arrival
    e2el = done["finish_s"].to_numpy(float) - arrival
    out = done["generated_tokens"].to_numpy(int)
    itls = [[float((e - t) / (n - 1))] * int(n - 1) if n > 1 else []
            for t, e, n in zip(ttft, e2el, out, strict=True)]
    duration = float((arrival + e2el).max() - arrival.min())
    doc = {
        "date": "19700101-000000", "endpoint_type": "openai", "backend": "openai",
        "label": label, "model_id": model_id, "tokenizer_id": model_id,
        "num_prompts": int(len(done)), "request_rate": request_rate,
        "burstiness": burstiness, "max_concurrency": None,
        "duration": duration, "completed": int(len(done)), "failed": 0,
        "total_input_tokens": int(done["prompt_tokens"].sum()),
        "total_output_tokens": int(out.sum()),
        "request_throughput": len(done) / duration,
        "output_throughput": float(out.sum()) / duration,
        "input_lens": [int(x) for x in done["prompt_tokens"]],
        "output_lens": [int(x) for x in out],
        "ttfts": [float(x) for x in ttft],
        "itls": itls,
        "latencies": [float(x) for x in e2el],
        "errors": [""] * len(done),
    }
    if start_times:
        doc["start_times"] = [float(x) + 1000.0 for x in arrival]  # perf_counter-like
    for name, v in (("ttft", ttft), ("tpot", (e2el - ttft)[out > 1] / (out[out > 1] - 1)),
                    ("e2el", e2el)):
        doc[f"mean_{name}_ms"] = float(np.mean(v)) * 1e3
        doc[f"median_{name}_ms"] = float(np.median(v)) * 1e3
        doc[f"p99_{name}_ms"] = float(np.percentile(v, 99)) * 1e3
    return doc
