"""A vLLM server eyas starts (`VLLMServer`): its command line from the engine's options and
the target, its readiness, its health from its log, its shutdown (`eyas.backends.server`).

    options = VLLMOptions(python=py, tensor_parallel_size=2, args=["--max-num-seqs=512"])
    with VLLMServer(options, target_model(model_dir), dtype="auto") as server:
        ... server.url ...

The flags: `--dtype` (the stage's), `--max-model-len` (the options', else the target's
context), `--enforce-eager` only when asked or on a machine without a CUDA GPU (a server eyas
starts on CPU lives for one stage, and would pay a torch.compile warm-up at every start; on a
GPU the compiled graphs are what vLLM's users run), the parallel sizes, the text-only flag for
a vision wrapper and the float32 MLA backend; then what the stage serves (`args`: the capture
connector, a drafter's `--speculative-config`), then the user's extra arguments, verbatim. On a
CPU build the KV-cache size and thread binding come from the environment
(`VLLM_CPU_KVCACHE_SPACE`, GiB).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eyas.backends.server import EngineServer, Launch, gpu_present
from eyas.backends.vllm import conventions as vllm
from eyas.backends.vllm.capture import capture_args, plugin_env
from eyas.backends.vllm.options import VLLMOptions
from eyas.jsonl import read_json_object


class VLLMServer(EngineServer):
    ENGINE = "vLLM"
    READY_PATHS = vllm.READY_PATHS
    FATAL = vllm.FATAL_LOG_LINES

    options: VLLMOptions

    @property
    def eager(self) -> bool:
        """`--enforce-eager`: as the options say, else only without a CUDA GPU."""
        asked = self.options.enforce_eager
        return asked if asked is not None else not gpu_present()

    def launch_args(self) -> list[str]:
        """Every flag after the model and the address."""
        o = self.options
        args = [] if o.arg_given(vllm.DTYPE_FLAG) else [vllm.DTYPE_FLAG, self.dtype]
        if not o.arg_given(vllm.MAX_MODEL_LEN_FLAG):
            length = o.max_model_len or self.target.context_length
            args += [vllm.MAX_MODEL_LEN_FLAG, str(length)]
        if self.eager and not o.arg_given(vllm.EAGER_FLAG):
            args.append(vllm.EAGER_FLAG)
        if o.tensor_parallel_size > 1:
            args += [vllm.TENSOR_PARALLEL_FLAGS[0], str(o.tensor_parallel_size)]
        if o.data_parallel_size > 1:
            args += [vllm.DATA_PARALLEL_FLAGS[0], str(o.data_parallel_size)]
        args += vllm.text_only_args(self.target.wrapper)
        args += vllm.float32_mla_args(self.target.text, self.dtype)
        return [*args, *self.args, *o.args]

    def command(self, port: int) -> list[str]:
        return [
            str(self.options.python),
            "-m",
            vllm.SERVER_MODULE,
            "--model",
            str(self.target.dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *self.launch_args(),
        ]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        return {**env, "HF_HUB_OFFLINE": "1", **self.env}

    @classmethod
    def capture_launch(cls, layers: list[int], storage_dir: Path) -> Launch:
        """eyas's KV connector writing the states of `layers` under `storage_dir`
        (`eyas.backends.vllm.capture`)."""
        return Launch(capture_args(layers, storage_dir), plugin_env())

    @classmethod
    def drafter_launch(cls, speculative_config: dict[str, Any], dtype: str) -> list[str]:
        """`--speculative-config`; a float32 server with an MLA drafter names the CPU MLA
        backend for the drafter too (`conventions.FLOAT32_MLA_DRAFTER`)."""
        spec = dict(speculative_config)
        config = Path(spec["model"]) / "config.json"
        if dtype == "float32" and config.exists() and vllm.is_mla_drafter(read_json_object(config)):
            spec.update(vllm.FLOAT32_MLA_DRAFTER)
        return [vllm.SPECULATIVE_CONFIG_FLAG, json.dumps(spec)]


__all__ = ["VLLMServer"]
