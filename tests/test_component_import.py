"""`sim profile import`: external per-component files round-trip into the model, the
example converter's output imports, and malformed files are named by file, line, column."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from factories import component_rows, law_step
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.decoder.config import preset_config
from chunksim.latency.component_table import KEYS
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.profiler.importer import import_components

ROOT = Path(__file__).resolve().parents[1]


def write_folder(folder: Path, rows, unit: str = "us") -> None:
    """The import layout, from table rows (seconds) in `unit`."""
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    for comp, keys in KEYS.items():
        part = df[df.component == comp]
        if part.empty:
            continue
        out = part[list(keys)].copy()
        out[f"time_{unit}"] = [repr(t * scale) for t in part.median_s]
        out.to_csv(folder / f"{comp}.csv", index=False)


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_an_import_round_trips_into_the_same_model(tmp_path, unit):
    write_folder(tmp_path / "in", component_rows(), unit)
    model = preset_config("tiny")
    import_components(tmp_path / "in", tmp_path / "p.csv", model, "float32", "synthetic",
                      2**34)
    prof = load_profile(str(tmp_path / "p.csv"))
    assert prof.kind == "components" and prof.provenance["components"]["layers"] == 2
    lat = latency_model(prof)
    chunks, kvs = [(300, 1200), (64, 0)], [100, 900, 2000]
    shape = BatchShape(364, 0.0, 3, 1000.0, tuple(chunks), 2000.0, 4)
    assert lat.step_s(shape)[0] == pytest.approx(law_step(chunks, kvs, 4, layers=2),
                                                 rel=1e-9)


def _folder_with(tmp_path: Path, comp: str, text: str) -> Path:
    folder = tmp_path / "in"
    write_folder(folder, component_rows())
    (folder / f"{comp}.csv").write_text(text)
    return folder


@pytest.mark.parametrize("comp,text,where", [
    ("dense", "tokens,time_us\n1,10\n16,abc\n", "dense.csv line 3, column time_us"),
    ("dense", "tokens,time_ns\n1,10\n", "dense.csv line 1"),
    ("head", "logit,time_us\n1,10\n", "head.csv line 1, column logits"),
    ("prefill_attn", "chunk_len,prior_len,time_ms\n16,0,1\n-4,0,1\n",
     "prefill_attn.csv line 3, column chunk_len"),
    ("decode_attn", "decode_count,kv_len,kv_max,time_us,flops\n1,1,1,3,9\n",
     "decode_attn.csv line 1, column flops"),
])
def test_a_malformed_import_file_is_named_by_file_line_and_column(tmp_path, comp, text,
                                                                 where):
    folder = _folder_with(tmp_path, comp, text)
    with pytest.raises(ValueError, match=where.replace(".", r"\.")):
        import_components(folder, tmp_path / "p.csv", preset_config("tiny"), "float32",
                          "x", 2**34)
    assert not (tmp_path / "p.csv").exists()


def test_a_missing_component_file_is_named(tmp_path):
    folder = tmp_path / "in"
    write_folder(folder, component_rows())
    (folder / "head.csv").unlink()
    with pytest.raises(ValueError, match="no head.csv"):
        import_components(folder, tmp_path / "p.csv", preset_config("tiny"), "float32",
                          "x", 2**34)


def test_the_example_converter_output_imports_and_runs(tmp_path):
    ops = tmp_path / "ops"
    subprocess.run([sys.executable, str(ROOT / "examples" / "vllm_ops_to_components.py"),
                    str(ROOT / "examples" / "data" / "vllm_style_ops.csv"), str(ops)],
                   check=True, capture_output=True)
    out = tmp_path / "imported.csv"
    res = CliRunner().invoke(app, ["profile", "import", str(ops), "--out", str(out),
                                   "--model", "llama-3.1-8b", "--device-name", "example GPU",
                                   "--device-memory-gib", "80"])
    assert res.exit_code == 0, res.output
    prof = load_profile(str(out))
    lat = latency_model(prof)
    # one layer's dense ops at 64 tokens sum to the converter's figure, x 32 layers
    ops_df = pd.read_csv(ROOT / "examples" / "data" / "vllm_style_ops.csv")
    dense64 = ops_df[(ops_df.num_tokens == 64) & (ops_df.op != "embed_tokens")
                     ].cuda_time_us.sum() * 1e-6
    assert lat.dense.at(64)[0] == pytest.approx(dense64, rel=1e-6)
    res = CliRunner().invoke(app, ["run", "--profile", str(out), "--policy", "budget",
                                   "--chunk", "256", "--num-requests", "20", "--json"])
    assert res.exit_code == 0, res.output
