"""The in-process backend: an out-of-memory batch is retried as halves, another failure fails
only its requests (as a BackendError the engine records), and remote code reaches the loader
only when the user asked for it."""

import asyncio

import pytest

import eyas.backends.local.client as local
from eyas.backends.base import BackendError, GenRequest
from eyas.backends.local.hf_generate import LocalOutput


def _backend(monkeypatch, batch_fn, batch_size=8):
    monkeypatch.setattr(local, "load_frozen_lm", lambda *a, **k: object())
    monkeypatch.setattr(local, "generate_batch", batch_fn)
    return local.LocalBackend("/models/x", [2], 0, batch_size=batch_size)


def _requests(n):
    return [
        GenRequest(id=f"r{i}", prompt_ids=[5, i], max_new_tokens=4, sampling={}) for i in range(n)
    ]


async def _run(backend, reqs):
    return await asyncio.gather(*(backend.generate(r) for r in reqs), return_exceptions=True)


def test_an_out_of_memory_batch_is_split_not_fatal(monkeypatch):
    sizes = []

    def fake(model, prompts, *args):
        sizes.append(len(prompts))
        if len(prompts) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return [LocalOutput([p[-1], 2], "stop", 2) for p in prompts]

    results = asyncio.run(_run(_backend(monkeypatch, fake), _requests(8)))
    assert [r.output_ids for r in results] == [[i, 2] for i in range(8)]
    assert sizes == [8, 4, 2, 2, 4, 2, 2]  # each failing batch retried as two halves


def test_other_failures_fail_their_requests_as_backend_errors(monkeypatch):
    def fake(model, prompts, *args):
        raise ValueError("bad sampling")

    results = asyncio.run(_run(_backend(monkeypatch, fake), _requests(3)))
    assert all(isinstance(r, BackendError) and r.reason == "local_error" for r in results)
    assert not any(r.retryable for r in results)


@pytest.mark.parametrize("trust", [False, True])
def test_trust_remote_code_reaches_every_loader_only_when_given(monkeypatch, tmp_path, trust):
    from eyas.backends.base import BackendSettings
    from eyas.backends.local.options import LocalOptions
    from eyas.backends.registry import build_backends

    seen = []
    monkeypatch.setattr(local, "load_frozen_lm", lambda d, dev, dt, t=False: seen.append(t))
    # generation and capture build the same in-process backend from their settings
    options = LocalOptions()
    generate = BackendSettings(model_dir=tmp_path, trust_remote_code=trust)
    build_backends("local", generate, options, [])
    settings = BackendSettings(model_dir=tmp_path, trust_remote_code=trust, capture_layers=[1])
    build_backends("local", settings, options, [])
    assert seen == [trust, trust]
