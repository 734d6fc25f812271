"""Local Hugging Face model directories, read the safe way: safetensors only (weights are never
unpickled), remote code only when the user asked, and a clear error for a directory that is
not a model.

`TargetModel` is the one accessor every stage uses for a target directory: its text config,
dimensions, context length and the names of the tensors a drafter needs. Real targets are not
always flat causal LMs: Kimi-K2.5 ships `KimiK25ForConditionalGeneration` (`model_type:
kimi_k25`), a vision-language wrapper whose DeepSeek-V3 text model sits under `text_config`
and whose weights are named `language_model.model.*` / `language_model.lm_head.*`. The engines
unwrap it the same way: SGLang builds `DeepseekV3ForCausalLM(config.text_config)`
(`python/sglang/srt/models/kimi_k25.py`), vLLM reads `hf_text_config`
(`vllm/transformers_utils/config.py` `get_hf_text_config`, which calls transformers'
`PretrainedConfig.get_text_config`), speculators extracts `text_config`
(`src/speculators/models/eagle3/core.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from eyas.errors import EyasError, unreadable


def require_model_dir(path: str | Path, what: str = "model") -> Path:
    """The directory, or a user error naming what is missing."""
    path = Path(path)
    if not path.exists():
        raise EyasError("no_model", f"{what} directory {path} does not exist")
    if not path.is_dir():
        raise EyasError("no_model", f"{what} {path} is a file, not a model directory")
    if not (path / "config.json").exists():
        raise EyasError("no_model", f"{path} has no config.json: not a {what} directory")
    return path


def model_config(model_dir: str | Path) -> dict[str, Any]:
    """The top-level `config.json` as written (a wrapper's text model is `TargetModel.text`)."""
    path = require_model_dir(model_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise EyasError(
            "bad_model_config", f"{path}:{exc.lineno}: not valid JSON ({exc.msg})"
        ) from exc


# Where a causal LM keeps the tensors a drafter needs, relative to the text model's prefix.
_ROLE_NAMES = {
    "embed": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "norm": ("model.norm.weight", "norm.weight"),
    "head": ("lm_head.weight",),
}
# The text model's prefix in a wrapper's weights: Kimi-K2.5 and DeepSeek-VL style
# (`language_model.model.*`), and transformers 5's own VLM layout (`model.language_model.*`
# with `lm_head.*` at the top), tried in this order.
_TEXT_PREFIXES = ("", "language_model.")
_SPLIT_LAYOUT = {
    "embed": "model.language_model.embed_tokens.weight",
    "norm": "model.language_model.norm.weight",
    "head": "lm_head.weight",
}


def _rope(text: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope scaling or None) from either spelling: transformers <= 4 and most
    checkpoints (`rope_theta` + `rope_scaling`), transformers 5 (`rope_parameters`)."""
    params = dict(text.get("rope_parameters") or {})
    theta = text.get("rope_theta") or params.get("rope_theta") or 10000.0
    scaling = dict(text.get("rope_scaling") or {}) or {
        k: v for k, v in params.items() if k != "rope_theta"
    }
    kind = scaling.get("rope_type") or scaling.get("type")
    if not kind or kind == "default":
        return float(theta), None
    scaling["rope_type"] = kind
    scaling.pop("type", None)
    return float(theta), scaling


@dataclass
class TargetModel:
    """A target model directory, read once: `config` is the top-level `config.json`, `text`
    the text model's config (itself for a flat causal LM, `text_config` for a wrapper)."""

    dir: Path
    config: dict[str, Any]
    text: dict[str, Any]
    wrapper: bool
    _weights: dict[str, Path] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, model_dir: str | Path) -> TargetModel:
        path = require_model_dir(model_dir, "target model")
        config = model_config(path)
        text = config.get("text_config")
        wrapper = isinstance(text, dict)
        return cls(path, config, text if wrapper else config, wrapper)

    def _need(self, key: str) -> Any:
        value = self.text.get(key)
        if value is None:
            where = f"{self.dir}/config.json" + (" text_config" if self.wrapper else "")
            raise EyasError("bad_model_config", f"{where} has no {key}")
        return value

    # -- dimensions ---------------------------------------------------------------------------

    @property
    def architectures(self) -> list[str]:
        return list(self.config.get("architectures") or [])

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def text_model_type(self) -> str | None:
        return self.text.get("model_type")

    @property
    def num_layers(self) -> int:
        return int(self._need("num_hidden_layers"))

    @property
    def hidden_size(self) -> int:
        return int(self._need("hidden_size"))

    @property
    def vocab_size(self) -> int:
        return int(self._need("vocab_size"))

    @property
    def num_attention_heads(self) -> int:
        return int(self._need("num_attention_heads"))

    @property
    def num_key_value_heads(self) -> int:
        return int(self.text.get("num_key_value_heads") or self.num_attention_heads)

    @property
    def intermediate_size(self) -> int:
        return int(self._need("intermediate_size"))

    @property
    def rms_norm_eps(self) -> float:
        return float(self.text.get("rms_norm_eps") or 1e-6)

    @property
    def rope_theta(self) -> float:
        return _rope(self.text)[0]

    @property
    def rope_scaling(self) -> dict[str, Any] | None:
        """The text model's rope scaling, `rope_type` normalised (None: plain RoPE)."""
        return _rope(self.text)[1]

    @property
    def tie_word_embeddings(self) -> bool:
        tied = self.text.get("tie_word_embeddings")
        if tied is None:
            tied = self.config.get("tie_word_embeddings", False)
        return bool(tied)

    @property
    def context_length(self) -> int:
        """Positions the target serves, derived as vLLM derives `max_model_len`
        (`vllm/config/model.py` `_get_and_verify_max_len`): YaRN's
        `original_max_position_embeddings × factor` when given (Kimi-K2.5: 4096 × 64 =
        262144), else `max_position_embeddings`."""
        scaling = self.rope_scaling or {}
        original = scaling.get("original_max_position_embeddings")
        if scaling.get("rope_type") == "yarn" and original and scaling.get("factor"):
            return int(original * scaling["factor"])
        value = self.text.get("max_position_embeddings") or self.config.get(
            "max_position_embeddings"
        )
        if not value:
            raise EyasError(
                "bad_model_config", f"{self.dir}/config.json names no max_position_embeddings"
            )
        return int(value)

    @property
    def eos_token_id(self) -> Any:
        return self.text.get("eos_token_id", self.config.get("eos_token_id"))

    def token_ids(self) -> dict[str, Any]:
        """bos/eos/pad ids as the config states them (top level first, as HF writes them)."""
        out = {}
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = self.config.get(key, self.text.get(key))
            if value is not None:
                out[key] = value
        return out

    def describe(self) -> dict[str, Any]:
        """What manifests record about the target."""
        return {
            "dir": str(self.dir),
            "architectures": self.architectures,
            "model_type": self.model_type,
            "text_model_type": self.text_model_type,
            "wrapper": self.wrapper,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "context_length": self.context_length,
        }

    # -- tensors ------------------------------------------------------------------------------

    @property
    def weights(self) -> dict[str, Path]:
        if self._weights is None:
            self._weights = _weight_files(self.dir)
        return self._weights

    @cached_property
    def text_prefix(self) -> str:
        """The text model's prefix in the weight names ('' for a flat causal LM)."""
        names = self.weights
        for prefix in _TEXT_PREFIXES:
            if any(prefix + n in names for n in _ROLE_NAMES["embed"]):
                return prefix
        if _SPLIT_LAYOUT["embed"] in names:
            return "model.language_model."
        return ""

    def tensor_names(self, role: str) -> tuple[str, ...]:
        """Candidate names of `role` (embed | norm | head) in this checkpoint."""
        if self.text_prefix == "model.language_model.":
            return (_SPLIT_LAYOUT[role],)
        return tuple(self.text_prefix + n for n in _ROLE_NAMES[role])

    def load_tensors(self, *roles: str) -> tuple[dict[str, Any], list[str]]:
        """Only the named tensors, never the whole model: {role: tensor} for the roles found
        (a tied head is the embedding) and the names actually read."""
        found, read = load_named_tensors(
            self.dir, {r: self.tensor_names(r) for r in roles}, self.weights
        )
        if "head" in roles and "head" not in found and self.tie_word_embeddings:
            if "embed" not in found:
                more, names = load_named_tensors(
                    self.dir, {"embed": self.tensor_names("embed")}, self.weights
                )
                found.update(more)
                read += names
            if "embed" in found:
                found["head"] = found["embed"]
        return found, read


def target_model(model_dir: str | Path) -> TargetModel:
    return TargetModel.open(model_dir)


# What transformers' `Kimi_K25Config.__post_init__` does to its text model's type (Kimi-K2.5
# ships `kimi_k2`, a DeepSeek-V3): used when this transformers has no class for the wrapper.
_TEXT_MODEL_TYPES = {"kimi_k2": "deepseek_v3"}
# The text model's checkpoint prefix -> the renaming that gives a causal LM's own names.
_TEXT_KEY_MAPPINGS = {
    "language_model.": {r"^language_model\.": ""},
    "model.language_model.": {r"^model\.language_model\.": "model."},
}


def text_model_config(model_dir: str | Path, trust_remote_code: bool = False) -> Any:
    """The transformers config of the text model: the model's own for a flat causal LM, the
    wrapper's `text_config` for a wrapper (transformers' wrapper class when it has one, else
    the `text_config` section read as its own model type)."""
    from transformers import AutoConfig

    target = target_model(model_dir)
    if not target.wrapper:
        return AutoConfig.from_pretrained(str(target.dir), trust_remote_code=trust_remote_code)
    try:
        config = AutoConfig.from_pretrained(str(target.dir), trust_remote_code=trust_remote_code)
        text = config.get_text_config(decoder=True)
        if text is not config:
            return text
    except ValueError:  # a wrapper type this transformers does not know
        pass
    fields = dict(target.text)
    model_type = fields.pop("model_type", None)
    try:
        return AutoConfig.for_model(_TEXT_MODEL_TYPES.get(model_type, model_type), **fields)
    except ValueError as exc:
        raise EyasError(
            "unsupported_model",
            f"{target.dir}/config.json text_config: transformers has no model type "
            f"{model_type!r} ({exc})",
        ) from exc


def load_frozen_lm(
    model_dir: str | Path, device: str, dtype: Any, trust_remote_code: bool = False
) -> Any:
    """Eval-mode causal LM with frozen parameters. For a wrapper (Kimi-K2.5) it is the text
    model alone, built from `text_config` with its weights read under their checkpoint names
    (`language_model.*`), as SGLang and vLLM serve it; the other towers are never loaded."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per stage is eyas's job, not a loading bar
    require_model_dir(model_dir, "target model")
    if not list(Path(model_dir).glob("*.safetensors")):
        raise EyasError("no_model", f"{model_dir} holds no .safetensors weights")
    from safetensors import SafetensorError

    target = target_model(model_dir)
    try:
        if target.wrapper:
            model = _load_text_model(target, dtype, trust_remote_code)
        else:
            model = AutoModelForCausalLM.from_pretrained(
                str(model_dir),
                dtype=dtype,
                trust_remote_code=trust_remote_code,
                use_safetensors=True,
            )
    except EyasError:
        raise
    except (SafetensorError, OSError, ValueError) as exc:  # a torn file, a foreign config.json
        detail = str(exc).strip().splitlines()[0]
        raise EyasError("bad_model", f"{model_dir}: cannot be loaded ({detail})") from exc
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _load_text_model(target: TargetModel, dtype: Any, trust_remote_code: bool) -> Any:
    """A wrapper's text model. Every text weight must be found (transformers would initialise
    a missing one at random); the other towers' weights are expected to be left over."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    config = text_model_config(target.dir, trust_remote_code)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report lists every vision weight as unexpected
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(target.dir),
            config=config,
            key_mapping=_TEXT_KEY_MAPPINGS.get(target.text_prefix),
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            output_loading_info=True,
        )
    except RuntimeError as exc:
        if "conversion of the weights" not in str(exc):
            raise
        # transformers fuses each layer's experts into one tensor and fails on a partial group
        missing = _missing_experts(target.weights)
        raise EyasError(
            "bad_target",
            f"{target.dir}: the text model's weights do not load: "
            + (f"expert tensors missing: {_listed(missing)}" if missing else str(exc)),
        ) from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise EyasError(
            "bad_target",
            f"{target.dir}: the text model's weights {_listed(missing)} are not in the "
            f"checkpoint (looked under the prefix {target.text_prefix!r})",
        )
    return model


def _listed(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" ... ({len(names)} in all)" if len(names) > most else "")


_EXPERT = re.compile(r"^(?P<group>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>\w+)\.weight$")


def _missing_experts(names) -> list[str]:
    """Per-expert tensors absent from a layer whose other experts have them."""
    groups: dict[str, set[tuple[int, str]]] = {}
    for name in names:
        m = _EXPERT.match(name)
        if m:
            groups.setdefault(m["group"], set()).add((int(m["e"]), m["proj"]))
    out = []
    for group, have in sorted(groups.items()):
        experts, projs = {e for e, _ in have}, {p for _, p in have}
        grid = {(e, p) for e in range(max(experts) + 1) for p in projs}
        out += [f"{group}.{e}.{p}.weight" for e, p in sorted(grid - have)]
    return out


def _weight_files(model_dir: Path) -> dict[str, Path]:
    """tensor name -> safetensors file; `model.safetensors.index.json` aware."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        from eyas.jsonl import read_json_object

        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise EyasError("bad_model_config", f"{index}: no weight_map object")
        return {name: model_dir / file for name, file in weight_map.items()}
    out: dict[str, Path] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with _open_safetensors(file) as st:
            out.update({name: file for name in st.keys()})  # noqa: SIM118
    return out


def _open_safetensors(file: Path) -> Any:
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(str(file), "pt")
    except (SafetensorError, OSError) as exc:
        raise unreadable(file, "safetensors", exc) from exc


def load_named_tensors(
    model_dir: str | Path,
    wanted: dict[str, tuple[str, ...]],
    files: dict[str, Path] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Only the named tensors of a checkpoint, never the whole model.

    `wanted` maps a role to candidate tensor names (checkpoints name the same tensor
    differently); returns {role: tensor} for the roles found and the names actually read. A
    name whose file is absent (a config-only copy of a checkpoint) counts as not found.
    """
    files = files if files is not None else _weight_files(require_model_dir(model_dir))
    out: dict[str, Any] = {}
    read: list[str] = []
    for role, names in wanted.items():
        name = next((n for n in names if n in files and files[n].exists()), None)
        if name is None:
            continue
        with _open_safetensors(files[name]) as st:
            out[role] = st.get_tensor(name)
        read.append(name)
    return out, read
