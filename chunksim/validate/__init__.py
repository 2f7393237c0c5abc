"""`sim validate`: how far the simulator's predictions are from real execution.

Modules, one job each (none imports torch at module level):
    compare     predicted vs measured metrics, signed relative errors, step-level errors
    run         live run -> simulate the same workload -> report
    profiling   profile on the fly when no --profile is given
    scenarios   the validation suite: each policy x light/medium/heavy load + long-prompt
    output      write validation.json, the per-request/step CSVs and the plot atomically
    plot        CDFs of TTFT and ITL, per-step duration predicted vs measured (matplotlib)
    table       the console table
    command     the Typer command
"""
