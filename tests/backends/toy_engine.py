"""A toy engine backend, the way a new engine is added: this one module, plus its registry
line (`test_registry.py` adds it to `eyas.backends.registry.ENGINES`). It generates in
process: the prompt's last three ids reversed, then the first stop id; every request's first
attempt fails as a busy server would (HTTP 503), so the shared client policy retries it."""

from __future__ import annotations

from eyas.backends.base import BackendError, BackendSettings, Generation, GenRequest, Progress


def toy_output(prompt_ids: list[int], stop_ids: list[int]) -> list[int]:
    return [*reversed(prompt_ids[-3:]), stop_ids[0]]


class ToyBackend:
    name = "toy"
    lossy = False
    remote = False
    operations = frozenset({"generate"})

    def __init__(self, stop_token_ids: list[int]):
        self.url = "toy:"
        self.stop_token_ids = stop_token_ids
        self.seen: set[str] = set()

    @classmethod
    def from_settings(cls, settings: BackendSettings, *, url, session) -> ToyBackend:
        return cls(settings.stop_token_ids)

    async def ready(self, timeout_s: float) -> dict:
        return {"url": self.url, "engine": "toy"}

    async def generate(self, request: GenRequest) -> Generation:
        if request.id not in self.seen:
            self.seen.add(request.id)
            raise BackendError("server_error", "toy engine busy (first attempt)", 503)
        ids = toy_output(request.prompt_ids, self.stop_token_ids)
        return Generation(ids, "stop", ids[-1], {})

    async def progress(self) -> Progress:
        return Progress(alive=True)

    async def close(self) -> None:
        return None
