"""`sim profile`'s flags as plain values -> `ProfileSettings` (the library entry point the
CLI and `sim validate`'s on-the-fly profiling share)."""

from __future__ import annotations

from pathlib import Path


def build_settings(*, model: str = "tiny", hf_config: Path | None = None,
                   device: str = "auto", dtype: str | None = None, threads: int = 1,
                   grid: str = "quick", chunk_lens: str | None = None,
                   decode_counts: str | None = None, kv_lens: str | None = None,
                   prior_lens: str | None = None, warmup: int | None = None,
                   repeats: int | None = None, point_budget_s: float | None = None,
                   out: Path | None = None, resume: bool = False, seed: int = 0,
                   passes: int = 1, repass_below_s: float | None = None,
                   cold_looks: bool = True):
    """Flags -> `ProfileSettings` (imports torch to resolve the device). ValueError names the
    flag at fault."""
    from chunksim.decoder.config import check_runnable, load_hf_config, preset_config
    from chunksim.decoder.device import resolve_device
    from chunksim.profiler.grid import grid_preset, parse_axis
    from chunksim.profiler.run import REPASS_BELOW_S, ProfileSettings

    cfg = load_hf_config(hf_config) if hf_config is not None else preset_config(model)
    check_runnable(cfg)
    dev = resolve_device(device)
    spec = grid_preset(grid).with_overrides(
        chunk_len=None if chunk_lens is None else parse_axis(chunk_lens, "--chunk-lens"),
        decode_count=None if decode_counts is None else parse_axis(decode_counts,
                                                                   "--decode-counts"),
        kv_len=None if kv_lens is None else parse_axis(kv_lens, "--kv-lens"),
        prior_len=None if prior_lens is None else parse_axis(prior_lens, "--prior-lens"),
    )
    timing = {"warmup": warmup, "repeats": repeats, "point_budget_s": point_budget_s}
    timing = {k: v for k, v in timing.items() if v is not None}
    if timing:
        from dataclasses import replace

        spec = replace(spec, **timing)
    if dev == "cpu" and threads < 1:
        raise ValueError(f"--threads {threads}: use 1 or more")
    return ProfileSettings(
        model=cfg, device=dev, dtype=dtype or ("float32" if dev == "cpu" else "bfloat16"),
        grid=spec, out_csv=out or Path("out/profiles") / f"{cfg.name}-{dev}.csv",
        threads=threads if dev == "cpu" else None, seed=seed, resume=resume, passes=passes,
        repass_below_s=REPASS_BELOW_S if repass_below_s is None else repass_below_s,
        cold_looks=cold_looks,
    )


def build_component_settings(*, model: str = "tiny", hf_config: Path | None = None,
                             device: str = "auto", dtype: str | None = None, threads: int = 1,
                             grid: str = "quick", warmup: int | None = None,
                             repeats: int | None = None, point_budget_s: float | None = None,
                             out: Path | None = None, seed: int = 0, tp: int = 1,
                             link: str | None = None, link_gbps: float | None = None,
                             link_latency_us: float | None = None, calibrate: bool = True,
                             live_costs: bool = True, clock: str | None = None,
                             resume: bool = False, ep: int = 1):
    """Flags -> `ComponentSettings` for `sim profile --kind components`."""
    from dataclasses import replace

    from chunksim.decoder.config import check_runnable, load_hf_config, preset_config, shard_moe
    from chunksim.decoder.device import resolve_device
    from chunksim.profiler.collective import MEASURED, link_settings
    from chunksim.profiler.component_grid import component_grid
    from chunksim.profiler.component_run import ComponentSettings

    cfg = load_hf_config(hf_config) if hf_config is not None else preset_config(model)
    shard_moe(cfg, tp, ep)  # the --tp / --ep checks, before anything is measured
    check_runnable(cfg)
    dev = resolve_device(device)
    if dev == "cpu" and threads < 1:
        raise ValueError(f"--threads {threads}: use 1 or more")
    spec = component_grid(grid)
    timing = {"warmup": warmup, "repeats": repeats, "point_budget_s": point_budget_s}
    timing = {k: v for k, v in timing.items() if v is not None}
    if timing:
        spec = replace(spec, **timing)
    if spec.warmup < 0 or spec.repeats < 1 or not spec.point_budget_s > 0:
        raise ValueError(f"--warmup {spec.warmup} / --repeats {spec.repeats} / "
                         f"--point-budget-s {spec.point_budget_s}: need warmup >= 0, "
                         f"repeats >= 1 and a positive budget")
    dtype = dtype or ("float32" if dev == "cpu" else "bfloat16")
    link_model = link_settings(tp, link, link_gbps, link_latency_us)
    if link_model is not None and link_model["preset"] == MEASURED:
        import torch

        from chunksim.profiler.allreduce_bench import check_devices

        check_devices(dev, tp, torch.cuda.device_count() if dev == "cuda" else 0)
    suffix = (f"-tp{tp}" if tp > 1 else "") + (f"-ep{ep}" if ep > 1 else "")
    return ComponentSettings(
        model=cfg, device=dev, dtype=dtype, grid=spec,
        out_csv=out or Path("out/profiles") / f"{cfg.name}-{dev}{suffix}-components.csv",
        threads=threads if dev == "cpu" else None, seed=seed, tp=tp, ep=ep,
        link=link_model, calibrate=calibrate,
        live_costs=live_costs, resume=resume,
        clock=clock or ("thread-cpu" if dev == "cpu" and threads == 1 else "wall"))
