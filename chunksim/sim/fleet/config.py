"""Fleet knobs: how many replicas, which router, and prefill/decode disaggregation."""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.core.knobs import knob
from chunksim.core.links import KV_LINKS
from chunksim.sim.fleet.routers import ROUTERS, check_router_name

_F = "Fleet"


def _ms_to_s(ms: float) -> float:
    return ms / 1000.0


def parse_pd(text: str) -> tuple[int, int]:
    """`"2:6"` -> (2, 6); a clear error otherwise."""
    p, sep, d = str(text).partition(":")
    try:
        pn, dn = int(p), int(d)
    except ValueError:
        pn = dn = -1
    if not sep or pn < 1 or dn < 1:
        raise ValueError(
            f"--pd {text!r}: give P:D, the prefill and decode instance counts, each >= 1 "
            "(e.g. --pd 2:6)")
    return pn, dn


def parse_replica_groups(text: str) -> tuple[tuple[str, int], ...]:
    """`"h200:2,a100:2"` -> (("h200", 2), ("a100", 2)): each group's profile (a bundled
    name or a profile CSV, as --profile takes) and replica count; a clear error otherwise."""
    groups = []
    for part in str(text).split(","):
        name, sep, count = part.strip().rpartition(":")
        try:
            n = int(count)
        except ValueError:
            n = -1
        if not sep or not name.strip() or n < 1:
            raise ValueError(
                f"--replica-groups {text!r}: {part.strip()!r} is not PROFILE:COUNT; give a "
                "comma list of profile:replicas, each count >= 1 (e.g. --replica-groups "
                "llama-3.1-8b-h200:2,runs/a100.csv:2)")
        groups.append((name.strip(), n))
    return tuple(groups)


@dataclass(frozen=True)
class FleetConfig:
    """Replicas behind a router, or prefill and decode pools (unset: one engine)."""

    replicas: int | None = knob(None, "--replicas", panel=_F)
    """Run N identical engines behind --router (default: one engine, no router)."""
    router: str | None = knob(None, "--router", panel=_F)
    """How the fleet assigns requests: round-robin (default), random (seeded), least-requests
    (fewest running + waiting), least-tokens (least outstanding prefill + decode work),
    prefix (longest cached prefix, within --prefix-load-cap of the least loaded),
    conversation (sticky by the trace's conversation id). With --pd: the prefill pool's."""
    router_staleness_s: float = knob(0.0, "--router-staleness-ms", panel=_F, min=0.0,
                                     parse=_ms_to_s)
    """The router sees replica state this old, ms (a router scraping metrics); only for
    routers that read state (least-requests, least-tokens, prefix)."""
    prefix_load_cap: int = knob(8, "--prefix-load-cap", panel=_F, min=0)
    """prefix router: a cache hit may send a request to a replica with at most this many
    outstanding requests more than the least-loaded one."""
    replica_groups: str | None = knob(None, "--replica-groups", panel=_F)
    """A mixed fleet: PROFILE:COUNT,... replicas per latency profile (a bundled name or a
    CSV, as --profile takes: the same model measured on each kind of GPU), numbered in
    group order, each with its profile's speed, KV capacity and length cap; replaces
    --profile (and sets --replicas to the total). E.g. --replica-groups
    llama-3.1-8b-h200:2,runs/a100.csv:2."""
    pd: str | None = knob(None, "--pd", panel=_F)
    """Prefill/decode disaggregation, P:D instances: prefill instances run prompts and emit
    the first token, the KV moves over --kv-link, decode instances make the rest."""
    decode_router: str | None = knob(None, "--decode-router", panel=_F)
    """--pd: the decode pool's router (default least-tokens)."""
    kv_link: str = knob("nvlink", "--kv-link", panel=_F)
    """--pd: KV transfer link preset: nvlink (3600 Gb/s, 3 us), ib-400g (400 Gb/s, 5 us),
    pcie-gen5 (512 Gb/s, 10 us)."""
    kv_link_gbps: float | None = knob(None, "--kv-link-gbps", panel=_F)
    """--pd: KV link bandwidth, Gbit/s (overrides the preset's)."""
    kv_link_latency_us: float | None = knob(None, "--kv-link-latency-us", panel=_F)
    """--pd: KV link latency per transfer, us (overrides the preset's)."""

    def __post_init__(self) -> None:
        if self.replicas is not None and self.replicas < 1:
            raise ValueError(f"--replicas {self.replicas}: a fleet needs at least 1 replica")
        if self.replica_groups is not None:
            total = sum(n for _, n in parse_replica_groups(self.replica_groups))
            if self.pd is not None:
                raise ValueError(f"--replica-groups and --pd {self.pd}: mixed fleets are "
                                 "colocated replicas; drop one")
            if self.replicas is not None and self.replicas != total:
                raise ValueError(
                    f"--replicas {self.replicas} but --replica-groups {self.replica_groups} "
                    f"holds {total}; drop --replicas (the groups size the fleet)")
        if self.router is not None:
            check_router_name(self.router)
        if self.decode_router is not None:
            check_router_name(self.decode_router, "--decode-router")
        if self.pd is not None:
            parse_pd(self.pd)
            if self.replicas is not None:
                raise ValueError(
                    f"--replicas {self.replicas} and --pd {self.pd} both size the fleet; "
                    "give one (--pd P:D runs P + D instances)")
        elif not self.active and self.router is not None:
            raise ValueError(f"--router {self.router} needs --replicas N or --pd P:D")
        if self.pd is None:
            given = [f for f, v in (("--decode-router", self.decode_router),
                                    ("--kv-link-gbps", self.kv_link_gbps),
                                    ("--kv-link-latency-us", self.kv_link_latency_us))
                     if v is not None]
            if self.kv_link != "nvlink":
                given.append("--kv-link")
            if given:
                raise ValueError(f"{', '.join(given)} only apply to --pd P:D; drop them")
        if self.kv_link not in KV_LINKS:
            raise ValueError(f"--kv-link {self.kv_link!r} is unknown; choose one of "
                             f"{', '.join(KV_LINKS)}")
        for name, v in (("--kv-link-gbps", self.kv_link_gbps),
                        ("--kv-link-latency-us", self.kv_link_latency_us)):
            low = 0.0 if name == "--kv-link-latency-us" else 1e-300
            if v is not None and not (v >= low and v < float("inf")):
                raise ValueError(f"{name} {v}: must be a finite number "
                                 f"{'>= 0' if low == 0 else '> 0'}")
        if not self.router_staleness_s >= 0:
            raise ValueError(f"--router-staleness-ms {self.router_staleness_s * 1000}: "
                             "must be >= 0")
        if self.router_staleness_s > 0:
            used = [self.router or "round-robin"]
            if self.pd is not None:
                used.append(self.decode_router or "least-tokens")
            if not any(ROUTERS[name].reads_state for name in used):
                raise ValueError(
                    "--router-staleness-ms applies to routers that read replica state "
                    f"(least-requests, least-tokens, prefix); {' and '.join(used)} read none")
        if self.prefix_load_cap < 0:
            raise ValueError(f"--prefix-load-cap {self.prefix_load_cap}: must be >= 0")

    @property
    def active(self) -> bool:
        """True when the run is a fleet (else one engine, today's `sim run`)."""
        return self.replicas is not None or self.pd is not None or self.groups is not None

    @property
    def groups(self) -> tuple[tuple[str, int], ...] | None:
        """--replica-groups as (profile, count) pairs (None: every replica on --profile)."""
        return (parse_replica_groups(self.replica_groups)
                if self.replica_groups is not None else None)

    @property
    def replica_count(self) -> int:
        """Colocated replicas: --replicas, or the groups' total (1 for one engine)."""
        if self.groups is not None:
            return sum(n for _, n in self.groups)
        return self.replicas or 1

    @property
    def engine_count(self) -> int:
        """Engines the run simulates: P + D instances with --pd, else the replicas."""
        pd = self.pd_counts
        return sum(pd) if pd is not None else self.replica_count

    @property
    def pd_counts(self) -> tuple[int, int] | None:
        return parse_pd(self.pd) if self.pd is not None else None

    @property
    def link(self) -> tuple[float, float]:
        """(bytes per second, latency in seconds) of the KV link."""
        gbps, lat_us = KV_LINKS[self.kv_link]
        if self.kv_link_gbps is not None:
            gbps = self.kv_link_gbps
        if self.kv_link_latency_us is not None:
            lat_us = self.kv_link_latency_us
        return gbps * 1e9 / 8.0, lat_us * 1e-6
