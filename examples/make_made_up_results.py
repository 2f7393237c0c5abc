"""Write the made-up `vllm bench serve` results the README's validation walk-through uses:
examples/data/results/made_up_{low,high,mid}.json. MADE UP: simulated on the bundled
llama-3.1-8b-h200 profile made slower by a known calibration (framework time 1.5 ms per
step, compute scale 1.10, memory scale 0.90) with measured step noise (--jitter), then
written in vllm bench serve's --save-detailed format. No engine ran them.

    PYTHONPATH=. python examples/make_made_up_results.py
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from chunksim.latency.calibrated import Calibration
from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.validate.bench_format import vllm_result
from chunksim.validate.calibrate import _with
from chunksim.workloads.options import WorkloadOptions, build_workload

TRUTH = Calibration(framework_s=0.0015, compute_scale=1.10, memory_scale=0.90)
RUNS = {"low": 2.0, "high": 10.0, "mid": 6.0}
OUT = Path(__file__).parent / "data" / "results"


def main() -> None:
    profile = _with(load_profile("llama-3.1-8b-h200"), TRUTH)
    cfg = RunConfig(policy="budget", chunk=2048)
    cfg = replace(cfg, engine=replace(cfg.engine, jitter=True, seed=7))
    for i, (name, rate) in enumerate(RUNS.items()):
        opts = WorkloadOptions(rate=rate, num_requests=80, prompt_mean=1500, prompt_std=1200,
                               prompt_min=64, prompt_max=6000, output_mean=48,
                               output_std=32, output_min=8, output_max=128, seed=11 + i)
        result, _ = simulate(build_workload(opts), profile, cfg)
        doc = vllm_result(result.requests, request_rate=rate, model_id="made-up/llama-3.1-8b",
                          label="MADE UP for the README: simulated, not measured")
        doc["itls"] = [[round(g, 6) for g in gaps] for gaps in doc["itls"]]
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"made_up_{name}.json").write_text(json.dumps(doc) + "\n")
        print(f"wrote {OUT / f'made_up_{name}.json'} ({len(doc['ttfts'])} requests)")


if __name__ == "__main__":
    main()
