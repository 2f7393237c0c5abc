"""`sim profile import` below the command line: the rules of its flags per source, and
the import itself (`profiler.importer` for a folder of per-component CSVs,
`profiler.aiconfigurator` for NVIDIA AIConfigurator's database, `profiler.vllm_log_import`
for the engine steps a vLLM server logged)."""

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
    if source == "vllm-log":
        others = dict(framework_ms=framework_ms, tp=tp != 1, system=system,
                      backend=backend != "vllm", backend_version=backend_version, ep=ep != 1,
                      quant=quant)
        given = [f"--{k.replace('_', '-')}" for k, v in others.items() if v]
        if given:
            raise ValueError(f"{', '.join(given)} do not apply to --from vllm-log (the log's "
                             f"steps give the step costs, framework time included)")
        check_out_file(out)
        import_vllm_log_file(folder, out, model, hf_config, dtype, device_name,
                             device_memory_gib, echo, say)
        return
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




def import_vllm_log_file(log_path: Path | None, out: Path, model: str | None,
                         hf_config: Path | None, dtype: str, device_name: str | None,
                         device_memory_gib: float | None, echo: Callable[[str], None],
                         say: Callable[[str], None]) -> None:
    """`--from vllm-log LOG`: fit a component profile to a server log's engine steps;
    `dtype` is the flag's value, "bfloat16" when not given (the log's own dtype wins
    then)."""
    if log_path is None:
        raise ValueError("--from vllm-log needs the server log: sim profile import --from "
                         "vllm-log LOG --out P.csv")
    if device_memory_gib is not None and not device_memory_gib > 0:
        raise ValueError(f"--device-memory-gib {device_memory_gib} must be > 0")
    if hf_config is not None and model is not None:
        raise ValueError("give --model or --hf-config, not both")
    from chunksim.decoder.config import load_hf_config, preset_config
    from chunksim.profiler.vllm_log import read_server_log
    from chunksim.profiler.vllm_log_import import fit_lines, import_vllm_log

    log = read_server_log(log_path)
    served = log.settings.get("model")
    if hf_config is None and model is None and served and (Path(served) / "config.json").is_file():
        hf_config = Path(served) / "config.json"
    if hf_config is None and model is None:
        raise ValueError(f"{log_path}: say which model the server ran: --model PRESET, or "
                         f"--hf-config PATH (the log's model {served!r} has no local "
                         f"config.json)")
    cfg = load_hf_config(hf_config) if hf_config is not None else preset_config(model)
    log_dtype = log.settings.get("dtype")
    if log_dtype in ("float32", "bfloat16", "float16") and dtype != log_dtype:
        if dtype != "bfloat16":  # given on the command line
            raise ValueError(f"--dtype {dtype}: {log_path} says the server ran "
                             f"{log_dtype}; drop --dtype")
        dtype = log_dtype
    meta = import_vllm_log(log, out, cfg, dtype, device_name,
                           None if device_memory_gib is None
                           else int(device_memory_gib * 2**30))
    echo(f"wrote {out} ({meta['points']} component points fitted to "
         f"{len(log.steps)} engine steps) and {out.with_suffix('.json')}")
    echo("\n".join(fit_lines(meta["fit_obj"])))
    block = log.settings.get("block_size")
    if device_memory_gib is None:
        kv = (f"; the server's KV cache held {log.kv_cache_tokens} tokens: sim run "
              f"--kv-blocks {log.kv_cache_tokens // block} --block-size {block}"
              if log.kv_cache_tokens and block else "")
        say(f"note: no --device-memory-gib: give sim run --kv-blocks with this profile{kv}")
