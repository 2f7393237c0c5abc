"""`sim validate`: how far the simulator's predictions are from real execution.

Modules, one job each:
    compare     predicted vs measured metrics, signed relative errors, step-level errors
    run         live run -> simulate the same workload -> report
    profiling   profile on the fly when no --profile is given
    remeasure   re-time a sample of the profile's points now (machine drift; torch)
    repeat      how far live runs of one workload differ (the noise floor)
    machine     how busy other processes kept the CPUs meanwhile
    scenarios   the validation suite: each policy x light/medium/heavy load + long-prompt
    suite       run a list of scenarios on one profile and model, tabulate the errors
    output      write validation.json, the per-request/step CSVs and the plot atomically
    results     read a benchmark's per-request results (vLLM, SGLang, generic; no torch)
    arrivals    rebuild a benchmark's send schedule from its seed
    against     `--against`: replay a results file's requests and compare (no torch)
    match       whether a profile describes the engine a results file measured
    calibrate   `sim calibrate`: fit framework time and scales, hold out, refuse, write
    bench_format  write requests' timings as a `vllm bench serve` result (synthetic runs)
    vllm_scheduler  vLLM's own V1 scheduler driven without a model, step by step beside
                  chunksim's (the differential tier; needs vLLM, imported lazily)
The plot and the console table are drawn by `chunksim.reports`; the command is
`chunksim.cli.validate`. User guide: docs/validation.md.
"""
