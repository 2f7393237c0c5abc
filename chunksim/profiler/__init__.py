"""`sim profile`: time real mixed forward steps of a Llama-style model; write the table.

Modules, one job each (torch is imported only by those marked *):
    config      ModelConfig, presets, local HF config.json loading, byte counts
    model*      LlamaModel + build_model (random weights on the target device/dtype)
    kv*         KVPool: slotted K/V storage a serving loop can share
    step*       StepBatch / SeqSlice (the plan) and prepare_step (its index tensors)
    attention*  per-sequence prefill SDPA + batched decode SDPA over the pools
    reference*  naive full recomputation, for tests and the self-check
    selfcheck*  mixed step vs reference on a device, before timing it
    timing      warm-up / repeat / median-and-spread
    grid        axes, presets, row rules, pruning
    synthetic*  grid point -> pools + batch + closure
    store       checkpoint and atomic CSV + JSON
    run*        the measuring loop
    command     the Typer command (no torch at import)

Deliberately empty of imports so `sim` can register the command without loading torch.
"""
