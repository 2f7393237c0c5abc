"""Live execution: the scheduling policies driving real forward passes in wall-clock time.

What the simulator predicts is checked against this. The loop shares everything but the
clock with the simulator: the same `EngineCore` (queues, KV block accounting, request
counters, records) and the same policy objects; each step runs the profiler's model on a
real KV cache instead of looking its time up in the latency table.

Modules, one job each (torch is imported only by those marked *):
    settings    LiveSettings: model shape, device, dtype, threads, seed (from a profile)
    tokens      per-request token ids: seeded prompts, greedily sampled outputs
    slots*      KV memory: request -> slot in a KVPool, pools sized for the run
    batch*      a plan -> the StepBatch(es) and token ids of its forward pass(es)
    records     per-step live timings and per-token wall times
    runtime*    build the model, pin threads, warm up, synchronize
    loop*       LiveEngine: the wall-clock serving loop
    overhead*   measure the per-step CPU cost on a synthetic session (for `sim profile`)
    gpu_clock   the GPU's SM clock sampled beside a run (CUDA with NVML; torch lazily)

Deliberately empty of imports so `sim` can register `validate` without loading torch.
"""
