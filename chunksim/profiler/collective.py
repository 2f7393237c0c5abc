"""What a tensor-parallel layer's all-reduces cost: a latency + bytes / bandwidth model.

A Megatron-style sharded layer (as vLLM runs Llama) all-reduces its activations twice:
after attention's output projection and after the MLP's down projection, `T x hidden`
values each. Where several devices are not at hand to time it, a ring all-reduce of B
bytes over N devices costs

    latency + 2 (N - 1) / N x B / bandwidth

per call (each device sends and receives 2 (N - 1) / N of the buffer). The presets are
nominal figures of the interconnects (override them with measured ones, or time the
all-reduce itself with `--link measured`, `allreduce_bench`):

- `nvlink-h100`, `nvlink-h200`: 8-GPU NVSwitch systems, NVLink 4 at 450 GB/s per direction
  per GPU (3600 Gbit/s), 8 us per call (launch and synchronisation of a small
  all-reduce);
- `pcie`: PCIe 4.0 x16, about 25 GB/s effective per direction (200 Gbit/s), 20 us per
  call.
"""

from __future__ import annotations

LINKS: dict[str, tuple[float, float]] = {
    "nvlink-h100": (3600.0, 8.0),
    "nvlink-h200": (3600.0, 8.0),
    "pcie": (200.0, 20.0),
}
"""Preset -> (bandwidth in Gbit/s, latency per all-reduce in microseconds)."""
ALLREDUCES_PER_LAYER = 2
MEASURED = "measured"
"""`--link measured`: time the all-reduce with torch.distributed (`allreduce_bench`)."""


def link_settings(tp: int, preset: str | None, gbps: float | None,
                  latency_us: float | None) -> dict | None:
    """The all-reduce cost model of a `tp`-way run: None for tp 1 (flags refused there);
    else {"preset", "gbps", "latency_us", "formula"}. ValueError naming the flag."""
    if tp == 1:
        given = [f for f, v in (("--link", preset), ("--link-gbps", gbps),
                                ("--link-latency-us", latency_us)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} apply only with --tp 2 or more (one "
                             f"device has no all-reduce)")
        return None
    name = preset or "nvlink-h100"
    if name == MEASURED:
        given = [f for f, v in (("--link-gbps", gbps), ("--link-latency-us", latency_us))
                 if v is not None]
        if given:
            raise ValueError(f"--link measured times the all-reduce; {', '.join(given)} "
                             f"set the formula's figures instead: give one or the other")
        return {"preset": MEASURED, "formula": None}
    if name not in LINKS:
        raise ValueError(f"--link {name!r} is not a preset; use one of {', '.join(LINKS)} "
                         f"or {MEASURED}")
    bw, lat = LINKS[name]
    if gbps is not None:
        if not gbps > 0:
            raise ValueError(f"--link-gbps {gbps}: use a positive bandwidth")
        bw = gbps
    if latency_us is not None:
        if latency_us < 0:
            raise ValueError(f"--link-latency-us {latency_us}: use 0 or more")
        lat = latency_us
    return {"preset": name, "gbps": bw, "latency_us": lat,
            "formula": "latency + 2 (tp - 1) / tp x bytes / bandwidth, per all-reduce"}


def allreduce_s(nbytes: float, tp: int, gbps: float, latency_us: float) -> float:
    """Seconds of one ring all-reduce of `nbytes` over `tp` devices."""
    return latency_us * 1e-6 + 2 * (tp - 1) / tp * nbytes * 8 / (gbps * 1e9)


def layer_allreduce_s(tokens: int, hidden: int, dtype_bytes: int, tp: int,
                      link: dict) -> float:
    """Both all-reduces of one layer on a step of `tokens` tokens."""
    return ALLREDUCES_PER_LAYER * allreduce_s(tokens * hidden * dtype_bytes, tp,
                                              link["gbps"], link["latency_us"])
