"""Every `eyas ...` command line in README.md and docs/*.md parses with the current CLI: its
sub-command exists and every option it uses is one of that command's options.

Command lines come from shell code blocks (line continuations joined, `#` comments, `$ `
prompts and `VAR=value` prefixes dropped, `&&`/`|`/`;` split) and from inline code spans that
start with `eyas ` (where `[...]`, `(a \\| b)` and `a|b` are usage notation, not shell).
Placeholders such as `DIR`, `<dir>` or `...` are values, which the parse accepts as they are:
what is checked is the command path and the option names, through the click command typer
builds from `eyas.cli.app`, parsed with `resilient_parsing` (no required or value checks).
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from eyas.cli import app

try:  # typer >= 0.2x carries its own copy of click (as eyas.cli notes)
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on the click package
    from click.exceptions import UsageError

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "zsh"}
# words that may stand before `eyas` on a line: wrappers and the interpreter running the CLI
WRAPPERS = {
    "nice",
    "time",
    "env",
    "exec",
    "sudo",
    "uv",
    "run",
    "torchrun",
    "srun",
    "-m",
    "eyas.cli",
}
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Line:
    path: Path
    lineno: int
    text: str
    inline: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.lineno}"


def command_lines(path: Path, text: str | None = None) -> list[Line]:
    """The `eyas` command lines of one markdown file, with the line each starts on."""
    text = path.read_text() if text is None else text
    out: list[Line] = []
    fence: str | None = None
    pending, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            continue
        if fence is not None:
            if fence not in SHELL_BLOCKS:
                continue
            line = stripped.removeprefix("$ ")
            if not pending:
                start = n
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            out += [Line(path, start, s, False) for s in _shell_segments(pending + line)]
            pending = ""
            continue
        for span in re.findall(r"`([^`]+)`", raw):
            if "-m eyas.cli " in span:  # `torchrun ... -m eyas.cli train ...`
                span = "eyas " + span.split("-m eyas.cli ", 1)[1]
            if span.startswith("eyas ") and len(span.split()) > 1:
                out.append(Line(path, n, span, True))
    return out


def _shell_segments(line: str) -> list[str]:
    """The parts of a shell line that invoke eyas (comments dropped, `&&`, `|`, `;` split)."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:
        return []
    parts: list[list[str]] = [[]]
    for tok in tokens:
        if tok and set(tok) <= set(";&|"):
            parts.append([])
        else:
            parts[-1].append(tok)
    found = []
    for words in parts:
        i = _eyas_at(words)
        if i is not None:
            found.append(shlex.join(["eyas", *words[i + 1 :]]))
    return found


def _eyas_at(words: list[str]) -> int | None:
    """Where `eyas` (or `-m eyas.cli`) starts, when only wrappers and env come before it."""
    for i, word in enumerate(words):
        if word == "eyas" or word.endswith("/bin/eyas") or word == "eyas.cli":
            if i > 0 and word == "eyas.cli" and words[i - 1] != "-m":
                return None
            return i
        wrapper = (
            ENV.match(word)
            or word in WRAPPERS
            or word.startswith("-")
            or word.isdigit()
            or re.search(r"(^|/)python[\d.]*$", word)
        )
        if not wrapper:
            return None
    return None


def _usage_words(span: str) -> list[str]:
    """An inline usage line as words: optional brackets, alternatives and `\\|` undone."""
    span = span.replace("\\|", "|")
    span = re.sub(r"[\[\]()]", " ", span)
    words = []
    for word in span.split():
        if word in {"|", "...", "…"}:
            continue
        words.append(word.split("|")[0])
    return words


@functools.cache
def _cli():
    """The click command typer builds from eyas's app (built once: it is slow)."""
    return typer.main.get_command(app)


def problem(line: Line) -> str | None:
    """Why a command line does not parse, or None."""
    root = _cli()
    words = _usage_words(line.text) if line.inline else shlex.split(line.text)
    # drop "eyas", and `...` standing for "the options above" (not a placeholder value)
    words = [
        w
        for i, w in enumerate(words)
        if i > 0 and not (w in {"...", "…"} and not words[i - 1].startswith("-"))
    ]
    cmd, path = root, ["eyas"]
    while hasattr(cmd, "commands"):  # a group: resolve its sub-command
        if not words or words[0].startswith("-"):
            if words and words[0] not in {"--help", "--version"}:
                return f"`{' '.join(path)}` needs a sub-command before {words[0]}"
            return None  # the group itself is named (a reference, or `--help`)
        sub = cmd.commands.get(words[0])
        if sub is None:
            return f"`{' '.join(path)}` has no sub-command {words[0]!r}"
        cmd, path, words = sub, [*path, words[0]], words[1:]
    known = {
        o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])
    }
    known |= {"--help"}
    for word in words:
        if word == "--":
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name not in known:
                return f"`{' '.join(path)}` has no option {name}"
    try:
        ctx = cmd.make_context(" ".join(path), list(words), resilient_parsing=True)
    except UsageError as e:
        return f"`{' '.join(path)}`: {e.format_message()}"
    if ctx.args:  # resilient parsing keeps what no parameter took instead of failing
        return f"`{' '.join(path)}` takes no argument {ctx.args[0]!r}"
    return None


LINES = [line for path in DOCS for line in command_lines(path)]


def test_the_docs_have_command_lines() -> None:
    """The extraction finds the command lines a reader sees (so the test below checks them)."""
    readme = [x for x in LINES if x.path.name == "README.md"]
    assert len(readme) >= 12, [x.text for x in readme]
    assert len(LINES) >= 60, len(LINES)
    assert {x.inline for x in LINES} == {True, False}


@pytest.mark.parametrize("line", LINES, ids=[f"{x.where}" for x in LINES])
def test_doc_command_line_parses(line: Line) -> None:
    why = problem(line)
    assert why is None, f"{line.where}: {why}\n    {line.text}"


def test_a_bad_option_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    text = (
        "intro `eyas train --aux-layers 1,2,3 --steps 5` and `eyas.cli`, "
        "`torchrun --nproc-per-node 8 -m eyas.cli train --hidden-state DIR`\n"
        "```bash\n"
        "EYAS_CACHE=/c nice eyas export drafter --checkpoint DIR \\\n"
        "    --format vllm --no-such-flag 3   # a comment --bogus\n"
        "eyas frobnicate --x && eyas show runs/x ID | head; eyas show a b c\n"
        "torchrun --nproc-per-node 8 -m eyas.cli train --config t.toml --warmup 3\n"
        "pip install eyas\n"
        "```\n"
        "```toml\n"
        "eyas = 'not a command'\n"
        "```\n"
    )
    found = command_lines(doc, text)
    assert [(x.lineno, x.inline) for x in found] == [
        (1, True),
        (1, True),
        (3, False),
        (5, False),
        (5, False),
        (5, False),
        (6, False),
    ]
    why = [problem(x) for x in found]
    assert why[0] is None  # --aux-layers is an option of `eyas train` today
    assert why[1] == "`eyas train` has no option --hidden-state"
    assert why[2] == "`eyas export drafter` has no option --no-such-flag"
    assert why[3] == "`eyas` has no sub-command 'frobnicate'"
    assert why[4] is None
    assert why[5] == "`eyas show` takes no argument 'c'"
    assert why[6] == "`eyas train` has no option --warmup"
