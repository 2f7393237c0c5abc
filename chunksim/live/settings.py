"""What the live loop runs on: model shape, device, dtype, threads, seed. Torch-free.

A validation is only meaningful when the live loop runs exactly what the latency table
measured, so `from_profile` reads all of it from the profile's provenance.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.decoder.config import ModelConfig, dtype_name


@dataclass(frozen=True)
class LiveSettings:
    """The execution environment of a live run."""

    model: ModelConfig
    """Shape of the Llama-style model (random weights, as profiled)."""
    device: str = "cpu"
    """`cpu` or `cuda`."""
    dtype: str = "float32"
    """`float32`, `bfloat16` or `float16`."""
    threads: int | None = 1
    """torch intra-op threads on CPU (the profile's); None on CUDA."""
    seed: int = 0
    """Seed of the weights and of the prompts' token ids."""
    warmup_steps: int = 3
    """Untimed repeats of each warm-up step shape before the clock starts."""
    memory_fraction: float = 0.9
    """Share of device memory that weights + the live KV pools may take."""
    idle_wait: str = "sleep"
    """How an idle loop waits for the next arrival: `sleep` (as a server does; the core
    may cool down, so the first steps after a sleep can run up to ~2x slower; the profile's
    wake-up cost prices that) or `spin` (busy-wait: keeps the core awake, burns a CPU)."""

    def __post_init__(self) -> None:
        dtype_name(self.dtype)  # raises on an unknown dtype
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"live device {self.device!r}: use cpu or cuda")
        if self.device == "cpu" and (self.threads is None or self.threads < 1):
            raise ValueError(f"--threads {self.threads}: a CPU live run needs threads >= 1")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be >= 0")
        if self.idle_wait not in ("sleep", "spin"):
            raise ValueError(f"idle_wait={self.idle_wait!r}: use sleep or spin")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction={self.memory_fraction} must be in (0, 1]")

    @classmethod
    def from_profile(cls, provenance: dict, threads: int | None = None, seed: int = 0,
                     idle_wait: str = "sleep") -> LiveSettings:
        """The settings a profile was measured with. `threads`, if given, must match the
        profile's: a table timed on 1 thread says nothing about 2."""
        model = provenance.get("model") or {}
        fields = set(ModelConfig.__dataclass_fields__)
        try:
            cfg = ModelConfig(**{k: v for k, v in model.items() if k in fields})
        except TypeError:
            raise ValueError(
                "the profile's provenance lacks the model shape (model.n_layers, hidden_size, "
                "...); validate needs a profile written by `sim profile`") from None
        device = provenance.get("device", "cpu")
        prof_threads = provenance.get("threads")
        if device == "cpu":
            if threads is not None and prof_threads is not None and threads != prof_threads:
                raise ValueError(
                    f"--threads {threads} differs from the profile's {prof_threads} threads; "
                    "the live run must use the profile's thread count (omit --threads)")
            threads = threads or prof_threads or 1
        else:
            threads = None
        return cls(model=cfg, device=device, dtype=provenance.get("dtype", "float32"),
                   threads=threads, seed=seed, idle_wait=idle_wait)

    def as_dict(self) -> dict:
        """Echoed into validation.json."""
        return {"model": self.model.name, "device": self.device, "dtype": self.dtype,
                "threads": self.threads, "seed": self.seed, "warmup_steps": self.warmup_steps,
                "idle_wait": self.idle_wait}
