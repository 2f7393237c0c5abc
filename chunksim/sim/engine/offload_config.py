"""The CPU KV tier's knobs (`--kv-offload-gib`, `--kv-offload-link`): host capacity and the
host-to-GPU link, turned into the block counts and link figures of `core.kv_cache.KVConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.core.knobs import knob
from chunksim.core.links import KV_LINKS

_E = "Engine and KV cache"

HOST_LINKS: dict[str, tuple[float, float]] = {
    "pcie-gen4": (32.0, 10.0),
    "pcie-gen5": (KV_LINKS["pcie-gen5"][0] / 8.0, KV_LINKS["pcie-gen5"][1]),
}
"""Host link presets, name -> (GB/s one way, latency in us): a PCIe Gen4 x16 slot (32
GB/s) and Gen5 x16 (64 GB/s, the --kv-link preset). Nominal figures, not measured here;
pinned-memory copies reach about 80 % of them, so give a measured rate as a number."""

_LINK_LATENCY_US = 10.0
"""Latency of a link given as a bare bandwidth (as the PCIe presets)."""


def parse_host_link(text: str) -> tuple[float, float]:
    """`pcie-gen4`, `pcie-gen5` or a bandwidth in GB/s -> (bytes per second, latency in
    seconds); a clear error otherwise."""
    t = str(text).strip().lower()
    if t in HOST_LINKS:
        gbs, lat_us = HOST_LINKS[t]
    else:
        try:
            gbs = float(t)
        except ValueError:
            gbs = -1.0
        if not 0.0 < gbs < float("inf"):
            raise ValueError(
                f"--kv-offload-link {text!r}: give {', '.join(HOST_LINKS)} or a bandwidth "
                "in GB/s > 0 (e.g. --kv-offload-link 25)")
        lat_us = _LINK_LATENCY_US
    return gbs * 1e9, lat_us / 1e6


WRITE_POLICIES: dict[str, str] = {
    "write-through": "vLLM's OffloadingConnector: prompt blocks are stored as they are computed",
    "write-back": "SGLang HiCache's write_back: blocks are stored when the GPU evicts them",
}
"""How blocks reach the CPU tier, name -> the engine it models (`core.kv_offload`)."""


def parse_write_policy(text: str) -> str:
    """`write-through` or `write-back` (`_` for `-` accepted); a clear error otherwise."""
    t = str(getattr(text, "value", text)).strip().lower().replace("_", "-")
    if t not in WRITE_POLICIES:
        raise ValueError(f"--kv-offload-write-policy {text!r}: choose "
                         f"{' or '.join(WRITE_POLICIES)}")
    return t


@dataclass(frozen=True)
class OffloadConfig:
    """A CPU tier under the GPU prefix cache (vLLM's KV offloading)."""

    kv_offload_gib: float = knob(0.0, "--kv-offload-gib", "--kv-offloading-size", panel=_E,
                                 min=0.0)
    """Host memory for a CPU KV tier, GiB (vLLM's --kv-offloading-size; 0 = none): an LRU
    of KV blocks stored as --kv-offload-write-policy says, and a waiting request whose
    prefix continues there loads it back over --kv-offload-link before it runs instead of
    recomputing it. Needs prefix caching."""
    kv_offload_link: str = knob("pcie-gen5", "--kv-offload-link", panel=_E)
    """Host-to-GPU link of the CPU KV tier: pcie-gen4 (32 GB/s, 10 us), pcie-gen5 (64
    GB/s, 10 us) or a bandwidth in GB/s (10 us latency)."""
    kv_offload_write_policy: str | None = knob(None, "--kv-offload-write-policy",
                                               panel=_E, parse=parse_write_policy)
    """How blocks reach the CPU KV tier: write-through (the default; vLLM's
    OffloadingConnector: every full prompt block is stored as it is computed, and a prompt
    held there whole loads every block and computes one token) or write-back (SGLang
    HiCache's write_back: a block is stored when the GPU prefix cache evicts it, and
    moves back when loaded). Needs --kv-offload-gib."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.kv_offload_gib < float("inf"):
            raise ValueError(f"--kv-offload-gib {self.kv_offload_gib}: must be a finite "
                             "number of GiB >= 0 (0 = no CPU tier)")
        parse_host_link(self.kv_offload_link)
        if self.kv_offload_write_policy is not None:
            object.__setattr__(self, "kv_offload_write_policy",
                               parse_write_policy(self.kv_offload_write_policy))
            if not self.active:
                raise ValueError("--kv-offload-write-policy says how blocks reach a CPU KV "
                                 "tier; give --kv-offload-gib N (> 0) for one, or drop it")

    @property
    def active(self) -> bool:
        return self.kv_offload_gib > 0

    @property
    def write_back(self) -> bool:
        """The tier is filled by GPU evictions (write-back), not written through."""
        return self.kv_offload_write_policy == "write-back"

    @property
    def link(self) -> tuple[float, float]:
        """(bytes per second, latency in seconds) of the host link."""
        return parse_host_link(self.kv_offload_link)

    def host_blocks(self, block_bytes: int) -> int:
        """Blocks the host memory holds."""
        return int(self.kv_offload_gib * 2**30 // block_bytes)
