"""What the ReplaySSM records of a TensorRT-LLM rank look like: pure functions, no TensorRT-LLM.

TensorRT-LLM's V2 Mamba cache manager describes each rank's recurrent layers by a few numbers
(``MambaCacheBuildContext``): ``ssm_state_shape`` ``(nheads, head_dim, d_state)``,
``conv_state_shape`` ``(conv_dim, d_conv - 1)``, the conv sections and their layout
(``x_b_c`` for Mamba-2, ``q_k_v`` for GDN / KDA, which it stores with nheads = v_heads,
head_dim = head_v_dim, d_state = head_k_dim). :func:`rank_geometry` turns them into our layer
geometry; :func:`record_fields` gives the per-slot record buffers of one layer (the core cache
classes' own layout, so the ops read them unchanged); :func:`bytes_per_slot` and
:func:`replay_bytes_per_rank` give the bytes TensorRT-LLM must reserve, equal to the planner's
``replay`` records + cursors (the checkpoint is TensorRT-LLM's own SSM state, the conv state its
own conv state: neither is allocated twice).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, fields
from typing import Mapping, Sequence, Tuple, Union

import torch

from trtllm_replayssm.memory import CURSOR_BYTES, NON_RECORD_FIELDS
from trtllm_replayssm.models import GDN, KDA, MAMBA2, DeltaRuleGeometry, Mamba2Geometry, from_hf_config
from trtllm_replayssm.pool import cache_template
from trtllm_replayssm.registry import family, is_ssm, kinds

__all__ = [
    "CONV_LAYOUTS",
    "COUNTER_FIELDS",
    "RecordField",
    "rank_geometry",
    "record_field_names",
    "record_fields",
    "record_dtype_for",
    "bytes_per_slot",
    "ssm_tp_size",
    "model_dtype",
    "replay_bytes_per_rank",
]

Geometry = Union[Mamba2Geometry, DeltaRuleGeometry]

# TensorRT-LLM's conv-state section order per family.
CONV_LAYOUTS = {MAMBA2: "x_b_c", GDN: "q_k_v", KDA: "q_k_v"}
# Per-slot int32 counters of every replay cache; the kernels index them densely by slot.
COUNTER_FIELDS = ("cursor", "arrivals", "pending")


@dataclass(frozen=True)
class RecordField:
    """One record buffer of a layer, per slot.

    Attributes:
        name: the core cache field (``x_records`` ... or ``d_records`` ...).
        role: the V2 pool role name it is stored under (``replayssm_<name>``).
        shape: per-slot shape, e.g. ``(nheads, L, head_dim)``.
        dtype: its dtype.
    """

    name: str
    role: str
    shape: Tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def _positive(owner: str, name: str, v) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{owner}: {name} is {v!r}; expected a positive int")


def rank_geometry(
    kind: str,
    ssm_state_shape: Sequence[int],
    conv_state_shape: Sequence[int],
    conv_section_dims: Sequence[int],
    conv_state_layout: str,
) -> Geometry:
    """One rank's layer geometry from TensorRT-LLM's cache description.

    Args:
        kind: ``mamba2``, ``gdn`` or ``kda``.
        ssm_state_shape: ``(nheads, head_dim, d_state)``; for GDN / KDA
            ``(v_heads, head_v_dim, head_k_dim)``.
        conv_state_shape: ``(conv_dim, d_conv - 1)``.
        conv_section_dims: ``x_b_c``: ``(nheads*head_dim, ngroups*d_state, ngroups*d_state)``;
            ``q_k_v``: ``(k_heads*head_k_dim, k_heads*head_k_dim, v_heads*head_v_dim)``.
        conv_state_layout: ``x_b_c`` or ``q_k_v``.
    Raises:
        ValueError: the numbers do not describe a ``kind`` layer, naming which disagree.
    """
    owner = "rank_geometry"
    if kind not in CONV_LAYOUTS:
        raise ValueError(f"{owner}: kind is {kind!r}; expected one of {', '.join(CONV_LAYOUTS)}")
    if conv_state_layout != CONV_LAYOUTS[kind]:
        raise ValueError(
            f"{owner}: a {kind} layer has conv_state_layout {conv_state_layout!r}; expected {CONV_LAYOUTS[kind]!r}"
        )
    shapes = (
        ("ssm_state_shape", ssm_state_shape, 3),
        ("conv_state_shape", conv_state_shape, 2),
        ("conv_section_dims", conv_section_dims, 3),
    )
    for name, value, n in shapes:
        if len(value) != n:
            raise ValueError(f"{owner}: {name} is {tuple(value)}; expected {n} entries")
        for v in value:
            _positive(owner, name, v)
    nheads, head_dim, d_state = ssm_state_shape
    conv_dim, width = conv_state_shape
    first, second, third = conv_section_dims
    if first + second + third != conv_dim:
        raise ValueError(
            f"{owner}: conv_section_dims {tuple(conv_section_dims)} sum to "
            f"{first + second + third}; expected conv_dim = {conv_dim}"
        )
    if kind == MAMBA2:
        # [x | B | C] = [nheads*head_dim, ngroups*d_state, ngroups*d_state]
        if first != nheads * head_dim or second != third or second % d_state:
            raise ValueError(
                f"{owner}: mamba2 conv sections {tuple(conv_section_dims)}; expected "
                f"(nheads*head_dim, ngroups*d_state, ngroups*d_state) with nheads "
                f"{nheads}, head_dim {head_dim}, d_state {d_state}"
            )
        ngroups = second // d_state
        if nheads % ngroups:
            raise ValueError(f"{owner}: ngroups = {ngroups} must divide nheads = {nheads}")
        return Mamba2Geometry(nheads=nheads, head_dim=head_dim, d_state=d_state, ngroups=ngroups, d_conv=width + 1)
    # [q | k | v] = [k_heads*head_k_dim, k_heads*head_k_dim, v_heads*head_v_dim]
    v_heads, head_v_dim, head_k_dim = nheads, head_dim, d_state
    if first != second or first % head_k_dim or third != v_heads * head_v_dim:
        raise ValueError(
            f"{owner}: {kind} conv sections {tuple(conv_section_dims)}; expected "
            f"(k_heads*head_k_dim, k_heads*head_k_dim, v_heads*head_v_dim) with "
            f"v_heads {v_heads}, head_v_dim {head_v_dim}, head_k_dim {head_k_dim}"
        )
    k_heads = first // head_k_dim
    if v_heads % k_heads or (kind == KDA and k_heads != v_heads):
        raise ValueError(
            f"{owner}: {kind} with k_heads {k_heads} and v_heads {v_heads}; expected k_heads dividing v_heads (equal for kda)"
        )
    return DeltaRuleGeometry(k_heads=k_heads, v_heads=v_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim, d_conv=width + 1)


def record_field_names(kind: str) -> Tuple[str, ...]:
    """The record fields of ``kind``'s core cache class (its fields minus the checkpoint and
    the counters), in declaration order."""
    if not is_ssm(kind):
        raise ValueError(f"record_field_names: kind is {kind!r}; expected one of {', '.join(kinds())}")
    return tuple(f.name for f in fields(family(kind).cache) if f.name not in NON_RECORD_FIELDS)


def record_fields(
    kind: str, geometry: Geometry, L: int, *, record_dtype: torch.dtype, state_dtype: torch.dtype
) -> Tuple[RecordField, ...]:
    """The record buffers of one layer, per slot, in the core caches' layout.

    Mamba-2: ``x_records [nheads, L, head_dim]``, ``dt_records [nheads, L]`` fp32,
    ``B_records [ngroups, L, d_state]``. GDN: ``d_records [v_heads, L, head_v_dim]``,
    ``k_records [k_heads, L, head_k_dim]``, ``g_records [v_heads, L]`` fp32; KDA:
    ``g_records [v_heads, L, head_k_dim]``, fp16 beside bf16 or fp16 d / k records, else fp32
    (both g layouts in the core's ``g_record_dtype``; fp64 with an fp64 state). Shapes and dtypes
    come from the core cache class. The checkpoint and the counters are not among them (the
    checkpoint is TensorRT-LLM's SSM state; counters see :data:`COUNTER_FIELDS`).
    """
    template = cache_template(kind, geometry, L, state_dtype=state_dtype, record_dtype=record_dtype)
    return tuple(
        RecordField(name, f"replayssm_{name}", tuple(getattr(template, name).shape[1:]), getattr(template, name).dtype)
        for name in record_field_names(kind)
    )


def record_dtype_for(kind: str, activation_dtype: torch.dtype, delta_rule_records: str) -> torch.dtype:
    """The records' dtype: fp32 for GDN / KDA with ``delta_rule_records="float32"``, else the
    activation dtype (Mamba-2's records are its inputs, held exactly)."""
    if delta_rule_records not in ("activation", "float32"):
        raise ValueError(f"record_dtype_for: delta_rule_records is {delta_rule_records!r}; expected 'activation' or 'float32'")
    if kind in (GDN, KDA) and delta_rule_records == "float32":
        return torch.float32
    return activation_dtype


def bytes_per_slot(kind: str, geometry: Geometry, L: int, *, record_dtype: torch.dtype, state_dtype: torch.dtype) -> int:
    """Bytes ReplaySSM adds to one slot of one layer: its records plus the int32 counters
    (cursor, arrivals, pending). Equals ``ssm_layer_bytes(..., "replay")`` records + cursors."""
    records = sum(f.nbytes for f in record_fields(kind, geometry, L, record_dtype=record_dtype, state_dtype=state_dtype))
    return records + CURSOR_BYTES


def ssm_tp_size(tp_size: int, enable_attention_dp: bool) -> int:
    """The tensor-parallel degree TensorRT-LLM splits recurrent layers over: 1 under attention
    data parallelism (each rank holds whole layers), else the TP size."""
    _positive("ssm_tp_size", "tp_size", tp_size)
    return 1 if enable_attention_dp else tp_size


_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def model_dtype(hf_config: Mapping) -> torch.dtype:
    """The activation dtype a ``config.json`` names (``dtype``, or ``torch_dtype`` before
    transformers 5; a multimodal wrapper's ``text_config`` first): the records' dtype."""
    text = hf_config.get("text_config")
    for cfg in ((text,) if isinstance(text, Mapping) else ()) + (hf_config,):
        for key in ("dtype", "torch_dtype"):
            value = cfg.get(key)
            if isinstance(value, torch.dtype):
                value = str(value).replace("torch.", "")
            if value is not None:
                if value not in _DTYPES:
                    raise ValueError(f"model_dtype: config {key} is {value!r}; expected one of {', '.join(_DTYPES)}")
                return _DTYPES[value]
    raise ValueError("model_dtype: config has no dtype / torch_dtype; expected the model's activation dtype")


def replay_bytes_per_rank(
    hf_config: Mapping,
    families: Sequence[str],
    L: int,
    *,
    tp_size: int,
    activation_dtype: torch.dtype,
    delta_rule_records: str = "activation",
    state_dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes ReplaySSM adds per slot on one rank: the sum of :func:`bytes_per_slot` over the
    model's SSM layers of ``families`` at the rank's geometry (no pipeline parallelism).

    Args:
        hf_config: the model's ``config.json`` as a dict (NemotronH, Qwen3-Next / Qwen3.5,
            Kimi Linear).
        tp_size: the recurrent layers' TP degree (:func:`ssm_tp_size`).
        activation_dtype, delta_rule_records: give each layer's record dtype
            (:func:`record_dtype_for`).
    """
    model = from_hf_config(hf_config).for_tp(tp_size)
    memo = {}
    total = 0
    for layer in model.ssm_layers:
        if layer.kind not in families:
            continue
        key = (layer.kind, layer.geometry)
        if key not in memo:
            record_dtype = record_dtype_for(layer.kind, activation_dtype, delta_rule_records)
            memo[key] = bytes_per_slot(layer.kind, layer.geometry, L, record_dtype=record_dtype, state_dtype=state_dtype)
        total += memo[key]
    return total
