"""`sim profile import` below the command line: the rules of its flags per source, and
the import itself (`profiler.importer` for a folder of per-component CSVs,
`profiler.aiconfigurator` for NVIDIA AIConfigurator's database)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path


def import_profile(folder: Path | None, out: Path, source: str, model: str | None,
                   hf_config: Path | None, dtype: str, device_name: str | None,
                   device_memory_gib: float | None, tp: int, framework_ms: float | None,
                   system: str | None, backend: str, backend_version: str | None, ep: int,
                   quant: str | None, presets: Sequence[str],
                   check_out_file: Callable[[Path], None], echo: Callable[[str], None],
                   say: Callable[[str], None]) -> None:
    """Import timings measured elsewhere into the profile `out` (CSV, JSON next to it);
    `echo` says what was written, `say` the notes (stderr). Raises ValueError naming the
    flag."""
    if framework_ms is not None and not framework_ms >= 0:
        raise ValueError(f"--framework-ms {framework_ms}: give a time >= 0")
    framework_s = None if framework_ms is None else framework_ms / 1e3
    if source == "aiconfigurator":
        given = [f for f, v in (("DIR", folder), ("--hf-config", hf_config),
                                ("--device-name", device_name),
                                ("--device-memory-gib", device_memory_gib),
                                ("--dtype", dtype != "bfloat16")) if v]
        if given:
            raise ValueError(f"{', '.join(given)} apply to --from csv; the database names "
                             f"the model, device and memory (--system, --model)")
        if system is None or model is None:
            raise ValueError("--from aiconfigurator needs --system (e.g. h200_sxm) and "
                             "--model (a Hugging Face id, e.g. meta-llama/Meta-Llama-3.1-8B)")
        from chunksim.profiler.aiconfigurator import import_aiconfigurator

        check_out_file(out)
        meta = import_aiconfigurator(out, system, backend, model, tp, ep, quant,
                                     backend_version, framework_s)
        src = meta["source"]
        echo(f"wrote {out} ({meta['points']} component points from {src['package']} "
             f"{src['package_version']}, {backend} {src['data_version']} kernel data on "
             f"{system}, "
             f"{meta['elapsed_s']:.1f} s) and {out.with_suffix('.json')}")
        echo("measured on the GPU: " + ", ".join(f"{k} {v}" for k, v in
                                                 src["measured"].items()))
        return
    given = [f for f, v in (("--system", system), ("--backend-version", backend_version),
                            ("--ep", ep != 1), ("--quant", quant),
                            ("--backend", backend != "vllm")) if v]
    if given:
        raise ValueError(f"{', '.join(given)} apply to --from aiconfigurator only")
    if folder is None:
        raise ValueError("sim profile import: give the folder of per-component CSVs (DIR), "
                         "or --from aiconfigurator")
    if device_name is None:
        raise ValueError("--from csv needs --device-name: the device the timings were "
                         "measured on")
    if device_memory_gib is not None and not device_memory_gib > 0:
        raise ValueError(f"--device-memory-gib {device_memory_gib} must be > 0")
    from chunksim.decoder.config import load_hf_config, preset_config
    from chunksim.profiler.importer import import_components

    if hf_config is None and model is None and (folder / "config.json").is_file():
        hf_config = folder / "config.json"
    if hf_config is not None and model is not None:
        raise ValueError("give --model or --hf-config, not both")
    if hf_config is None and model is None:
        raise ValueError(f"sim profile import {folder}: say which model the timings are of: "
                         f"--model PRESET ({', '.join(presets)}), "
                         f"--hf-config PATH, or a config.json in the folder")
    cfg = load_hf_config(hf_config) if hf_config is not None else preset_config(model)
    meta = import_components(folder, out, cfg, dtype, device_name,
                             None if device_memory_gib is None else int(device_memory_gib * 2**30),
                             tp, framework_s or 0.0)
    echo(f"wrote {out} ({meta['points']} component points) and {out.with_suffix('.json')}")
    for note in meta.get("import_notes", []):
        say(f"note: {note}")
    if device_memory_gib is None:
        say("note: no --device-memory-gib: give sim run --kv-blocks with this profile")


