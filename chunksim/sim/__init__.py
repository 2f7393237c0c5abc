"""The simulator: the SimPy engine (`engine`), the time-free bookkeeping it shares with the
live loop (`core.EngineCore`: queues, KV, applying plans, records), the records
(`records`), metrics as `vllm bench serve` defines them (`metrics`), and one run from config
to summary (`run`)."""
