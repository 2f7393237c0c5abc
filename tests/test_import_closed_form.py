"""`sim profile import` of a synthetic source with a known joint-attention cross term, a
known framework time and a ragged grid: the imported profile prices steps exactly (closed
form), and the import path's faults and notes name what they are about."""

import subprocess
import sys
from pathlib import Path

import pytest
from factories import (
    CHUNK_LENS,
    DECODE_COUNTS,
    KV_LENS,
    PRIOR_LENS,
    component_rows,
    law_decode,
    law_prefill,
    law_step,
)
from test_component_import import write_folder
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model

ROOT = Path(__file__).resolve().parents[1]
LAYERS = 2  # the `tiny` preset's
FRAMEWORK_MS = 0.8
JOINT_C, JOINT_P, JOINT_D, JOINT_KV = (16, 64, 256, 1024), (0, 1024, 4096), (1, 4, 64), (
    1, 1024, 16384)


def law_cross(c: float, p: float, d: float, kv: float) -> float:
    """The joint call's extra cost over its parts: multilinear, so interpolation is exact."""
    return 4e-9 * c * d + 1e-13 * c * d * kv + 2e-12 * c * p


def law_joint(c, p, d, kv) -> float:
    return law_prefill(c, p) + law_decode(d, kv, 1.0) + law_cross(c, p, d, kv)


def synthetic_source(folder: Path, ragged: bool = True) -> None:
    rows = component_rows()
    if ragged:  # what a real profiler leaves out: one prefill point, one decode line's kv
        rows = [r for r in rows if not (r["component"] == "prefill_attn" and
                                        (r["chunk_len"], r["prior_len"]) == (256, 1024))]
        rows = [r for r in rows if not (r["component"] == "decode_attn" and
                                        r["decode_count"] == 16 and r["kv_len"] == 1024)]
    write_folder(folder, rows)
    lines = ["chunk_len,prior_len,decode_count,kv_len,time_us"]
    for c in JOINT_C:
        for p in JOINT_P:
            for d in JOINT_D:
                for kv in JOINT_KV:
                    if ragged and (c, d) == (64, 4):
                        continue
                    lines.append(f"{c},{p},{d},{kv},{law_joint(c, p, d, kv) * 1e6!r}")
    (folder / "mixed_attn.csv").write_text("\n".join(lines) + "\n")


def said(res) -> str:
    """What the command printed, and its error (the CLI's main() prints that as `error:`)."""
    return res.output + (str(res.exception) if res.exception else "")


def imported(tmp_path: Path, ragged: bool = True):
    synthetic_source(tmp_path / "in", ragged)
    out = tmp_path / "p.csv"
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(out), "--model", "tiny", "--device-name", "synthetic",
                                   "--device-memory-gib", "16", "--framework-ms",
                                   str(FRAMEWORK_MS)])
    assert res.exit_code == 0, res.output
    return load_profile(str(out)), res.output


def test_a_ragged_source_with_a_cross_term_and_framework_time_is_priced_exactly(tmp_path):
    prof, output = imported(tmp_path)
    assert prof.provenance["components"]["mixed_attention"].startswith("joint")
    assert prof.provenance["framework"]["step_s"] == pytest.approx(FRAMEWORK_MS / 1e3)
    lat = latency_model(prof)
    assert lat.overhead(5) == pytest.approx(FRAMEWORK_MS / 1e3, rel=1e-12)
    # the gaps were filled and reported, each point named
    assert "prefill_attn at {'chunk_len': 256, 'prior_len': 1024}" in output
    assert "decode_attn at {'decode_count': 16, 'kv_len': 1024" in output
    assert "mixed_attn at {'chunk_len': 64, 'prior_len': 0, 'decode_count': 4" in output
    # one chunk, equal decode contexts: the joint call itself
    kvs = [1000.0] * 3
    t, out = lat.step_s(BatchShape(300, 1000.0, 3, 1000.0, ((300, 1000),), 1000.0, 4))
    want = law_step([(300, 1000)], kvs, 4, layers=LAYERS) + LAYERS * law_cross(
        300, 1000, 3, 1000)
    assert not out and t == pytest.approx(want, rel=1e-9)
    # two chunks, unequal decodes: the parts, plus the cross term at the chunks' tokens and
    # token-weighted prior, the decodes' mean context
    chunks, kvs = [(200, 3000), (40, 0)], [500.0, 1000.0, 1500.0]
    shape = BatchShape(240, 0.0, 3, 1000.0, tuple(chunks), 1500.0, 4)
    prior = 200 * 3000 / 240
    want = law_step(chunks, kvs, 4, layers=LAYERS) + LAYERS * law_cross(240, prior, 3, 1000)
    assert lat.step_s(shape)[0] == pytest.approx(want, rel=1e-9)
    # prefill-only and decode-only steps have no cross term
    assert lat.step_s(BatchShape(256, 1024.0, 0, 0.0, ((256, 1024),), 0.0, 1))[0] == (
        pytest.approx(law_step([(256, 1024)], [], 1, layers=LAYERS), rel=1e-9))
    assert lat.step_s(BatchShape(0, 0.0, 16, 1024.0, (), 1024.0, 16))[0] == pytest.approx(
        law_step([], [1024.0] * 16, 16, layers=LAYERS), rel=1e-9)


def test_without_a_joint_table_a_mixed_step_is_the_sum_of_its_parts(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    (tmp_path / "in" / "mixed_attn.csv").unlink()
    out = tmp_path / "p.csv"
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(out), "--model", "tiny", "--device-name", "x"])
    assert res.exit_code == 0, res.output
    assert "--kv-blocks" in res.output  # no device memory: the run needs the KV capacity
    prof = load_profile(str(out))
    assert prof.provenance["components"]["mixed_attention"] == "sum-of-parts"
    assert prof.provenance["device_memory_bytes"] is None
    chunks, kvs = [(300, 1000)], [1000.0] * 3
    t = latency_model(prof).step_s(BatchShape(300, 1000.0, 3, 1000.0, tuple(chunks),
                                              1000.0, 4))[0]
    assert t == pytest.approx(law_step(chunks, kvs, 4, layers=LAYERS), rel=1e-9)
    res = CliRunner().invoke(app, ["run", "--profile", str(out), "--num-requests", "5",
                                   "--json", "--kv-blocks", "4096"])
    assert res.exit_code == 0, res.output


def test_the_cross_term_is_held_at_the_joint_tables_edge(tmp_path):
    prof, _ = imported(tmp_path, ragged=False)
    lat = latency_model(prof)
    far = BatchShape(4096, 0.0, 64, 1024.0, ((4096, 0),), 1024.0, 65)
    t, out = lat.step_s(far)
    held = law_cross(1024, 0, 64, 1024)  # chunk 4096 is beyond the joint table's 1024
    assert out
    assert t == pytest.approx(law_step([(4096, 0)], [1024.0] * 64, 65, layers=LAYERS)
                              + LAYERS * held, rel=1e-9)


def test_an_unbracketed_gap_is_an_error_naming_the_point(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    lines = (tmp_path / "in" / "prefill_attn.csv").read_text().splitlines()
    # the largest chunk at the largest prior: no point beyond it on either axis
    last = f"{CHUNK_LENS[-1]},{PRIOR_LENS[-1]},"
    (tmp_path / "in" / "prefill_attn.csv").write_text(
        "\n".join(x for x in lines if not x.startswith(last)) + "\n")
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--device-name", "x"])
    assert res.exit_code != 0
    assert (f"prefill_attn.csv: no measured points bracket {{'chunk_len': {CHUNK_LENS[-1]}, "
            f"'prior_len': {PRIOR_LENS[-1]}}}") in said(res)


def test_a_table_fault_names_the_input_file_and_line(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    path = tmp_path / "in" / "decode_attn.csv"
    lines = path.read_text().splitlines()
    # one decode's longest context is its own: kv_max must equal kv_len
    bad = next(i for i, x in enumerate(lines) if x.startswith("1,256,"))
    lines[bad] = "1,256,512," + lines[bad].split(",", 3)[3]
    path.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--device-name", "x"])
    assert res.exit_code != 0
    assert f"decode_attn.csv line {bad + 1}, column kv_max" in said(res)


def test_the_model_is_required_or_read_from_the_folder(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    args = ["profile", "import", str(tmp_path / "in"), "--out", str(tmp_path / "p.csv"),
            "--device-name", "x"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "--model PRESET" in said(res)
    (tmp_path / "in" / "config.json").write_text(
        '{"hidden_size": 256, "num_hidden_layers": 7, "num_attention_heads": 4, '
        '"num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}')
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert load_profile(str(tmp_path / "p.csv")).provenance["components"]["layers"] == 7


def test_a_head_without_a_logits_0_row_gets_one_and_a_note(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    head = tmp_path / "in" / "head.csv"
    head.write_text("\n".join(x for x in head.read_text().splitlines()
                              if not x.startswith("0,")) + "\n")
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--device-name", "x"])
    assert res.exit_code == 0, res.output
    assert "no logits = 0 row" in res.output
    lat = latency_model(load_profile(str(tmp_path / "p.csv")))
    assert lat.head.at(0) == (0.0, 0.0, False)


def test_the_old_flag_spelling_prints_the_new_name(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--device-name", "x", "--step-overhead-ms", "2"])
    assert res.exit_code == 0, res.output
    assert "note: --step-overhead-ms is now --framework-ms" in res.output
    assert load_profile(str(tmp_path / "p.csv")).provenance["step_overhead_s"] == 2e-3


def test_a_profile_without_decode_spreads_prices_the_mean_and_flags_nothing(tmp_path):
    synthetic_source(tmp_path / "in", ragged=False)
    path = tmp_path / "in" / "decode_attn.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0]] + [x for x in lines[1:] if
                                            float(x.split(",")[1]) == float(x.split(",")[2])])
                    + "\n")
    (tmp_path / "in" / "mixed_attn.csv").unlink()
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path / "in"), "--out",
                                   str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--device-name", "x"])
    assert res.exit_code == 0, res.output
    lat = latency_model(load_profile(str(tmp_path / "p.csv")))
    t, out = lat.step_s(BatchShape(0, 0.0, 4, 1000.0, (), 3000.0, 4))
    assert not out
    assert t == pytest.approx(law_step([], [1000.0] * 4, 4, layers=LAYERS), rel=1e-9)
    many, flags = lat.decode_steps_s(4, [1000.0, 1000.0], kv_max=[3000.0, 1000.0])
    assert not flags.any() and many[0] == many[1] == t


def test_the_import_runs_without_torch(tmp_path):
    synthetic_source(tmp_path / "in")
    code = ("import sys; sys.modules['torch'] = None\n"
            "from chunksim.cli import main\n"
            f"sys.argv = ['sim', 'profile', 'import', {str(tmp_path / 'in')!r}, '--out', "
            f"{str(tmp_path / 'p.csv')!r}, '--model', 'tiny', '--device-name', 'x']\n"
            "main()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert load_profile(str(tmp_path / "p.csv")).kind == "components"


def test_the_grid_constants_cover_the_joint_axes():
    # the joint table's axes sit inside the parts' grids, so its cross term is exact there
    assert set(JOINT_C) <= set(CHUNK_LENS) and set(JOINT_P) <= set(PRIOR_LENS)
    assert set(JOINT_D) <= set(DECODE_COUNTS) and set(JOINT_KV) <= set(KV_LENS)
