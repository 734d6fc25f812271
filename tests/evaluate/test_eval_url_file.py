"""`eyas eval --url-file`: SGLang servers may come from a file; vLLM's counter-based figures
refuse it (a server joining between two counter reads would add its whole history)."""

import pytest
from pydantic import ValidationError

from eyas.evaluate.config import EvalConfig


def test_url_file_is_taken_for_sglang_and_refused_for_vllm(tmp_path):
    base = {"target": tmp_path, "drafter": tmp_path, "input": tmp_path}
    cfg = EvalConfig(**base, backend="sglang", url_file=tmp_path / "urls.txt")
    assert cfg.server.url_file == tmp_path / "urls.txt" and cfg.server.urls == []
    for backend in ("vllm", "local"):
        with pytest.raises(ValidationError, match="--url-file needs --backend sglang"):
            EvalConfig(**base, backend=backend, url_file=tmp_path / "urls.txt")
    with pytest.raises(ValidationError, match="--backend sglang needs --url or --url-file"):
        EvalConfig(**base, backend="sglang")
