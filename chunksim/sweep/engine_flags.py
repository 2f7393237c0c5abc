"""The one table of engine flags a verdict may print, with the engine versions it was
checked against: `vllm serve`, `vllm bench serve` and SGLang's `launch_server`.

Every command `sweep.deploy` emits is built from these rows only, and `parse_command`
reads a printed command back, refusing any flag the table lacks or a value of the wrong
kind, so a test can replay every recommendation through it (and, where vLLM is installed,
through vLLM's own argument parser: tests/test_vllm_flags.py).

Sources checked, for the modelled vLLM (`core.vllm_version.VLLM_VERSION`): `vllm serve`'s
parser (`vllm.entrypoints.launchers.cli_args.make_arg_parser` over `EngineArgs`:
max_num_batched_tokens, max_num_seqs, long_prefill_token_threshold, enable_chunked_prefill,
scheduling policy fcfs|priority, async_scheduling on/off, block size, gpu memory
utilization, num_gpu_blocks_override, kv offloading size and backend native|lmcache),
`KVTransferConfig` (`--kv-transfer-config` with kv_connector NixlConnector, kv_role
kv_producer | kv_consumer | kv_both), `SpeculativeConfig` (`--speculative-config` JSON:
method ngram | eagle | eagle3 | mtp | draft_model, model, num_speculative_tokens) and
`vllm bench serve`'s parser (`vllm.benchmarks.serve.add_cli_args`); and SGLang's server
arguments (docs/advanced_features/server_arguments.md, 0.5 series; PD disaggregation guide;
speculative decoding: `--speculative-algorithm` EAGLE | EAGLE3 | NEXTN | STANDALONE with its
step, top-k and draft-token counts).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from chunksim.core.vllm_version import VLLM_VERSION

ENGINE_VERSIONS: dict[str, str] = {"vllm": VLLM_VERSION, "sglang": "0.5"}
"""The engine versions every flag of the table was checked against."""


@dataclass(frozen=True)
class EngineFlag:
    """One flag of one engine command, and the chunksim setting it carries."""

    flag: str
    kind: str
    """int, float, rate (a float or `inf`), str, json, switch (no value), or `choice:a|b`."""
    carries: str
    """The chunksim setting (or bench input) it expresses."""

    def check(self, value: str | None) -> None:
        """ValueError when `value` is not of this flag's kind."""
        if self.kind == "switch":
            if value is not None:
                raise ValueError(f"{self.flag} takes no value (got {value!r})")
            return
        if value is None:
            raise ValueError(f"{self.flag} needs a value ({self.kind})")
        try:
            if self.kind == "int":
                int(value)
            elif self.kind == "float":
                float(value)
            elif self.kind == "rate":
                if value != "inf":
                    float(value)
            elif self.kind == "json":
                doc = json.loads(value)
        except ValueError:
            raise ValueError(f"{self.flag} {value!r} is not a {self.kind}") from None
        if self.flag == "--speculative-config":
            _check_speculative(doc)
        if self.kind.startswith("choice:") and value not in self.kind[7:].split("|"):
            raise ValueError(f"{self.flag} {value!r}: one of {self.kind[7:]}")


def _check_speculative(doc: object) -> None:
    """ValueError unless `doc` is a `--speculative-config` of the table's keys and kinds,
    with its method and a draft count >= 1."""
    if not isinstance(doc, dict):
        raise ValueError(f"--speculative-config {doc!r} is not a JSON object")
    for key, value in doc.items():
        kind = SPECULATIVE_CONFIG_KEYS.get(key)
        if kind is None:
            raise ValueError(f"--speculative-config key {key!r} is not in the flag table")
        if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)
                                  and value >= 1):
            raise ValueError(f"--speculative-config {key} {value!r} is not an int >= 1")
        if kind == "str" and not (isinstance(value, str) and value):
            raise ValueError(f"--speculative-config {key} {value!r} is not a name")
        if kind.startswith("choice:") and value not in kind[7:].split("|"):
            raise ValueError(f"--speculative-config {key} {value!r}: one of {kind[7:]}")
    missing = {"method", "num_speculative_tokens"} - set(doc)
    if missing:
        raise ValueError(f"--speculative-config lacks {', '.join(sorted(missing))}")


def _table(*rows: EngineFlag) -> dict[str, EngineFlag]:
    return {r.flag: r for r in rows}


F = EngineFlag
VLLM_SERVE = _table(
    F("--tensor-parallel-size", "int", "the profile's tensor-parallel degree"),
    F("--max-num-batched-tokens", "int", "budget/sjf/whole max_num_batched_tokens"),
    F("--max-num-seqs", "int", "max_num_seqs"),
    F("--long-prefill-token-threshold", "int", "long_prefill_token_threshold (chunk: --chunk)"),
    F("--enable-chunked-prefill", "switch", "enable_chunked_prefill on"),
    F("--no-enable-chunked-prefill", "switch", "enable_chunked_prefill off; whole"),
    F("--enable-prefix-caching", "switch", "--prefix-caching"),
    F("--no-enable-prefix-caching", "switch", "--no-prefix-caching"),
    F("--scheduling-policy", "choice:fcfs|priority", "--priority / --fcfs"),
    F("--async-scheduling", "switch", "--async-scheduling"),
    F("--no-async-scheduling", "switch", "async scheduling off (on by default on GPUs)"),
    F("--max-model-len", "int", "--max-model-len"),
    F("--block-size", "int", "--block-size"),
    F("--gpu-memory-utilization", "float", "--gpu-memory-utilization"),
    F("--num-gpu-blocks-override", "int", "--kv-blocks"),
    F("--kv-transfer-config", "json", "P/D: the instance's KV role and connector"),
    F("--speculative-config", "json", "--speculative-method, --num-speculative-tokens and "
      "the draft (eagle head, draft model)"),
    F("--enable-expert-parallel", "switch", "the profile's expert-parallel MoE layers"),
    F("--kv-offloading-size", "float", "--kv-offload-gib (the CPU KV tier, GiB)"),
    F("--kv-offloading-backend", "choice:native|lmcache", "the CPU KV tier's connector"),
)
"""`vllm serve MODEL` flags."""

SPECULATIVE_CONFIG_KEYS: dict[str, str] = {
    "method": "choice:ngram|eagle|eagle3|mtp|draft_model",
    "model": "str",
    "num_speculative_tokens": "int",
}
"""The keys `--speculative-config` may carry here, each with its kind (vLLM's
`SpeculativeConfig`: method, the drafter's model, k)."""

VLLM_BENCH = _table(
    F("--backend", "choice:vllm|openai", "the server's API"),
    F("--model", "str", "the served model"),
    F("--dataset-name", "choice:random", "synthetic lengths"),
    F("--random-input-len", "int", "mean prompt tokens"),
    F("--random-output-len", "int", "mean output tokens"),
    F("--random-range-ratio", "float", "length spread: uniform in [L(1-r), L(1+r)]"),
    F("--ignore-eos", "switch", "generate exactly the output tokens asked"),
    F("--request-rate", "rate", "the recommended rate, req/s"),
    F("--burstiness", "float", "gamma shape of the gaps (1 = Poisson)"),
    F("--num-prompts", "int", "requests"),
    F("--seed", "int", "--seed"),
    F("--percentile-metrics", "str", "ttft,tpot,itl,e2el"),
    F("--metric-percentiles", "str", "the percentiles chunksim reports"),
    F("--save-result", "switch", "write the result JSON"),
    F("--save-detailed", "switch", "with per-request TTFT, ITL and lengths"),
    F("--result-dir", "str", "where the result goes"),
    F("--result-filename", "str", "the result file, for `sim validate --against`"),
)
"""`vllm bench serve` flags."""

SGLANG_SERVE = _table(
    F("--model-path", "str", "the served model"),
    F("--tp-size", "int", "the profile's tensor-parallel degree"),
    F("--ep-size", "int", "the profile's expert-parallel degree"),
    F("--chunked-prefill-size", "int", "prefill tokens per chunk (-1: no chunking)"),
    F("--max-prefill-tokens", "int", "prefill tokens per batch"),
    F("--enable-mixed-chunk", "switch", "decodes ride along with a prefill chunk"),
    F("--max-running-requests", "int", "max_num_seqs"),
    F("--schedule-policy", "choice:fcfs|lpm|random|dfs-weight|lof", "waiting order"),
    F("--enable-priority-scheduling", "switch", "--priority"),
    F("--disable-radix-cache", "switch", "--no-prefix-caching"),
    F("--disable-overlap-schedule", "switch", "async scheduling off"),
    F("--context-length", "int", "--max-model-len"),
    F("--page-size", "int", "--block-size"),
    F("--max-total-tokens", "int", "(--kv-blocks - 1) x --block-size"),
    F("--disaggregation-mode", "choice:prefill|decode", "P/D: the instance's role"),
    F("--disaggregation-transfer-backend", "choice:nixl|mooncake", "P/D: the KV transfer"),
    F("--speculative-algorithm", "choice:EAGLE|EAGLE3|NEXTN|STANDALONE",
      "--speculative-method (eagle, mtp, draft-model)"),
    F("--speculative-draft-model-path", "str", "the eagle head or draft model"),
    F("--speculative-num-steps", "int", "--num-speculative-tokens (draft passes)"),
    F("--speculative-eagle-topk", "int", "1: one chain of drafts, as vLLM proposes them"),
    F("--speculative-num-draft-tokens", "int", "--num-speculative-tokens + 1 (the verified "
      "chain, its root included)"),
)
"""`python -m sglang.launch_server` flags."""

COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, EngineFlag]]] = {
    "vllm serve": (("vllm", "serve"), VLLM_SERVE),
    "vllm bench serve": (("vllm", "bench", "serve"), VLLM_BENCH),
    "sglang": (("python", "-m", "sglang.launch_server"), SGLANG_SERVE),
}
"""Command name -> (its leading words, its flag table)."""


def flag_args(table: dict[str, EngineFlag], *pairs: tuple[str, object]) -> tuple[str, ...]:
    """(flag, value) pairs -> argv words, each flag looked up in `table` (a flag the table
    lacks is a bug here, never printed); value None for a switch."""
    out: list[str] = []
    for flag, value in pairs:
        row = table[flag]  # KeyError: a flag outside the table
        text = None if value is None else _text(value)
        row.check(text)
        out.append(flag)
        if text is not None:
            out.append(text)
    return tuple(out)


def _text(value: object) -> str:
    if isinstance(value, bool):
        raise TypeError("a switch takes no value")
    if isinstance(value, float):
        return "inf" if value == float("inf") else f"{value:g}" if value == int(value) \
            else repr(round(value, 6))
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def parse_command(text: str) -> tuple[str, dict[str, str | None]]:
    """A printed command -> (its command name, {flag: value}); ValueError naming the flag
    when one is not in the table, lacks its value or has one of the wrong kind. The one
    positional word a serve command takes (the model) is skipped."""
    words = shlex.split(text)
    found = [n for n, (lead, _) in COMMANDS.items() if tuple(words[:len(lead)]) == lead]
    if not found:
        raise ValueError(f"not a command of the table: {text[:60]!r}")
    name = found[0]
    lead, table = COMMANDS[name]
    rest = words[len(lead):]
    if name == "vllm serve" and rest and not rest[0].startswith("--"):
        rest = rest[1:]  # the model
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        if word not in table:
            raise ValueError(f"{name}: {word!r} is not in the flag table "
                             f"({ENGINE_VERSIONS[name.split()[0]]})")
        row = table[word]
        value = None
        if row.kind != "switch":
            if i + 1 >= len(rest):
                raise ValueError(f"{name}: {word} needs a value")
            value = rest[i + 1]
            i += 1
        row.check(value)
        if word in flags:
            raise ValueError(f"{name}: {word} given twice")
        flags[word] = value
        i += 1
    return name, flags


def command_text(name: str, args: tuple[str, ...], positional: str | None = None) -> str:
    """The shell line of `name` (a COMMANDS key) with `args` (and the model for `vllm
    serve`), quoted as a shell reads it back."""
    lead = COMMANDS[name][0]
    words = [*lead, *([positional] if positional else []), *args]
    return shlex.join(words)
