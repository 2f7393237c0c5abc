"""`sim profile`: measure the forward-step latency table the simulator reads, or import one
from timings measured elsewhere (`sim profile import`). The model timed is
`chunksim.decoder`'s; the commands are `chunksim.cli.profile`.

Modules, one job each (torch is imported at module level only by those marked *):
    measure_flow      `sim profile` below the command line: its flags' rules, the measuring
    settings          the flags as plain values -> ProfileSettings
    grid              whole-step axes, presets, row rules, pruning
    synthetic*        grid point -> pools + batch + closure
    timing            warm-up / repeat / median-and-spread
    selfcheck*        mixed step vs the reference on a device, before timing it
    run*              the whole-step measuring loop
    passes            --passes: later looks at the fast points, the median kept
    store             checkpoint and atomic CSV + JSON
    first_call*       whether a new step shape costs more the first time it runs
    decode_spread*    what unequal decode contexts cost against equal-length points
    wake              what waking an idle engine costs
    component_grid    --kind components: each component's axes, and the timing
    components*       a step's components timed on one decoder layer
    component_points  every component point timed in looks, checkpointed
    calibration*      whole-model steps against the composed model
    component_run*    --kind components end to end
    component_write   write a component profile (torch-free, for `sim profile import`)
    collective        a tensor-parallel layer's all-reduces: latency + bytes / bandwidth
    alltoall          a MoE layer's expert-parallel all-to-alls, on the same link model
    allreduce_bench   --link measured: all-reduces timed with torch.distributed
    vllm_compat       the one place that runs the installed vLLM, and its workarounds
    vllm_points       --engine vllm: the step shapes measured, each step's shape check
    vllm_engine       vLLM's own engine driven in this process, whole steps timed
    vllm_profile      --engine vllm end to end, written as a component profile
    import_flow       `sim profile import` below the command line: its flags per source
    importer          --from csv: a folder of per-component CSVs
    aiconfigurator    --from aiconfigurator: NVIDIA AIConfigurator's kernel database
    vllm_log          read a `vllm serve --enable-logging-iteration-details` log
    vllm_log_fit      fit step costs to the logged steps (least squares)
    vllm_log_import   --from vllm-log: that fit as a component profile

Deliberately empty of imports so `sim` can register the command without loading torch.
"""
