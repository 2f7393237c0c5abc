"""The bundled GPU profiles obey physics: a decode step reads every weight from HBM at most
at the GPU's bandwidth; a prefill step does its FLOPs at most at the GPU's peak; and for
Llama-3.1-8B on H200, one decode (framework time included) costs 1.0-2.0x the weight-read
bound. The GPU figures are the vendors' published dense bf16 specifications, not the
database's own, so the test checks the import against an independent source."""

import pytest

from chunksim.core.shape import BatchShape
from chunksim.latency.profile import bundled_profiles, load_profile
from chunksim.latency.select import latency_model
from chunksim.reports.provenance import EAGER_BANNER, profile_banner

SPECS = {  # GPU: (HBM bytes/s, dense bf16 FLOP/s), from NVIDIA's datasheets
    "h100": (3.35e12, 989e12),
    "h200": (4.8e12, 989e12),
    "b200": (8.0e12, 2.25e15),
}
GPU_PROFILES = sorted(n for n in bundled_profiles() if "cpu" not in n)
DENSE = [n for n in GPU_PROFILES
         if not (load_profile(n).provenance.get("components") or {}).get("moe")]
"""The bounds below read every weight and multiply by every one: a MoE step touches only
the experts its tokens route to (tests/test_moe.py checks that law instead)."""


def gpu_of(prof) -> tuple[float, float]:
    p = prof.provenance
    where = ((p.get("source") or {}).get("system") or p.get("device_name") or "").lower()
    hits = [g for g in SPECS if g in where]
    assert len(hits) == 1, f"{prof.path}: which GPU is {where!r}?"
    return SPECS[hits[0]]


def test_the_imported_llama_gpu_profiles_are_bundled():
    assert {"llama-3.1-8b-h100-vllm", "llama-3.1-8b-h200-vllm", "llama-3.1-8b-b200-vllm",
            "llama-3.1-70b-h200-tp4-vllm"} <= set(GPU_PROFILES)


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("decodes,kv", [(1, 1), (1, 4096), (16, 2048), (128, 1024),
                                        (512, 512)])
def test_a_decode_step_reads_the_weights_no_faster_than_hbm(name, decodes, kv):
    prof = load_profile(name)
    bw, _ = gpu_of(prof)
    floor = prof.provenance["weights_bytes"] / bw
    t, _ = latency_model(prof).step_s(BatchShape(0, 0.0, decodes, float(kv)))
    assert t >= floor, f"{name}: {decodes} decodes in {t * 1e3:.2f} ms < {floor * 1e3:.2f} ms"


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("chunk,prior", [(512, 0), (2048, 0), (8192, 0), (2048, 8192)])
def test_a_prefill_step_does_its_flops_no_faster_than_peak(name, chunk, prior):
    prof = load_profile(name)
    _, peak = gpu_of(prof)
    m = prof.provenance["model"]
    tp = (prof.provenance.get("components") or {}).get("tp") or 1
    # 2 FLOPs per weight per token (the GEMMs), plus attention's QK^T and PV over the
    # chunk's causal positions: 4 x heads x head_dim per (query, key) pair
    params = prof.provenance["weights_bytes"] / 2
    pairs = chunk * prior + chunk * (chunk + 1) / 2
    attn = 4 * m["n_layers"] * m["n_heads"] / tp * m["head_dim"] * pairs
    flops = 2 * params * chunk + attn
    t, _ = latency_model(prof).step_s(BatchShape(chunk, float(prior), 0, 0.0,
                                                 ((chunk, prior),), 0.0, 1))
    assert t >= flops / peak, f"{name}: {t * 1e3:.2f} ms < {flops / peak * 1e3:.2f} ms"


def test_one_8b_decode_on_h200_sits_near_its_weight_read_bound():
    prof = load_profile("llama-3.1-8b-h200-vllm")
    lat = latency_model(prof)
    bound = prof.provenance["weights_bytes"] / SPECS["h200"][0]
    step = lat.step_s(BatchShape(0, 0.0, 1, 1024.0))[0] + lat.overhead(1)
    assert 1.0 * bound <= step <= 2.0 * bound, (step, bound)


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_gpu_profile_carries_a_banner_saying_what_it_is(name):
    prof = load_profile(name)
    banner = profile_banner(prof.path, prof.provenance)
    if prof.provenance.get("device") in ("imported", "modelled"):
        src = prof.provenance["source"]
        assert "not measured on this device" in banner
        assert src["system"] in banner and src["package_version"] in banner
    else:
        assert banner == EAGER_BANNER


@pytest.mark.slow
def test_a_report_page_of_an_imported_profile_carries_its_banner(tmp_path):
    from typer.testing import CliRunner

    from chunksim.cli import app

    res = CliRunner().invoke(app, ["compare", "--profile", "llama-3.1-8b-h200-vllm",
                                   "--policies", "budget", "--chunks", "512", "-n", "30",
                                   "--seeds", "0", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for page in ("report.md", "report.html"):
        text = (tmp_path / page).read_text()
        assert "Imported costs, not measured on this device" in text
        assert "h200_sxm" in text.split("Imported costs", 1)[1][:600]
