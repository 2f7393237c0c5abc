"""How fast is `--policy vllm` beside `--policy budget`? The README's default run.

Workload: the default of `sim run` (Poisson 4 req/s, Azure-conversation-like lengths, 200
requests, seed 0) on the bundled default profile, `--chunk 512`: the run `sim run --policy
vllm --chunk 512` makes. Timed in process (`simulate`, the run and its summary), median of
--repeats: `budget` as it runs (bulk decode on), `budget` stepped (`--no-fast-forward`:
every step planned, as `vllm` plans them) and `vllm` (the installed vLLM's scheduler
planning every step). vLLM's import and first scheduler build are timed apart (`vllm
start-up`: once per process, also paid by `sim run`). The runs must agree (same steps and
summary, the policy's name aside), or the benchmark says so. Prints a table, then one
JSON line.

    PYTHONPATH=. python benchmarks/vllm_policy_speed.py [--num-requests 200] [--repeats 3]

Needs vLLM installed (the `vllm` extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from chunksim.latency.profile import DEFAULT_PROFILE, load_profile
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.options import WorkloadOptions, build_workload


def timed(workload, profile, cfg: RunConfig, repeats: int) -> tuple[float, dict, object]:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res, summary = simulate(workload, profile, cfg)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), summary, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=None,
                    help="requests (default: sim run's default workload, 200)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    profile = load_profile(DEFAULT_PROFILE)
    workload = build_workload(WorkloadOptions(num_requests=args.num_requests))
    runs = {"budget": RunConfig(policy="budget", chunk=512),
            "budget stepped": RunConfig(policy="budget", chunk=512,
                                        engine=EngineConfig(fast_forward=False)),
            "vllm": RunConfig(policy="vllm", chunk=512)}

    t0 = time.perf_counter()
    from chunksim.policies import vllm_driver  # import vLLM and build one scheduler

    vllm_driver.vllm_classes()
    vllm_driver.build_scheduler(runs["vllm"].make_policy(None), 100, 16, True,
                                vllm_driver.NO_CAP)
    startup_s = time.perf_counter() - t0

    rows = {}
    for name, cfg in runs.items():
        wall, summary, res = timed(workload, profile, cfg, args.repeats)
        rows[name] = (wall, summary, res)
    (_, sb, rb), (_, sv, rv) = rows["budget"], rows["vllm"]
    same = ({k: v for k, v in sb.items() if k != "policy"}
            == {k: v for k, v in sv.items() if k != "policy"}
            and rb.steps.equals(rv.steps))

    steps = sv["steps"]
    print(f"workload {workload.name}: {len(workload)} requests, {steps} steps; "
          f"vllm equals budget: {same}")
    print(f"{'policy':<16}{'wall s':>9}{'steps/s':>11}{'x budget':>10}")
    base = rows["budget"][0]
    for name, (wall, _, _) in rows.items():
        print(f"{name:<16}{wall:>9.3f}{steps / wall:>11.0f}{wall / base:>10.1f}")
    print(f"{'vllm start-up':<16}{startup_s:>9.3f}")
    print(json.dumps({
        "requests": len(workload), "steps": steps, "equal": same,
        "budget_wall_s": round(rows["budget"][0], 4),
        "budget_stepped_wall_s": round(rows["budget stepped"][0], 4),
        "vllm_wall_s": round(rows["vllm"][0], 4),
        "vllm_steps_per_s": round(steps / rows["vllm"][0]),
        "vllm_vs_budget": round(rows["vllm"][0] / base, 1),
        "vllm_startup_s": round(startup_s, 3)}))


if __name__ == "__main__":
    main()
