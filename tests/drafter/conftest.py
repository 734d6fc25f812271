"""The drafter-method tests; the real-vLLM ones share the integration tests' vLLM venv."""

from integration.conftest import vllm_python  # noqa: F401  (the session fixture)
