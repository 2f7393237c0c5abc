"""Link presets for moving KV blocks: between replicas (P/D disaggregation, `--kv-link`)
and, from them, the host tier's PCIe link (`sim.engine.offload_config`)."""

from __future__ import annotations

KV_LINKS: dict[str, tuple[float, float]] = {
    "nvlink": (3600.0, 3.0),
    "ib-400g": (400.0, 5.0),
    "pcie-gen5": (512.0, 10.0),
}
"""KV link presets, name -> (Gbit/s one way, latency in us): NVLink 4 (H100/H200, 450
GB/s per direction), one 400 Gb/s InfiniBand NDR port, a PCIe Gen5 x16 slot (64 GB/s per
direction). Nominal figures, not measured here; override with --kv-link-gbps /
--kv-link-latency-us."""
