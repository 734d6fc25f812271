"""Servers come and go (docs/cluster-servers.md): `eyas generate`, as a process, starts with
one of its two servers down, uses it once it comes up, takes a third from the url file while
it runs, and finishes on the others when the first is killed mid-run; nothing is lost."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

from generate_cli import generate_args
from test_generate_fake_sglang import rendered_rows

from eyas.store import read_samples
from eyas.testing.server import fake_server

# ~150 ms a request (30 tokens of 5 ms at the median): one server alone needs ~10 s for
# the ~120 prompts at 2 in flight, so servers join and die while the run is going
LATENCY = ("--token-s", "0.005", "--length-median", "30", "--length-sigma", "0.5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served(url: str) -> int:
    with urllib.request.urlopen(url + "/fake_stats", timeout=5) as r:
        return json.loads(r.read())["requests"]


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_servers_join_late_from_the_url_file_and_one_dies(tmp_path, kimi_dir, rendered):
    out, url_file = tmp_path / "gen", tmp_path / "urls.txt"
    url_file.write_text("# servers that join while the run goes\n")
    late_port = free_port()
    late_url = f"http://127.0.0.1:{late_port}"
    with fake_server("eyas.testing.fake_sglang", *LATENCY) as first:
        args = generate_args(kimi_dir, "sglang", rendered, "--max-new-tokens", 100)
        cmd = [
            sys.executable,
            "-m",
            "eyas.cli",
            "generate",
            *args,
            "--url",
            first.url,
            "--url",
            late_url,  # down when the run starts
            "--url-file",
            url_file,
            "--set",
            "backend.url_file_s=0.3",
            "--concurrency",
            2,
            "--no-adaptive-concurrency",
            "--out",
            out,
            "--no-progress",
        ]
        started = time.time()
        proc = subprocess.Popen(list(map(str, cmd)), stderr=subprocess.PIPE, text=True)
        try:
            # the run starts on the one server that answers; it does not wait for the other
            wait_for(lambda: served(first.url) >= 4, 30, "the first server to be used")
            with (
                fake_server("eyas.testing.fake_sglang", "--port", str(late_port), *LATENCY) as late,
                fake_server("eyas.testing.fake_sglang", *LATENCY) as added,
            ):
                with url_file.open("a") as f:
                    f.write(added.url + "\n")
                wait_for(lambda: served(late.url) > 0, 30, "the late server to be used")
                wait_for(lambda: served(added.url) > 0, 30, "the url file's server to be used")
                assert proc.poll() is None, "the run ended before the first server died"
                first.kill()  # mid-run: its requests in flight go to the others
                _, err = proc.communicate(timeout=60)
                late_requests, added_requests = served(late.url), served(added.url)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert time.time() - started < 90
    ids = [s.id for s in read_samples(out)]
    assert sorted(ids) == sorted(r["id"] for r in rendered_rows(rendered))  # none lost, none twice
    assert (out / "errors.jsonl").read_text() == ""
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is True
    servers = {s["url"]: s for s in manifest["backend"]["client"]["servers"]}
    assert set(servers) == {first.url, late_url, added.url}
    assert servers[first.url]["joined_after_s"] < servers[late_url]["joined_after_s"]
    assert servers[added.url]["source"] == "url_file"
    assert servers[first.url]["joined"] is False  # dead: out of routing, still probed
    for url in (late_url, added.url):
        assert servers[url]["joined"] and servers[url]["requests"] > 0
    assert late_requests > 0 and added_requests > 0
    counted = sum(s["requests"] for s in servers.values())
    assert counted == len(ids)  # every sample answered exactly once across the servers
