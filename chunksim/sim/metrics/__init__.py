"""Metrics as pure functions of records: the declared metrics (`metric_registry`), their
computation as `vllm bench serve` defines them (`metrics`); a run's summary is
`sim.run_summary`. Empty on purpose: importing the package imports none of its modules."""
