"""Which SDPA kernels the model may use, and the probe that tells whether a new step shape
costs more than its repeat (the cuDNN per-shape plan that the first GPU validation hit)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from factories import SMALL as SMALL_2K

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from chunksim.decoder import attention  # noqa: E402
from chunksim.decoder.attention import SDPA_BACKENDS  # noqa: E402
from chunksim.decoder.kv import KVPool  # noqa: E402
from chunksim.decoder.model import build_model  # noqa: E402
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step  # noqa: E402
from chunksim.live.runtime import Runtime  # noqa: E402
from chunksim.live.settings import LiveSettings  # noqa: E402
from chunksim.profiler.first_call import KINDS, compare_kernels, first_call_ratios  # noqa: E402
from chunksim.validate.run import environment_notes  # noqa: E402

SMALL = replace(SMALL_2K, max_position=4096)
FLAGS = ("cudnn_sdp_enabled", "flash_sdp_enabled", "mem_efficient_sdp_enabled",
         "math_sdp_enabled")


def _flags() -> dict[str, bool]:
    return {f: getattr(torch.backends.cuda, f)() for f in FLAGS}


def _run_step(model, cuda_kernels: bool, monkeypatch) -> list[dict[str, bool]]:
    """One mixed step (a chunk over a cached prefix + decodes of unequal lengths); the
    backend flags SDPA saw at each call."""
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*a, **kw):
        seen.append(_flags())
        return real(*a, **kw)

    # patched where attention.py looks it up, not in torch.nn.functional: CausalBias's
    # __torch_function__ recognises SDPA by identity there
    monkeypatch.setattr(attention, "F", SimpleNamespace(scaled_dot_product_attention=spy))
    pools = [KVPool(SMALL, 4, 128, "cpu", torch.float32)]
    batch = StepBatch((SeqSlice(0, 16, 8), SeqSlice(1, 30, 1), SeqSlice(2, 41, 1)))
    step = prepare_step(batch, pools, "cpu", cuda_kernels=cuda_kernels)
    with torch.inference_mode():
        model.forward_step(torch.zeros(batch.total_tokens, dtype=torch.long), step, pools)
    monkeypatch.undo()
    return seen


@pytest.mark.slow
def test_cuda_steps_exclude_cudnn_sdpa_and_restore_the_flags(monkeypatch):
    assert "cudnn" not in SDPA_BACKENDS
    model = build_model(SMALL, "cpu", torch.float32)
    before = _flags()
    assert before["cudnn_sdp_enabled"]  # torch's default: allowed, which is the point
    seen = _run_step(model, True, monkeypatch)
    assert len(seen) == 2 * SMALL.n_layers  # one prefill segment + one decode group
    want = {"cudnn_sdp_enabled": False, "flash_sdp_enabled": "flash" in SDPA_BACKENDS,
            "mem_efficient_sdp_enabled": "efficient" in SDPA_BACKENDS,
            "math_sdp_enabled": "math" in SDPA_BACKENDS}
    assert all(s == want for s in seen)
    assert _flags() == before  # the restriction ends with the step


def test_torch_default_kernels_and_cpu_steps_leave_sdpa_alone(monkeypatch):
    model = build_model(SMALL, "cpu", torch.float32)
    before = _flags()
    assert all(s == before for s in _run_step(model, False, monkeypatch))  # CPU kernels
    model.sdpa_backends = None
    assert all(s == before for s in _run_step(model, True, monkeypatch))


def _runtime() -> Runtime:
    return Runtime(LiveSettings(SMALL, threads=1, warmup_steps=0))


def test_first_call_probe_reports_every_kind_and_restores_the_model():
    rt = _runtime()
    out = compare_kernels(rt.model, rt.device, rt.dtype, rt.sync, count=4)
    assert rt.model.sdpa_backends == SDPA_BACKENDS
    assert out["torch_default"]["sdpa_backends"] is None
    assert out["chunksim"]["sdpa_backends"] == list(SDPA_BACKENDS)
    for r in out.values():
        for kind in KINDS:
            f, a = r[kind]["first_s"], r[kind]["repeat_s"]
            assert f > 0 and a > 0 and r[kind]["ratio"] == f / a
    with pytest.raises(ValueError, match="max_position"):
        first_call_ratios(rt.model, rt.device, rt.dtype, rt.sync, 4, SMALL.max_position)


def test_first_call_probe_sees_a_cost_paid_once_per_new_shape(monkeypatch):
    """A stand-in for a per-shape plan build: 20 ms the first time a step shape runs,
    nothing on a repeat, on a clock that only the stand-in advances (so the machine's load
    cannot blur it). The probe must time each shape's first call apart from its repeat."""
    from chunksim.profiler import first_call

    rt = _runtime()
    real = rt.model.forward_step
    built = set()
    clock = [0.0]

    def forward(ids, prepared, pools):
        key = tuple((s.cached_tokens, s.new_tokens) for s in prepared.batch.seqs)
        clock[0] += 0.001 + (0.020 if key not in built else 0.0)
        built.add(key)
        return real(ids, prepared, pools)

    monkeypatch.setattr(rt.model, "forward_step", forward)
    monkeypatch.setattr(first_call, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    out = first_call_ratios(rt.model, rt.device, rt.dtype, rt.sync, count=4)
    assert len(built) == 3 * 4  # each shape built once: the repeats found theirs
    for kind in KINDS:
        assert out[kind]["first_s"] == pytest.approx(0.021)
        assert out[kind]["repeat_s"] == pytest.approx(0.001)
        assert out[kind]["ratio"] == pytest.approx(21.0)


def test_environment_notes_name_a_mismatch_only_on_cuda():
    live_cuda = {"live": {"device": "cuda"}, "sdpa_backends": ["flash", "efficient", "math"],
                 "torch_version": "2.11.0"}
    old_profile = {"device": "cuda", "torch_version": "2.11.0"}  # before sdpa_backends
    notes = environment_notes(old_profile, live_cuda)
    assert len(notes) == 1 and "torch's default kernels" in notes[0]
    same = {**old_profile, "sdpa_backends": ["flash", "efficient", "math"]}
    assert environment_notes(same, live_cuda) == []
    cpu = {"live": {"device": "cpu"}, "sdpa_backends": None, "torch_version": "2.13.0"}
    assert environment_notes({"device": "cpu", "torch_version": "2.13.0"}, cpu) == []
    assert "torch differs" in environment_notes({"torch_version": "2.12.0"}, cpu)[0]
    cheap = {k: {"first_s": 1.0, "repeat_s": 1.0, "ratio": 1.1} for k in KINDS}
    costly = {**cheap, "decode": {"first_s": 2.6, "repeat_s": 1.0, "ratio": 2.6}}
    prof = {"device": "cpu", "torch_version": "2.13.0"}
    assert environment_notes({**prof, "first_call": cheap}, cpu) == []
    [note] = environment_notes({**prof, "first_call": costly}, cpu)
    assert "new decode shape took 2.6x" in note
    from chunksim.decoder.step import ATTENTION_BACKEND

    assert environment_notes({**prof, "attention_backend": ATTENTION_BACKEND}, cpu) == []
    [note] = environment_notes({**prof, "attention_backend": "sdpa-per-sequence"}, cpu)
    assert "measured with sdpa-per-sequence" in note and "re-profile" in note


def test_sim_profile_warns_when_a_new_shape_costs_more_than_its_repeat():
    from chunksim.profiler.measure_flow import first_call_warning

    calm = {k: {"first_s": 1.0, "repeat_s": 1.0, "ratio": 1.05} for k in KINDS}
    assert first_call_warning(calm) is None and first_call_warning(None) is None
    costly = {**calm, "decodes_unequal": {"first_s": 3.0, "repeat_s": 1.0, "ratio": 3.0}}
    warning = first_call_warning({"sdpa_backends": None, "kv_start": 1301, **costly})
    assert "decodes_unequal" in warning and "3.0x" in warning
