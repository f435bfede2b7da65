"""Random-weight Hugging Face hybrids built offline from a config (no hub download).

For tests (``size="tiny"``: a few thousand parameters, milliseconds per step on a CPU) and the
demo (``size="small"``: one to three million parameters). Weights are drawn with
``initializer_range`` 0.2 (Mamba-2 families) or 0.1 (GDN / KDA families) and no residual
down-scaling, so the SSM layers move the logits visibly: a wrong SSM state changes them by O(1)
relative (a test checks it), where the library default (0.02) leaves them within 1e-6. The Qwen
gated norms use eps 1e-5 (published configs: 1e-6): over the tiny models' 8-channel heads, 1e-6
let the fp32 rounding of a near-zero head output grow to ~1e-4 of the logits between two equally
exact decodes; larger weights do the same for the GDN / KDA families.
"""

from __future__ import annotations

from typing import Union

import torch

from .compat import bind_torch_paths

__all__ = ["FAMILIES", "SIZES", "build_random_model"]

FAMILIES = ("nemotron_h", "mamba2", "qwen3_next", "qwen3_5", "kimi_linear")

# Width per size: hidden size, SSM heads and head size, attention heads, layer groups.
SIZES = {
    "tiny": dict(hidden=32, heads=4, head_dim=8, d_state=16, groups=2),
    "small": dict(hidden=256, heads=8, head_dim=32, d_state=32, groups=1),
}

_INIT = dict(
    vocab_size=128,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=None,
    tie_word_embeddings=False,
    experts_implementation="eager",
)  # grouped_mm has no float64 kernel


def _config(family: str, size: str):
    import transformers as hf

    s = SIZES[size]
    h, nh, hd, ds, reps = s["hidden"], s["heads"], s["head_dim"], s["d_state"], s["groups"]
    attention = dict(num_attention_heads=nh, num_key_value_heads=2, head_dim=hd)
    if family == "nemotron_h":
        # Nemotron 3 pattern: Mamba-2 blocks, MLP blocks and a few attention blocks.
        pattern = ["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"] * reps
        return hf.NemotronHConfig(
            hidden_size=h,
            layers_block_type=pattern,
            intermediate_size=2 * h,
            mamba_num_heads=2 * nh,
            mamba_head_dim=hd,
            ssm_state_size=ds,
            n_groups=2,
            chunk_size=16,
            rescale_prenorm_residual=False,
            initializer_range=0.2,
            **attention,
            **_INIT,
        )
    if family == "mamba2":
        return hf.Mamba2Config(
            hidden_size=h,
            num_hidden_layers=2 * reps,
            num_heads=2 * h // hd,
            head_dim=hd,
            state_size=ds,
            n_groups=2,
            expand=2,
            chunk_size=16,
            initializer_range=0.2,
            **_INIT,
        )
    linear = dict(
        linear_num_key_heads=nh // 2,
        linear_num_value_heads=nh,
        linear_key_head_dim=hd,
        linear_value_head_dim=hd,
        rms_norm_eps=1e-5,
        initializer_range=0.1,
    )
    # Layer i is full attention when (i + 1) % 4 == 0: three GDN layers per attention layer.
    layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * reps
    if family == "qwen3_next":
        return hf.Qwen3NextConfig(
            hidden_size=h,
            intermediate_size=2 * h,
            num_hidden_layers=len(layer_types),
            layer_types=layer_types,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=h // 2,
            shared_expert_intermediate_size=h // 2,
            **linear,
            **attention,
            **_INIT,
        )
    if family == "qwen3_5":
        return hf.Qwen3_5TextConfig(
            hidden_size=h,
            intermediate_size=2 * h,
            num_hidden_layers=len(layer_types),
            layer_types=layer_types,
            **linear,
            **attention,
            **_INIT,
        )
    if family == "kimi_linear":
        return hf.KimiLinearConfig(
            hidden_size=h,
            intermediate_size=2 * h,
            moe_intermediate_size=h // 2,
            num_hidden_layers=len(layer_types),
            layer_types=layer_types,
            num_attention_heads=nh,
            num_key_value_heads=nh,
            kv_lora_rank=2 * hd,
            qk_rope_head_dim=hd,
            qk_nope_head_dim=hd,
            v_head_dim=hd,
            linear_num_heads=nh,
            linear_head_dim=hd,
            num_local_experts=4,
            num_experts_per_tok=2,
            initializer_range=0.1,
            **_INIT,
        )
    raise ValueError(f"build_random_model: family is {family!r}; expected one of {', '.join(FAMILIES)}")


_MODEL_CLASSES = {
    "nemotron_h": "NemotronHForCausalLM",
    "mamba2": "Mamba2ForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM",
    "kimi_linear": "KimiLinearForCausalLM",
}


def build_random_model(
    family: str,
    size: str = "tiny",
    *,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    seed: int = 0,
):
    """A ``<Family>ForCausalLM`` with random weights, in eval mode.

    Args:
        family (str): one of :data:`FAMILIES`.
        size (str): ``"tiny"`` or ``"small"`` (:data:`SIZES`).
        dtype (torch.dtype): parameter dtype.
        device (str | torch.device): where the model lives.
        seed (int): seeds the weights (the global torch generator is left as it was).
    Raises:
        ValueError: unknown family or size. ImportError: transformers >= 5.17 missing.
        RuntimeError: a CPU model of a GDN / KDA family whose modelling module this process
            already imported with flash-linear-attention's GPU kernels bound.
    """
    if size not in SIZES:
        raise ValueError(f"build_random_model: size is {size!r}; expected one of {', '.join(SIZES)}")
    try:
        import transformers as hf
    except ImportError as e:
        raise ImportError("build_random_model needs transformers >= 5.17: pip install 'trtllm_replayssm[hf]'") from e
    config = _config(family, size)
    if torch.device(device).type == "cpu":
        bind_torch_paths(family)  # GDN / KDA: not fla's Triton kernels, which need a GPU
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(hf, _MODEL_CLASSES[family])(config)
    return model.to(device=device, dtype=dtype).eval()
