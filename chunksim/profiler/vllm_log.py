"""Read a `vllm serve --enable-logging-iteration-details` log: its engine steps and the
server's settings. Torch-free, no vLLM import.

vLLM (v1 `LoggingStatLogger._log_iteration_details`, 0.32) writes one line per engine
step, in the API server's log:

    Engine 000: Iteration(12): 1 context requests, 256 context tokens, 3 generation
    requests, 3 generation tokens, iteration elapsed time: 22.70 ms, CPU KV cache usage: 1.2%

(on one line, after the logger's own prefix). A "context" request is one with no output
token yet (a prompt chunk); a "generation" request has one (a decode, or a preempted
request prefilling again). The elapsed time is the engine core's: the forward pass and
sampling, without scheduling and the output update. A data-parallel dummy step is marked
" (dummy)" and carries no work.

The server states its settings near the top of the log: `version X` in the banner (or
`vLLM server version X` under a logging config of one's own),
`non-default args: {...}` (a Python dict literal of the flags given) and `Chunked prefill
is enabled with max_num_batched_tokens=N`. Whatever the log does not state is left out
(None), never guessed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ITERATION = re.compile(
    r"Engine (?P<engine>\d+): Iteration\((?P<index>\d+)\): "
    r"(?P<ctx_req>\d+) context requests, (?P<ctx_tok>\d+) context tokens, "
    r"(?P<gen_req>\d+) generation requests, (?P<gen_tok>\d+) generation tokens, "
    r"iteration elapsed time: (?P<ms>[0-9.]+) ms(?P<dummy> \(dummy\))?, "
    r"(?P<device>\S+) KV cache usage: (?P<kv>[0-9.]+)%")
"""One iteration-details line (the format string of vLLM 0.32's LoggingStatLogger)."""

_MARK = "Iteration("
_ARGS = re.compile(r"non-default args: (\{.*\})\s*$")
_VERSION = re.compile(r"(?:vLLM server version|█ +version) (\d+\.\d+[^\s,]*)")
_ENGINE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")

SETTINGS = ("model", "block_size", "max_num_seqs", "max_num_batched_tokens",
            "enable_prefix_caching", "enable_chunked_prefill", "long_prefill_token_threshold",
            "max_num_partial_prefills", "max_model_len", "dtype", "enforce_eager",
            "async_scheduling", "tensor_parallel_size", "data_parallel_size")
"""Server flags the log's `non-default args` may state that a profile or a replay uses."""


@dataclass(frozen=True)
class Step:
    """One engine step of the log."""

    index: int
    """vLLM's iteration index (restarts at 0 when the server does)."""
    prefill_requests: int
    prefill_tokens: int
    decode_requests: int
    decode_tokens: int
    elapsed_s: float
    kv_usage_pct: float
    line: int
    """Line of the log (1-based)."""

    @property
    def kind(self) -> str:
        """prefill, decode or mixed."""
        if self.prefill_tokens and self.decode_tokens:
            return "mixed"
        return "prefill" if self.prefill_tokens else "decode"


@dataclass
class ServerLog:
    """A log's steps (engine 0, dummy steps left out) and the settings it states."""

    path: str
    steps: list[Step]
    settings: dict = field(default_factory=dict)
    """Flags from `non-default args` (only those in SETTINGS that the log states)."""
    version: str | None = None
    kv_cache_tokens: int | None = None
    device: str | None = None
    """The KV cache's device as the step lines name it (CPU, GPU, ...)."""
    dummy_steps: int = 0


def parse_line(text: str) -> dict | None:
    """The fields of one iteration-details line, or None when the line is not one."""
    m = ITERATION.search(text)
    if m is None:
        return None
    return m.groupdict()


def read_server_log(path: Path) -> ServerLog:
    """Read a vLLM server log; ValueError (naming the file and line) on a step line that
    does not parse, a log of several engines, or a log with no step lines."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    log = ServerLog(str(path), [])
    engines: set[str] = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        if _MARK in raw:
            got = parse_line(raw)
            if got is None:
                if "Iteration(" in raw and "context requests" in raw:
                    raise ValueError(f"{path} line {n}: an iteration-details line in a "
                                     f"format this reader does not know (vLLM 0.32's): "
                                     f"{raw.strip()[:160]!r}")
                continue
            engines.add(got["engine"])
            if got["dummy"]:
                log.dummy_steps += 1
                continue
            log.device = got["device"]
            log.steps.append(Step(int(got["index"]), int(got["ctx_req"]), int(got["ctx_tok"]),
                                  int(got["gen_req"]), int(got["gen_tok"]),
                                  float(got["ms"]) / 1e3, float(got["kv"]), n))
            continue
        _settings_line(raw, log)
    if len(engines) > 1:
        raise ValueError(f"{path}: steps of {len(engines)} engines ({', '.join(sorted(engines))}"
                         f"; data parallel); give the log of a server with one engine")
    if not log.steps:
        raise ValueError(f"{path}: no engine step lines; start the server with vllm serve "
                         f"--enable-logging-iteration-details and serve some requests")
    return log


def _settings_line(raw: str, log: ServerLog) -> None:
    if "non-default args:" in raw:
        m = _ARGS.search(raw)
        if m:
            try:
                args = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                args = {}
            if isinstance(args, dict):
                log.settings.update({k: args[k] for k in SETTINGS if k in args})
        return
    m = _CHUNKED.search(raw)
    if m and "max_num_batched_tokens" not in log.settings:
        log.settings["max_num_batched_tokens"] = int(m.group(1))
        return
    m = _KV_TOKENS.search(raw)
    if m:
        log.kv_cache_tokens = int(m.group(1).replace(",", ""))
        return
    if log.version is None:
        m = _ENGINE_VERSION.search(raw) or _VERSION.search(raw)
        if m:
            log.version = m.group(1)
