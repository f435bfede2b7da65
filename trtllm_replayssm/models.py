"""Hybrid model descriptions: the layer stack of a Mamba-2 / GDN / KDA hybrid and its geometry.

A :class:`HybridModel` lists, per layer, its kind and the geometry its decode cache needs. It is
built from a Hugging Face ``config.json`` dict or a transformers config's ``to_dict()``
(:func:`from_hf_config`: NemotronH, Qwen3-Next / Qwen3.5, Kimi Linear, pure Mamba-2) or from a
named preset (:data:`PRESETS`, each the published config's
relevant fields, nothing more). :meth:`HybridModel.for_tp` gives the geometry one rank holds
under tensor parallelism, with TensorRT-LLM's sharding rules.

Layer kinds: ``mamba2``, ``gdn``, ``kda`` (SSM layers, a recurrent state per sequence),
``attention`` (a KV cache per token) and ``mlp`` / ``moe`` (no per-sequence cache). NemotronH
lists MLP/MoE blocks as layers of their own; Qwen3.5 and Kimi Linear put an FFN inside every
layer, which holds no cache and is not listed. MTP draft layers are not part of the stack.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Tuple, Union

from .registry import is_ssm

__all__ = [
    "MAMBA2",
    "GDN",
    "KDA",
    "ATTENTION",
    "MLP",
    "MOE",
    "SSM_KINDS",
    "Mamba2Geometry",
    "DeltaRuleGeometry",
    "AttentionGeometry",
    "MLAGeometry",
    "Layer",
    "HybridModel",
    "from_hf_config",
    "PRESETS",
    "load_model",
]

MAMBA2, GDN, KDA, ATTENTION, MLP, MOE = "mamba2", "gdn", "kda", "attention", "mlp", "moe"
SSM_KINDS = (MAMBA2, GDN, KDA)  # the built-in SSM kinds; registry.kinds() adds registered ones


def _check_tp(owner: str, tp_size: int) -> None:
    if not isinstance(tp_size, int) or isinstance(tp_size, bool) or tp_size < 1:
        raise ValueError(f"{owner}: tp_size is {tp_size!r}; expected a positive int")


def _split(owner: str, name: str, value: int, tp_size: int) -> int:
    if value % tp_size:
        raise ValueError(f"{owner}: {name} = {value} is not divisible by tp_size = {tp_size}")
    return value // tp_size


@dataclass(frozen=True)
class Mamba2Geometry:
    """One Mamba-2 layer: state [nheads, head_dim, d_state]; conv over x|B|C with kernel d_conv."""

    nheads: int
    head_dim: int
    d_state: int
    ngroups: int
    d_conv: int

    @property
    def state_dims(self) -> Tuple[int, int, int]:
        """One state (checkpoint): [nheads, head_dim, d_state]."""
        return (self.nheads, self.head_dim, self.d_state)

    @property
    def conv_dim(self) -> int:
        """Conv channels: x (nheads * head_dim) then B and C (ngroups * d_state each)."""
        return self.nheads * self.head_dim + 2 * self.ngroups * self.d_state

    def for_tp(self, tp_size: int) -> "Mamba2Geometry":
        """One rank's share: heads split; groups split when ngroups % tp_size == 0, else
        replicated (each rank keeps one group) when tp_size % ngroups == 0."""
        owner = "Mamba2Geometry.for_tp"
        _check_tp(owner, tp_size)
        nheads = _split(owner, "nheads", self.nheads, tp_size)
        if self.ngroups % tp_size == 0:
            ngroups = self.ngroups // tp_size
        elif tp_size % self.ngroups == 0:
            ngroups = 1
        else:
            raise ValueError(
                f"{owner}: ngroups = {self.ngroups} and tp_size = {tp_size}: expected "
                f"one to divide the other (groups split or replicated)"
            )
        return replace(self, nheads=nheads, ngroups=ngroups)


@dataclass(frozen=True)
class DeltaRuleGeometry:
    """One GDN or KDA layer: state [v_heads, head_v_dim, head_k_dim]; conv over q|k|v."""

    k_heads: int
    v_heads: int
    head_k_dim: int
    head_v_dim: int
    d_conv: int

    @property
    def state_dims(self) -> Tuple[int, int, int]:
        """One state (checkpoint): [v_heads, head_v_dim, head_k_dim]."""
        return (self.v_heads, self.head_v_dim, self.head_k_dim)

    @property
    def conv_dim(self) -> int:
        """Conv channels: q and k (k_heads * head_k_dim each) then v (v_heads * head_v_dim)."""
        return 2 * self.k_heads * self.head_k_dim + self.v_heads * self.head_v_dim

    def for_tp(self, tp_size: int) -> "DeltaRuleGeometry":
        """One rank's share: key heads and value heads split."""
        owner = "DeltaRuleGeometry.for_tp"
        _check_tp(owner, tp_size)
        return replace(
            self,
            k_heads=_split(owner, "k_heads", self.k_heads, tp_size),
            v_heads=_split(owner, "v_heads", self.v_heads, tp_size),
        )


@dataclass(frozen=True)
class AttentionGeometry:
    """One grouped-query attention layer: K and V of kv_heads heads of head_dim per token."""

    kv_heads: int
    head_dim: int

    @property
    def kv_elements_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim

    def for_tp(self, tp_size: int) -> "AttentionGeometry":
        """One rank's share: KV heads split, or replicated (one per rank) when tp_size is a
        multiple of kv_heads."""
        owner = "AttentionGeometry.for_tp"
        _check_tp(owner, tp_size)
        if self.kv_heads % tp_size == 0:
            return replace(self, kv_heads=self.kv_heads // tp_size)
        if tp_size % self.kv_heads == 0:
            return replace(self, kv_heads=1)
        raise ValueError(
            f"{owner}: kv_heads = {self.kv_heads} and tp_size = {tp_size}: expected "
            f"one to divide the other (KV heads split or replicated)"
        )


@dataclass(frozen=True)
class MLAGeometry:
    """One multi-head latent attention layer (Kimi Linear): a compressed latent of
    kv_lora_rank plus the qk_rope_head_dim rope key per token, the same on every rank."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def for_tp(self, tp_size: int) -> "MLAGeometry":
        _check_tp("MLAGeometry.for_tp", tp_size)
        return self


Geometry = Union[Mamba2Geometry, DeltaRuleGeometry, AttentionGeometry, MLAGeometry, None]


@dataclass(frozen=True)
class Layer:
    """Layer ``index`` (0-based) of kind ``kind``; ``geometry`` is None for mlp / moe."""

    index: int
    kind: str
    geometry: Geometry


@dataclass(frozen=True)
class HybridModel:
    """A hybrid model's layer stack, whole (``tp_size`` 1) or as one rank holds it."""

    name: str
    family: str
    layers: Tuple[Layer, ...]
    tp_size: int = 1

    @property
    def ssm_layers(self) -> Tuple[Layer, ...]:
        return tuple(l for l in self.layers if is_ssm(l.kind))

    @property
    def attention_layers(self) -> Tuple[Layer, ...]:
        return tuple(l for l in self.layers if l.kind == ATTENTION)

    def count(self, kind: str) -> int:
        return sum(l.kind == kind for l in self.layers)

    @property
    def ssm_per_attention(self) -> float:
        """SSM layers per attention layer (inf without attention)."""
        n_attn = len(self.attention_layers)
        return len(self.ssm_layers) / n_attn if n_attn else float("inf")

    def for_tp(self, tp_size: int) -> "HybridModel":
        """The geometry one rank holds with ``tp_size`` ranks (from a whole model only).

        Raises:
            ValueError: an impossible split, naming the layer and the dimension.
        """
        _check_tp("HybridModel.for_tp", tp_size)
        if self.tp_size != 1:
            raise ValueError(
                f"HybridModel.for_tp: {self.name} is already split over tp_size = "
                f"{self.tp_size}; expected a whole model (tp_size 1)"
            )
        layers = []
        for l in self.layers:
            try:
                geom = l.geometry.for_tp(tp_size) if l.geometry is not None else None
            except ValueError as e:
                raise ValueError(f"{self.name} layer {l.index} ({l.kind}): {e}") from None
            layers.append(replace(l, geometry=geom))
        return replace(self, layers=tuple(layers), tp_size=tp_size)


# --------------------------------------------------------------------------- HF configs

_FAMILIES = (
    "NemotronH (hybrid_override_pattern or layers_block_type), "
    "Qwen3-Next / Qwen3.5 (linear_num_value_heads with layer_types or "
    "full_attention_interval), Kimi Linear (linear_attn_config, or linear_num_heads "
    "with layer_types), Mamba-2 (model_type mamba2)"
)


def _int(cfg: Mapping, key: str, family: str, *fallbacks: str) -> int:
    """cfg[key] (or the first fallback key present) as a positive int."""
    for k in (key,) + fallbacks:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"config ({family}): {k} is {v!r}; expected a positive int")
            return v
    names = " or ".join((key,) + fallbacks)
    raise ValueError(f"config ({family}): {names} is missing; expected a positive int")


def _attention_head_dim(cfg: Mapping, family: str) -> int:
    if cfg.get("head_dim") is not None or cfg.get("attention_head_dim") is not None:
        return _int(cfg, "head_dim", family, "attention_head_dim")
    return _int(cfg, "hidden_size", family) // _int(cfg, "num_attention_heads", family)


def _check_layer_count(cfg: Mapping, kinds: list, family: str, source: str) -> None:
    """num_hidden_layers, when given (transformers 5 NemotronH derives it and leaves it out),
    equals the length of the layer list."""
    if cfg.get("num_hidden_layers") is not None and _int(cfg, "num_hidden_layers", family) != len(kinds):
        raise ValueError(
            f"config ({family}): {source} describes {len(kinds)} layers; num_hidden_layers is {cfg['num_hidden_layers']}"
        )


_NEMOTRON_PATTERN = {"M": MAMBA2, "*": ATTENTION, "-": MLP, "E": MOE}
# layers_block_type names: config.json files up to transformers 4 say mamba / attention;
# transformers 5 renames them linear_attention / full_attention (and so does its to_dict()).
_NEMOTRON_BLOCKS = {
    "mamba": MAMBA2,
    "linear_attention": MAMBA2,
    "attention": ATTENTION,
    "full_attention": ATTENTION,
    "mlp": MLP,
    "moe": MOE,
}


def _nemotron_h(cfg: Mapping) -> Tuple[str, list]:
    family = "NemotronH"
    if cfg.get("hybrid_override_pattern") is not None:
        pattern = cfg["hybrid_override_pattern"]
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(_NEMOTRON_PATTERN):
            raise ValueError(
                f"config ({family}): hybrid_override_pattern is {pattern!r}; expected a "
                f"non-empty string of {''.join(_NEMOTRON_PATTERN)} "
                f"(M Mamba-2, * attention, - MLP, E MoE)"
            )
        kinds, source = [_NEMOTRON_PATTERN[c] for c in pattern], "hybrid_override_pattern"
    else:
        blocks = cfg["layers_block_type"]
        if not isinstance(blocks, (list, tuple)) or not blocks or any(b not in _NEMOTRON_BLOCKS for b in blocks):
            raise ValueError(
                f"config ({family}): layers_block_type is {blocks!r}; expected a "
                f"non-empty list of {', '.join(_NEMOTRON_BLOCKS)}"
            )
        kinds, source = [_NEMOTRON_BLOCKS[b] for b in blocks], "layers_block_type"
    _check_layer_count(cfg, kinds, family, source)
    geoms = {}
    if MAMBA2 in kinds:
        geoms[MAMBA2] = Mamba2Geometry(
            nheads=_int(cfg, "mamba_num_heads", family),
            head_dim=_int(cfg, "mamba_head_dim", family),
            d_state=_int(cfg, "ssm_state_size", family),
            ngroups=_int(cfg, "n_groups", family),
            d_conv=_int(cfg, "conv_kernel", family),
        )
        if geoms[MAMBA2].nheads % geoms[MAMBA2].ngroups:
            raise ValueError(
                f"config ({family}): n_groups = {geoms[MAMBA2].ngroups} must divide mamba_num_heads = {geoms[MAMBA2].nheads}"
            )
    if ATTENTION in kinds:
        geoms[ATTENTION] = AttentionGeometry(
            kv_heads=_int(cfg, "num_key_value_heads", family), head_dim=_attention_head_dim(cfg, family)
        )
    return family, [Layer(i, k, geoms.get(k)) for i, k in enumerate(kinds)]


def _layer_types_kinds(cfg: Mapping, linear_kind: str, family: str, alternative: str = "") -> list:
    """Per layer ``linear_kind`` or ATTENTION from ``layer_types`` ('linear_attention' /
    'full_attention'), checked against num_hidden_layers; ``alternative`` ends the error message."""
    types = cfg.get("layer_types")
    allowed = {"linear_attention": linear_kind, "full_attention": ATTENTION}
    if not isinstance(types, (list, tuple)) or any(t not in allowed for t in types):
        raise ValueError(
            f"config ({family}): layer_types is {types!r}; expected a list of "
            f"'linear_attention' / 'full_attention'{alternative}"
        )
    kinds = [allowed[t] for t in types]
    _check_layer_count(cfg, kinds, family, "layer_types")
    return kinds


def _qwen_gdn(cfg: Mapping) -> Tuple[str, list]:
    family = "Qwen3-Next/Qwen3.5"
    n = _int(cfg, "num_hidden_layers", family)
    if cfg.get("layer_types") is not None:
        kinds = _layer_types_kinds(cfg, GDN, family)
    else:
        interval = _int(cfg, "full_attention_interval", family)
        kinds = [ATTENTION if (i + 1) % interval == 0 else GDN for i in range(n)]
    geoms = {
        GDN: DeltaRuleGeometry(
            k_heads=_int(cfg, "linear_num_key_heads", family),
            v_heads=_int(cfg, "linear_num_value_heads", family),
            head_k_dim=_int(cfg, "linear_key_head_dim", family),
            head_v_dim=_int(cfg, "linear_value_head_dim", family),
            d_conv=_int(cfg, "linear_conv_kernel_dim", family),
        )
    }
    if geoms[GDN].v_heads % geoms[GDN].k_heads:
        raise ValueError(
            f"config ({family}): linear_num_key_heads = {geoms[GDN].k_heads} must "
            f"divide linear_num_value_heads = {geoms[GDN].v_heads}"
        )
    if ATTENTION in kinds:
        geoms[ATTENTION] = AttentionGeometry(
            kv_heads=_int(cfg, "num_key_value_heads", family), head_dim=_attention_head_dim(cfg, family)
        )
    return family, [Layer(i, k, geoms[k]) for i, k in enumerate(kinds)]


def _kimi_layer_kinds(cfg: Mapping, n: int, family: str) -> list:
    """Per layer KDA or ATTENTION, from ``linear_attn_config`` (config.json: 1-based
    kda_layers / full_attn_layers) or from ``layer_types`` (transformers 5's to_dict())."""
    lac = cfg.get("linear_attn_config")
    if lac is None:
        return _layer_types_kinds(cfg, KDA, family, " (or a linear_attn_config)")
    if not isinstance(lac, Mapping):
        raise ValueError(f"config ({family}): linear_attn_config is {lac!r}; expected a dict")
    # Layer ids in linear_attn_config are 1-based, as published.
    ids = {}
    for key in ("kda_layers", "full_attn_layers"):
        v = lac.get(key)
        if not isinstance(v, (list, tuple)) or any(not isinstance(i, int) or isinstance(i, bool) for i in v):
            raise ValueError(f"config ({family}): linear_attn_config.{key} is {v!r}; expected a list of 1-based layer ids")
        ids[key] = set(v)
    if ids["kda_layers"] & ids["full_attn_layers"] or (ids["kda_layers"] | ids["full_attn_layers"]) != set(range(1, n + 1)):
        raise ValueError(
            f"config ({family}): linear_attn_config.kda_layers and full_attn_layers "
            f"must split layers 1..{n} (num_hidden_layers) without overlap"
        )
    return [KDA if i + 1 in ids["kda_layers"] else ATTENTION for i in range(n)]


def _kimi_linear(cfg: Mapping) -> Tuple[str, list]:
    family = "Kimi Linear"
    n = _int(cfg, "num_hidden_layers", family)
    kinds = _kimi_layer_kinds(cfg, n, family)
    lac = cfg.get("linear_attn_config")
    if lac is not None:
        heads, head_dim = _int(lac, "num_heads", family), _int(lac, "head_dim", family)
        d_conv = _int(lac, "short_conv_kernel_size", family)
    else:
        heads, head_dim = _int(cfg, "linear_num_heads", family), _int(cfg, "linear_head_dim", family)
        d_conv = _int(cfg, "linear_conv_kernel_dim", family)
    geoms = {KDA: DeltaRuleGeometry(k_heads=heads, v_heads=heads, head_k_dim=head_dim, head_v_dim=head_dim, d_conv=d_conv)}
    if cfg.get("kv_lora_rank") is not None:
        geoms[ATTENTION] = MLAGeometry(
            kv_lora_rank=_int(cfg, "kv_lora_rank", family), qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", family)
        )
    else:
        geoms[ATTENTION] = AttentionGeometry(
            kv_heads=_int(cfg, "num_key_value_heads", family), head_dim=_attention_head_dim(cfg, family)
        )
    return family, [Layer(i, k, geoms[k]) for i, k in enumerate(kinds)]


def _mamba2(cfg: Mapping) -> Tuple[str, list]:
    """A pure Mamba-2 model (transformers' Mamba2Config): every layer a Mamba-2 mixer."""
    family = "Mamba-2"
    geom = Mamba2Geometry(
        nheads=_int(cfg, "num_heads", family),
        head_dim=_int(cfg, "head_dim", family),
        d_state=_int(cfg, "state_size", family),
        ngroups=_int(cfg, "n_groups", family),
        d_conv=_int(cfg, "conv_kernel", family),
    )
    if geom.nheads % geom.ngroups:
        raise ValueError(f"config ({family}): n_groups = {geom.ngroups} must divide num_heads = {geom.nheads}")
    return family, [Layer(i, MAMBA2, geom) for i in range(_int(cfg, "num_hidden_layers", family))]


def from_hf_config(config: Mapping, name: Optional[str] = None) -> HybridModel:
    """The layer stack described by a Hugging Face ``config.json`` dict or by a transformers
    config's ``to_dict()`` (transformers 4 or 5 key names).

    Multimodal wrappers are unwrapped (``text_config``). Recognised: NemotronH
    (``hybrid_override_pattern`` or ``layers_block_type``, whose block names may be
    mamba / attention or transformers 5's linear_attention / full_attention), Qwen3-Next /
    Qwen3.5 GDN hybrids (``linear_num_value_heads`` with ``layer_types`` or
    ``full_attention_interval``), Kimi Linear (``linear_attn_config``, or transformers 5's
    ``linear_num_heads`` with ``layer_types``; MLA attention when ``kv_lora_rank`` is set) and
    pure Mamba-2 models (``model_type`` mamba2).

    Raises:
        ValueError: an unrecognised or malformed config, naming the key and what was expected.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"from_hf_config: config is {type(config).__name__}; expected a dict (a parsed config.json)")
    cfg = config["text_config"] if isinstance(config.get("text_config"), Mapping) else config
    if cfg.get("hybrid_override_pattern") is not None or cfg.get("layers_block_type") is not None:
        family, layers = _nemotron_h(cfg)
    elif cfg.get("linear_attn_config") is not None or cfg.get("linear_num_heads") is not None:
        family, layers = _kimi_linear(cfg)
    elif "linear_num_value_heads" in cfg:
        family, layers = _qwen_gdn(cfg)
    elif cfg.get("model_type") == "mamba2":
        family, layers = _mamba2(cfg)
    else:
        model_type = cfg.get("model_type", config.get("model_type"))
        raise ValueError(f"from_hf_config: unrecognised config (model_type {model_type!r}); expected one of: {_FAMILIES}")
    if name is None:
        archs = config.get("architectures") or [cfg.get("model_type", "model")]
        name = str(archs[0])
    return HybridModel(name=name, family=family, layers=tuple(layers))


# --------------------------------------------------------------------------- presets
# Each preset holds the published config.json fields the planner reads (plus architectures and
# model_type). Sources are cited per preset; the Hugging Face pages themselves could not be
# opened here, so every number was read from public material that quotes the config, and a value
# is only used where at least two independent sources agree.

PRESETS = {
    # https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16/blob/main/config.json
    # (model id as named by NVIDIA's Megatron-Bridge recipe nemotron_3_nano_4b,
    # docs.nvidia.com/nemo/megatron-bridge). Pattern and geometry as quoted by several public
    # model ports (mlc-llm, Rust and vLLM-policy test fixtures): 42 layers, 21 Mamba-2,
    # 4 attention, 17 MLP.
    "nemotron-3-nano-4b": {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "num_hidden_layers": 42,
        "hidden_size": 3136,
        "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
        "mamba_num_heads": 96,
        "mamba_head_dim": 80,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    # https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16/blob/main/config.json
    # (also the -Base-BF16 page). Pattern and geometry as quoted by Megatron-LM launch scripts
    # (--hybrid-override-pattern, --mamba-num-heads 128, --num-query-groups 2, --kv-channels 128),
    # slime's model script and public ports; layer mix 40 Mamba-2 + 40 MoE + 8 attention also in
    # glennklockwood.com/garden/Nemotron-3.
    "nemotron-3-super-120b": {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "num_hidden_layers": 88,
        "hidden_size": 4096,
        "hybrid_override_pattern": (
            "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
        ),
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
    },
    # https://huggingface.co/Qwen/Qwen3.5-4B/blob/main/config.json (multimodal wrapper; the text
    # stack is text_config). Field table quoted in public READMEs citing that file: 32 layers,
    # hidden 2560, 16 heads / 4 KV heads, head_dim 256, GDN 16 key / 32 value heads,
    # full_attention_interval 4; linear head dims 128 and conv kernel 4 as in the same-size
    # Qwen3.5 text config huggingface.co/halen214/st01 and the replayssm brief's (16, 32, 128, 128).
    "qwen3.5-4b": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {
            "model_type": "qwen3_5_text",
            "num_hidden_layers": 32,
            "hidden_size": 2560,
            "full_attention_interval": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
        },
    },
    # https://huggingface.co/Qwen/Qwen3.5-122B-A10B/blob/main/config.json. Fields as quoted by
    # public configs and notes citing that file: 48 layers (36 GDN + 12 full attention),
    # hidden 3072, 32 heads / 2 KV heads, head_dim 256, GDN 16 key / 64 value heads of 128,
    # conv kernel 4, full_attention_interval 4.
    "qwen3.5-122b-a10b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "num_hidden_layers": 48,
            "hidden_size": 3072,
            "full_attention_interval": 4,
            "num_attention_heads": 32,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 64,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
        },
    },
    # https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json.
    # Fields as quoted by several public ports pinned to that file: 27 layers, KDA at 1-based
    # layers 1-3, 5-7, ..., 25-26 (20), MLA at 4, 8, 12, 16, 20, 24, 27 (7); KDA 32 heads of
    # 128, short conv 4; MLA kv_lora_rank 512, qk_rope_head_dim 64.
    "kimi-linear-48b": {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "num_hidden_layers": 27,
        "hidden_size": 2304,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "linear_attn_config": {
            "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
            "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
            "num_heads": 32,
            "head_dim": 128,
            "short_conv_kernel_size": 4,
        },
    },
}


def load_model(spec: str) -> HybridModel:
    """A preset name (:data:`PRESETS`) or the path of a ``config.json``.

    Raises:
        ValueError: unknown preset / unreadable file / malformed config, listing what is accepted.
    """
    if spec in PRESETS:
        return from_hf_config(PRESETS[spec], name=spec)
    accepted = f"a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json"
    if not os.path.isfile(spec):
        raise ValueError(f"model {spec!r} is neither a preset nor a file; expected {accepted}")
    try:
        with open(spec, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"model {spec!r}: cannot read a JSON config ({e}); expected {accepted}") from None
    return from_hf_config(config, name=os.path.basename(os.path.dirname(os.path.abspath(spec))) or spec)
