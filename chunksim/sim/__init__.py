"""The simulator, by role: one replica's engine (`engine/`: the SimPy loop, the time-free
bookkeeping it shares with the live loop, a step's price, the bulk path), many replicas
behind a router (`fleet/`), the records (`records/`), metrics as `vllm bench serve` defines
them (`metrics/`); above them the one place an engine is assembled (`build`), a run's
summary (`run_summary`), one fleet run (`fleet_run`) and one run from config to summary
(`run`)."""
