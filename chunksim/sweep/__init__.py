"""Grids of simulations: `sim compare`, `sim capacity` and `sim sweep`, on one runner.

- `configs`: a configuration = policy (family[:variant]) x chunk size; parsing the lists.
- `job`, `runner`, `ray_backend`: one simulation as a picklable job; inline, process-pool
  or Ray execution, results always in job order.
- `compare`: one workload under every configuration -> a deterministic table.
- `search`, `slos`, `capacity`, `capacity_io`: the max sustainable rate under SLOs.
- `grid`, `table`: the resumable, atomically checkpointed sweep table.
Nothing here draws or parses flags: figures live in `chunksim.reports`, the commands in
`chunksim.cli`.
"""
