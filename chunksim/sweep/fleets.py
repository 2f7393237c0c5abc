"""Fleet layouts as a grid dimension: `--fleet` entries of `sim compare` / `sim capacity`,
and the splits of G GPUs that `sim capacity --gpus G` searches.

An entry is `LAYOUT[,KEY=VALUE...]`:
- LAYOUT is `N` or `replicas=N` (N colocated replicas) or `pd=P:D` (P prefill and D decode
  instances);
- keys: `router=R` (the replicas' router, or the prefill pool's), `decode-router=R` and
  `kv-link=L` (P/D only).

`4`, `4,router=least-tokens`, `pd=2:2,kv-link=ib-400g`. With `sim capacity --gpus`, one
entry without a layout (`router=least-tokens,kv-link=ib-400g`) sets the routers and link of
every generated split. Every grid configuration runs under every entry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from chunksim.core.links import KV_LINKS
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.fleet.routers import ROUTERS

_KEYS = ("router", "decode-router", "kv-link")
_SYNTAX = ("give LAYOUT[,KEY=VALUE...]: LAYOUT is N (N replicas) or pd=P:D, keys router, "
           "decode-router, kv-link (e.g. --fleet 4,router=least-tokens --fleet pd=2:2)")


@dataclass(frozen=True)
class FleetSpec:
    """One fleet layout and its routers (None: the run's own defaults)."""

    replicas: int | None = None
    """Colocated replicas (None with `pd`, or in a layout-less template)."""
    pd: tuple[int, int] | None = None
    """(prefill, decode) instance counts."""
    router: str | None = None
    decode_router: str | None = None
    kv_link: str | None = None

    @property
    def has_layout(self) -> bool:
        return self.replicas is not None or self.pd is not None

    @property
    def gpus(self) -> int:
        """GPUs (engines) the layout occupies."""
        return self.replicas if self.pd is None else sum(self.pd)

    @property
    def label(self) -> str:
        """`4x`, `4x least-tokens`, `P/D 2:2`, `P/D 2:2 ib-400g` (routers and link only
        when given)."""
        head = f"{self.replicas}x" if self.pd is None else f"P/D {self.pd[0]}:{self.pd[1]}"
        extras = [x for x in (self.router, self.decode_router and
                              f"decode {self.decode_router}", self.kv_link) if x]
        return " ".join([head, *extras])

    @property
    def sort_key(self) -> tuple:
        """Colocated before P/D, then by size, prefill count, routers."""
        if self.pd is None:
            size = (0, self.replicas or 0, 0)
        else:
            size = (1, sum(self.pd), self.pd[0])
        return (*size, self.router or "", self.decode_router or "", self.kv_link or "")

    def with_defaults(self, template: FleetSpec | None) -> FleetSpec:
        """This layout with `template`'s routers and link where it sets none (a P/D-only
        key is dropped for a colocated layout)."""
        if template is None:
            return self
        pd = self.pd is not None
        return dataclasses.replace(
            self, router=self.router or template.router,
            decode_router=self.decode_router or (template.decode_router if pd else None),
            kv_link=self.kv_link or (template.kv_link if pd else None))

    def apply(self, base: FleetConfig) -> FleetConfig:
        """`base` (the run's fleet flags: staleness, load cap) laid out as this entry."""
        pd = None if self.pd is None else f"{self.pd[0]}:{self.pd[1]}"
        return dataclasses.replace(
            base, replicas=self.replicas if pd is None else None, pd=pd,
            router=self.router or base.router,
            decode_router=self.decode_router if pd else None,
            kv_link=(self.kv_link or base.kv_link) if pd else "nvlink")


def parse_fleet(text: str, flag: str = "--fleet", layout: bool = True) -> FleetSpec:
    """One `--fleet` entry -> FleetSpec; a clear error naming `flag` and the entry.
    `layout=False` parses a template (keys only, as `sim capacity --gpus` takes)."""
    entry = str(text).strip()

    def bad(why: str) -> ValueError:
        return ValueError(f"{flag} {entry!r}: {why}")

    parts = [p.strip() for p in entry.split(",")]
    if not entry or any(not p for p in parts):
        raise bad(f"empty item; {_SYNTAX}")
    fields: dict = {}
    for k, part in enumerate(parts):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:  # a bare layout: N replicas
            if k != 0:
                raise bad(f"{part!r} is not KEY=VALUE; {_SYNTAX}")
            key, value = "replicas", part
        if key in fields or (key in ("replicas", "pd") and
                             ("replicas" in fields or "pd" in fields)):
            raise bad(f"{key} given twice (one layout per entry)")
        if key == "replicas":
            try:
                n = int(value)
            except ValueError:
                raise bad(f"{value!r} is not a replica count; {_SYNTAX}") from None
            if n < 1:
                raise bad(f"{n} replicas: a fleet needs at least 1")
            fields["replicas"] = n
        elif key == "pd":
            p, colon, d = value.partition(":")
            try:
                pn, dn = int(p), int(d)
            except ValueError:
                pn = dn = -1
            if not colon or pn < 1 or dn < 1:
                raise bad(f"pd={value}: give P:D, each >= 1 (e.g. pd=2:2)")
            fields["pd"] = (pn, dn)
        elif key in ("router", "decode-router"):
            if value not in ROUTERS:
                raise bad(f"{key} {value!r} is unknown; choose one of {', '.join(ROUTERS)}")
            fields[key.replace("-", "_")] = value
        elif key == "kv-link":
            if value not in KV_LINKS:
                raise bad(f"kv-link {value!r} is unknown; choose one of {', '.join(KV_LINKS)}")
            fields["kv_link"] = value
        else:
            raise bad(f"unknown key {key!r}; keys are {', '.join(_KEYS)} after the layout "
                      "(N or pd=P:D)")
    spec = FleetSpec(**fields)
    if layout and not spec.has_layout:
        raise bad(f"no layout; {_SYNTAX}")
    if not layout and spec.has_layout:
        raise bad("--gpus generates the layouts; give only router=, decode-router=, "
                  "kv-link= here")
    if spec.has_layout and spec.pd is None:
        given = [k for k, v in (("decode-router", spec.decode_router),
                                ("kv-link", spec.kv_link)) if v is not None]
        if given:
            raise bad(f"{', '.join(given)}: only for pd=P:D layouts")
    return spec


def parse_fleets(entries: list[str] | None, flag: str = "--fleet") -> list[FleetSpec]:
    """Every `--fleet` entry, deduplicated, in the given order."""
    out: list[FleetSpec] = []
    for e in entries or []:
        spec = parse_fleet(e, flag)
        if spec not in out:
            out.append(spec)
    return out


def gpu_splits(gpus: int, template: FleetSpec | None = None) -> list[FleetSpec]:
    """The layouts of `gpus` GPUs: `gpus` colocated replicas, and every P:D with
    P + D = gpus (none for one GPU), each with `template`'s routers and link."""
    if gpus < 1:
        raise ValueError(f"--gpus {gpus}: must be >= 1")
    out = [FleetSpec(replicas=gpus)] + [FleetSpec(pd=(p, gpus - p)) for p in range(1, gpus)]
    return [s.with_defaults(template) for s in out]


def refuse_fleet_flags(fleet: FleetConfig, flag: str) -> None:
    """`flag` lays out the fleet: refuse the single-fleet flags that would fight it."""
    given = [f for f, v in (("--replicas", fleet.replicas), ("--pd", fleet.pd),
                            ("--replica-groups", fleet.replica_groups)) if v is not None]
    if given:
        raise ValueError(f"{' and '.join(given)} and {flag} both size the fleet; give the "
                         f"layouts with {flag} only")
