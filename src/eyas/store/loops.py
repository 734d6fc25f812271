"""Repetition loops: an output whose tail repeats one span of token ids again and again
(greedy decoding's degenerate mode). The audit quarantines them as `repetition_loop` and
training never uses them (`select_trainable`).

The rule, on token ids, for some period p <= MAX_PERIOD that the output's tail (less its stop
token) repeats:
- exact loop: the last MIN_LOOP_TOKENS or more tokens, and at least MIN_REPEATS copies of the
  span (one more when it is shorter than LONG_SPAN), each equal the token p before them (a
  verse, a sentence, a paragraph repeated);
- counted loop: the last MIN_COUNTED_TOKENS or more tokens, and at least MIN_COUNTED_REPEATS
  copies, differ from the copy before only in a counter: at most COUNTER_TOKENS ids per copy,
  about one on average, and NEAR_MATCH of the copy equal ("21. Use White Noise\n22. Use
  White Noise\n...").
Legitimate repetition does not reach this: list items, table rows and code lines differ in
more than a counter (a name, a cell, a second number), and a verbatim block repeated inside a
document is followed by other text, so it is not the output's tail. What ids alone cannot
tell apart: an output cut inside a long verbatim block (three copies of a 32+ token span,
four of a 12+ token one) or inside seven or more lines that differ only in a counter; such a
sample is quarantined as a loop (one sample lost). tests/audit/test_repetition.py guards both directions with real
tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_PERIOD = 256  # longest repeated span looked for, in tokens (a paragraph)
MIN_REPEATS = 3  # copies of a long span, the last one possibly cut short by max_new_tokens
LONG_SPAN = 32  # a shorter span (a line of code) needs one copy more: three can be legitimate
MIN_LOOP_TOKENS = 48  # tokens the repeating run covers at least
MIN_COUNTED_TOKENS = 96  # a loop with a counter: more evidence (a longer run, more copies)
MIN_COUNTED_REPEATS = 4
NEAR_MATCH = 0.8  # share of each copy's tokens equal to the previous copy's
COUNTER_TOKENS = 2  # ids a copy of a counted loop may differ in (the counter's digits)


@dataclass(frozen=True)
class Loop:
    start: int  # first token of the repeating run
    period: int  # tokens in the repeated span
    length: int  # tokens in the run (to the end of the output, stop token excluded)

    @property
    def repeats(self) -> float:
        return self.length / self.period

    def span(self, ids) -> list[int]:
        return [int(t) for t in ids[self.start : self.start + self.period]]


def find_loop(ids, drop_last: bool = False) -> Loop | None:
    """The shortest-period loop the output's tail ends in, or None. `drop_last`: the last id
    is the matched stop token, not content."""
    x = np.asarray(ids, dtype=np.int64)
    if drop_last and len(x):
        x = x[:-1]
    n = len(x)
    if n < MIN_LOOP_TOKENS:
        return None
    w = x[-min(n, MAX_PERIOD * MIN_COUNTED_REPEATS + MIN_COUNTED_TOKENS) :]
    m = len(w)
    # candidate periods: earlier positions of the last two ids (both recur one period back in
    # a loop, unless max_new_tokens cut it just after a counter)
    for p in (m - 1 - np.nonzero((w[1:-1] == w[-1]) & (w[:-2] == w[-2]))[0] - 1)[::-1].tolist():
        if p > MAX_PERIOD:
            break
        same = w[p:] == w[:-p]
        exact = int(np.argmin(same[::-1])) if not same.all() else len(same)
        if exact + p >= max(MIN_LOOP_TOKENS, (MIN_REPEATS + (p < LONG_SPAN)) * p):
            length = _exact_run(x, p) if exact == len(same) else exact + p
            return Loop(n - length, p, length)
        counted = _counted_run(same, p)
        if counted >= max(MIN_COUNTED_TOKENS, MIN_COUNTED_REPEATS * p):
            return Loop(n - counted, p, counted)
    return None


def _exact_run(x: np.ndarray, p: int) -> int:
    same = x[p:] == x[:-p]
    tail = int(np.argmin(same[::-1])) if not same.all() else len(same)
    return tail + p


def _counted_run(same: np.ndarray, p: int) -> int:
    """Tokens at the end covered by copies (p long, taken from the end) that differ from the
    previous copy only in a counter: at most COUNTER_TOKENS ids, NEAR_MATCH of the copy equal,
    and over the run about one id per copy (a counter's last digit; 19 -> 20 changes two)."""
    copies = diffs = 0
    for end in range(len(same), p - 1, -p):
        d = p - int(same[end - p : end].sum())
        if d > COUNTER_TOKENS or 1 - d / p < NEAR_MATCH:
            break
        copies, diffs = copies + 1, diffs + d
    if not copies or diffs > 1.25 * copies:
        return 0
    return (copies + 1) * p
