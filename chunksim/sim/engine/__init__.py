"""One replica's engine: the SimPy loop (`engine`), the time-free bookkeeping it shares
with the live loop (`core.EngineCore`: queues, KV, applying plans), a step's price
(`pricing`), the bulk path (`fast_forward`), early stopping of SLO probes (`settle`), the jitter's
guard (`spread_guard`) and the
CPU tier's engine side (`offload`, `offload_config`). Empty on purpose: importing the
package imports none of its modules."""
