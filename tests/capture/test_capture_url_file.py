"""`eyas capture --url-file`: the capture servers come from a file of URLs (as generate's do,
docs/cluster-servers.md); one of them down does not hold the run."""

import socket

from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.testing.server import fake_server


def test_capture_takes_its_servers_from_a_url_file(tmp_path, toy_tiny, toy_samples):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    incoming = tmp_path / "incoming"
    args = ("--capture-dir", str(incoming), "--layers", "4", "--hidden", "96")
    with fake_server("eyas.testing.fake_vllm", *args) as srv:
        url_file = tmp_path / "urls.txt"
        url_file.write_text(f"{dead}\n{srv.url}\n")
        config = CaptureConfig(
            target=toy_tiny,
            data=toy_samples,
            out=tmp_path / "cap",
            backend="vllm",
            url_file=url_file,
            dtype="float32",
            limit=6,
        )
        manifest = run_capture(config, log=lambda s: None)
    assert manifest.counts.samples == 6 and manifest.failure_reasons == {}
    assert manifest.client is not None
    servers = {s["url"]: s for s in manifest.client["servers"]}
    assert servers[srv.url]["source"] == "url_file" and servers[srv.url]["requests"] == 6
    assert servers[dead]["joined"] is False and servers[dead]["requests"] == 0
