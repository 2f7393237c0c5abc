"""Production trace loaders (Azure, Mooncake, BurstGPT, generic) and replay transforms."""

from chunksim.workloads.traces.config import TimeUnit, TraceFormat, TraceOptions

__all__ = ["TimeUnit", "TraceFormat", "TraceOptions"]
