"""Prefix hashes at KV-block granularity: a generic trace's hash column (any block size,
chained as vLLM chains block hashes) and shared prefixes that diverge anywhere."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import Constant
from chunksim.workloads.shared_prefix import SharedPrefixConfig, shared_prefix
from chunksim.workloads.synthetic import SyntheticConfig
from chunksim.workloads.traces.config import TimeUnit, TraceFormat, TraceOptions
from chunksim.workloads.traces.load import load_trace


def _jsonl(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _opts(**kw):
    return TraceOptions(format=TraceFormat.GENERIC, time_unit=TimeUnit.S, **kw)


def test_generic_hashes_are_chained_and_keep_their_block_size(tmp_path):
    p = _jsonl(tmp_path, [
        {"timestamp": 0, "prompt_tokens": 64, "output_tokens": 2, "h": [7, 8, 9, 10]},
        {"timestamp": 1, "prompt_tokens": 50, "output_tokens": 2, "h": [7, 8, 5]},
        # block 8 after another first block is other content: it must not match
        {"timestamp": 2, "prompt_tokens": 40, "output_tokens": 2, "h": [6, 8]},
        {"timestamp": 3, "prompt_tokens": 10, "output_tokens": 2, "h": []},
    ])
    w = load_trace(p, _opts(hash_column="h", hash_block_tokens=16))
    assert w.prefix_block_tokens == 16
    h = [r.prefix_hashes for r in w.requests]
    assert h[0][:2] == h[1][:2] and h[0][2] != h[1][2]
    assert h[2][0] != h[0][0] and h[2][1] != h[0][1]
    assert h[3] == ()
    assert w.params["hash_column"] == "h" and w.params["hash_block_tokens"] == 16


def test_generic_csv_cells_take_json_lists_or_spaced_integers(tmp_path):
    p = tmp_path / "t.csv"
    pd.DataFrame({"timestamp": [0, 1, 2], "prompt_tokens": [48, 48, 48],
                  "output_tokens": [1, 1, 1],
                  "hashes": ["[1, 2, 3]", "1 2 4", ""]}).to_csv(p, index=False)
    w = load_trace(p, _opts(hash_column="hashes", hash_block_tokens=16))
    h = [r.prefix_hashes for r in w.requests]
    assert len(h[0]) == 3 and h[0][:2] == h[1][:2] and h[0][2] != h[1][2] and h[2] == ()


@pytest.mark.parametrize("cell,match", [('"[1, x]"', "not a list of integer hashes"),
                                        ("1 2 3 4", "cover more than the 48-token prompt")])
def test_generic_bad_hashes_name_the_line_and_the_fix(tmp_path, cell, match):
    p = tmp_path / "t.csv"
    p.write_text(f"timestamp,prompt_tokens,output_tokens,h\n0,48,1,1\n1,48,1,{cell}\n")
    with pytest.raises(ValueError, match=match) as e:
        load_trace(p, _opts(hash_column="h", hash_block_tokens=16))
    assert "line 3" in str(e.value)


def test_hash_column_needs_its_block_size_and_a_generic_trace(tmp_path):
    with pytest.raises(ValueError, match="--hash-block-tokens"):
        _opts(hash_column="h")
    p = _jsonl(tmp_path, [{"timestamp": 0, "input_length": 10, "output_length": 1,
                           "hash_ids": [1]}], "m.jsonl")
    with pytest.raises(ValueError, match="generic only"):
        load_trace(p, TraceOptions(format=TraceFormat.MOONCAKE, hash_column="h",
                                   hash_block_tokens=16))


@pytest.mark.parametrize("hash_tokens,cached", [(16, 48), (8, 48), (32, 32)])
def test_generic_trace_hits_at_block_granularity_end_to_end(tmp_path, hash_tokens, cached):
    # request 1 shares the first 56 tokens of request 0's 64, then diverges. The KV cache
    # (16-token blocks) reuses the full blocks inside the shared part: 48 tokens when the
    # hashes are 16 or 8 tokens wide; with 32-token hashes only the first hash (32) matches.
    # (--block-size 16: the default profile is a CPU one, whose blocks hold 128 tokens.)
    n = 64 // hash_tokens
    same = 56 // hash_tokens
    a = list(range(1, n + 1))
    b = a[:same] + [100 + j for j in range(n - same)]
    p = _jsonl(tmp_path, [
        {"timestamp": 0, "prompt_tokens": 64, "output_tokens": 1, "h": a},
        {"timestamp": 1, "prompt_tokens": 64, "output_tokens": 1, "h": b}])
    out = tmp_path / "out"
    res = CliRunner().invoke(app, [
        "run", "--trace", str(p), "--trace-format", "generic", "--time-unit", "s",
        "--hash-column", "h", "--hash-block-tokens", str(hash_tokens), "--policy", "budget",
        "--block-size", "16", "--schedule-log", "--out", str(out)])
    assert res.exit_code == 0, res.output
    log = pd.read_parquet(out / "schedule.parquet")
    row = log[(log.request_id == 1) & (log.kind == "new")].iloc[0]
    assert (row.cached_tokens, row.tokens) == (cached, 64 - cached)


def _base(n=400, prompt=40):
    return SyntheticConfig(ArrivalProcess(ArrivalKind.POISSON, 5.0), Constant(prompt),
                           Constant(4), num_requests=n, seed=3)


def test_shared_prefixes_diverge_anywhere_within_the_prompt():
    c = SharedPrefixConfig(_base(), num_prefixes=2, prefix_tokens=200, block_tokens=16,
                           match_min_tokens=0)
    w = shared_prefix(c)
    plain = shared_prefix(SharedPrefixConfig(_base(), num_prefixes=2, prefix_tokens=200))
    # prompt lengths and arrivals are those of the plain generator
    assert [r.prompt_tokens for r in w.requests] == [r.prompt_tokens for r in plain.requests]
    assert [r.arrival_s for r in w.requests] == [r.arrival_s for r in plain.requests]
    shared_ids = 2 * (200 // 16)
    heads = [sum(1 for h in r.prefix_hashes if h < shared_ids) for r in w.requests]
    # every number of shared blocks from 0 to all 12 occurs: matches end anywhere
    assert set(heads) == set(range(13))
    for r in w.requests:  # the shared blocks lead, and belong to one family
        k = sum(1 for h in r.prefix_hashes if h < shared_ids)
        assert all(h < shared_ids for h in r.prefix_hashes[:k])
        assert len({h // 12 for h in r.prefix_hashes[:k]}) <= 1
    with pytest.raises(ValueError, match="--prefix-match-min"):
        SharedPrefixConfig(_base(), prefix_tokens=200, match_min_tokens=201)


def test_prefix_match_min_lowers_the_hit_rate_through_the_cli(tmp_path):
    def hit(*extra):
        res = CliRunner().invoke(app, ["run", "--workload", "shared-prefix", "-n", "60",
                                       "--rate", "4", "--json", *extra])
        assert res.exit_code == 0, res.output
        return json.loads(res.output.strip().splitlines()[-1])["prefix_cache_hit_rate"]

    whole, partial = hit(), hit("--prefix-match-min", "0")
    assert 0 < partial < whole
    res = CliRunner().invoke(app, ["run", "--workload", "poisson", "--hash-block-tokens", "16"])
    assert res.exit_code != 0
