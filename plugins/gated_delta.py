"""The ``replayssm::gated_delta_replay_step`` plugin (GDN and KDA) as plain data: inputs,
attributes, shape rules, the entry kernel's specialization, scalars and grid. No TensorRT.

One plugin for both families, as one custom op serves both: ``per_channel`` (KDA) makes the
log-decay per key channel. Plugin inputs (all required but checkpoint_scale, present exactly
when the checkpoint is fp8; absent, slot_ids takes its place):

    0 checkpoint  [num_slots, v_heads, head_v_dim, head_k_dim]   f32 | bf16 | f16 | fp8 (e4m3)
    1 d_records   [num_slots, v_heads, L, head_v_dim]            record dtype (f32 | bf16 | f16)
    2 k_records   [num_slots, k_heads, L, head_k_dim]            record dtype
    3 g_records   [num_slots, v_heads, L] (GDN) | [num_slots, v_heads, L, head_k_dim] (KDA)  f32;
                  f16 for KDA with bf16 | f16 records (:func:`g_records_dtype`)
    4 cursor      [num_slots]                                     i32
    5 arrivals    [num_slots]                                     i32, zero between launches
    6 q           [batch, k_heads, head_k_dim]                    act (f32 | bf16 | f16), raw
    7 k           [batch, k_heads, head_k_dim]                    act
    8 v           [batch, v_heads, head_v_dim]                    act
    9 g           [batch, v_heads] (GDN) | [batch, v_heads, head_k_dim] (KDA)  f32 | bf16 | f16
   10 beta        [batch, v_heads]                                f32 | bf16 | f16
   11 slot_ids    [batch]                                         i32; < 0: padding row
   12 checkpoint_scale [num_slots, v_heads, head_v_dim]           f32: an fp8 checkpoint's row scales

Outputs: 0 out (o, like v; padding and skipped rows not written), 1..6 the cache tensors 0..5,
aliased, 7 checkpoint_scale: aliased to input 12 with an fp8 checkpoint, otherwise a buffer
like slot_ids that nothing writes. Attributes: geometry, ``per_channel``, ``use_qk_l2norm``,
``scale`` (a float: baked into the PTX, since TensorRT passes only int32 scalars), the launch
configuration and ``rounding_seed`` (-1, or the seed of stochastic rounding at flush for bf16,
f16 and fp8 checkpoints: the kernel's int32 scalar ``sr_seed``).

The plugin exports the Triton kernel, for every dtype. The CUDA C++ step that the op runs on
sm_90 for bf16 activations and records since 2026-12-03 (``kernels/gated_delta_replay_cuda.py``;
docs/kernel-notes.md "CUDA gated delta step") is not exported: it is two launches (or the small
kernel's one), and an engine built with this plugin runs the Triton kernel's speeds
(docs/benchmarks.md "GDN and KDA decode", 2026-11-30 table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch
import triton

import trtllm_replayssm.ops  # noqa: F401 - registers torch.ops.replayssm.* (run_op)

from trtllm_replayssm.cache import MAX_L, GDNReplayCache, KDAReplayCache
from trtllm_replayssm.kernels.common import LaunchConfig
from trtllm_replayssm.kernels.gated_delta_common import H200_MULTIPROCESSORS, gated_delta_launch_config
from trtllm_replayssm.kernels.gated_delta_replay import replay_constexprs

from .gated_delta_entry import _gated_delta_replay_step_plugin_kernel as ENTRY
from .ptx import CompiledKernel, compile_ptx
from .spec import (
    FLOATS,
    FP8,
    ROUNDING_OFF,
    STATE_DTYPES,
    TORCH_DTYPES,
    InputDim,
    KernelSpec,
    Scalar,
    TensorInfo,
    build_kernel_spec,
    check_attr_fields,
    check_checkpoint_scale,
    check_dtype,
    check_launch_attrs,
    check_rank_and_dims,
    check_rounding_seed,
)

__all__ = [
    "PLUGIN",
    "INPUTS",
    "OUTPUTS",
    "ALIASED_OUTPUTS",
    "FP8_ALIASED_OUTPUTS",
    "LIKE_INPUT",
    "SCALE_LAYOUT",
    "ATTRS",
    "ENTRY",
    "GatedDeltaReplayAttrs",
    "check_inputs",
    "compile_kernel",
    "g_records_dtype",
    "kernel_spec",
    "layer_attrs",
    "plugin_inputs",
    "run_op",
    "tensor_infos",
]

PLUGIN = "gated_delta_replay_step"
INPUTS = (
    "checkpoint",
    "d_records",
    "k_records",
    "g_records",
    "cursor",
    "arrivals",
    "q",
    "k",
    "v",
    "g",
    "beta",
    "slot_ids",
    "checkpoint_scale",
)
OUTPUTS = ("out", "checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals", "checkpoint_scale")
ALIASED_OUTPUTS = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5}
_V, _SCALE = INPUTS.index("v"), INPUTS.index("checkpoint_scale")
FP8_ALIASED_OUTPUTS = {7: _SCALE}  # aliased with an fp8 checkpoint only (spec.aliased_outputs)
LIKE_INPUT = {0: _V, 7: _SCALE}


@dataclass(frozen=True)
class GatedDeltaReplayAttrs:
    """Plugin attributes, in registration order.

    Geometry: k_heads, v_heads, head_k_dim, head_v_dim, L. Flags: per_channel (KDA),
    use_qk_l2norm. scale: multiplies q after the normalisation (the op's default is
    head_k_dim ** -0.5). Launch configuration: block_head_dim (value rows per tile), chunks,
    num_stages, num_warps. rounding_seed: -1 (round to nearest) or the seed in [0, 2^31) of
    stochastic rounding at flush (a bf16, f16 or fp8 checkpoint).
    """

    k_heads: int
    v_heads: int
    head_k_dim: int
    head_v_dim: int
    L: int
    per_channel: bool
    use_qk_l2norm: bool
    scale: float
    block_head_dim: int
    chunks: int
    num_stages: int
    num_warps: int
    rounding_seed: int = ROUNDING_OFF

    def __post_init__(self) -> None:
        owner = f"{PLUGIN} attributes"
        check_attr_fields(owner, self, max_L=MAX_L)
        if self.v_heads % self.k_heads:
            raise ValueError(f"{owner}: k_heads = {self.k_heads} must divide v_heads = {self.v_heads}")
        check_launch_attrs(
            owner,
            self,
            min_block=16,
            block_reason="the replay kernel's flush product",
            largest=max(
                self.v_heads * self.head_v_dim * self.head_k_dim,
                self.v_heads * self.L * max(self.head_v_dim, self.head_k_dim),
                self.k_heads * self.L * self.head_k_dim,
            ),
        )

    @classmethod
    def for_layer(
        cls,
        k_heads: int,
        v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        L: int,
        *,
        per_channel: bool,
        state_dtype: str = "f32",
        use_qk_l2norm: bool = True,
        scale: float = None,
        batch_hint: int = 64,
        multiprocessors: int = H200_MULTIPROCESSORS,
        rounding_seed: Optional[int] = None,
    ) -> "GatedDeltaReplayAttrs":
        """Attributes of one layer, with the op's launch configuration for ``batch_hint`` rows
        on a GPU of ``multiprocessors`` (the engine's GPU, which an AOT build need not have; by
        default the H200's, where the launch tables were tuned) and the op's default scale
        (head_k_dim ** -0.5) when ``scale`` is None; ``rounding_seed`` None is round to nearest
        (the attribute's -1)."""
        if state_dtype not in STATE_DTYPES:
            raise TypeError(f"{PLUGIN}: state_dtype is {state_dtype!r}; expected {' | '.join(STATE_DTYPES)}")
        seed = ROUNDING_OFF if rounding_seed is None else rounding_seed
        check_rounding_seed(PLUGIN, seed, state_dtype)
        cfg = gated_delta_launch_config(
            "replay_step",
            head_v_dim,
            head_k_dim,
            batch_hint * v_heads,
            TORCH_DTYPES[state_dtype],
            multiprocessors=multiprocessors,
        )
        scale = head_k_dim**-0.5 if scale is None else scale
        return cls(
            k_heads,
            v_heads,
            head_k_dim,
            head_v_dim,
            L,
            per_channel,
            use_qk_l2norm,
            scale,
            cfg.block_head_dim,
            cfg.chunks,
            cfg.num_stages,
            cfg.num_warps,
            seed,
        )

    def values(self) -> Dict[str, object]:
        return asdict(self)


ATTRS = GatedDeltaReplayAttrs


def layer_attrs(
    checkpoint_shape: Sequence[int],
    d_records_shape: Sequence[int],
    k_records_shape: Sequence[int],
    *,
    per_channel: bool,
    state_dtype: str,
    use_qk_l2norm: bool,
    scale: float,
    batch_hint: int,
    rounding_seed: Optional[int] = None,
) -> GatedDeltaReplayAttrs:
    """Attributes of a layer from its cache shapes (geometry axes must be static)."""
    named = (
        ("checkpoint", checkpoint_shape, "[num_slots, v_heads, head_v_dim, head_k_dim]"),
        ("d_records", d_records_shape, "[num_slots, v_heads, L, head_v_dim]"),
        ("k_records", k_records_shape, "[num_slots, k_heads, L, head_k_dim]"),
    )
    for name, shape, layout in named:
        if len(shape) != 4 or any(d is None or d < 1 for d in shape[1:]):
            raise ValueError(f"{PLUGIN}: {name} has shape {tuple(shape)}; expected {layout} with static geometry")
    _, v_heads, head_v_dim, head_k_dim = checkpoint_shape
    return GatedDeltaReplayAttrs.for_layer(
        k_records_shape[1],
        v_heads,
        head_k_dim,
        head_v_dim,
        d_records_shape[2],
        per_channel=per_channel,
        state_dtype=state_dtype,
        use_qk_l2norm=use_qk_l2norm,
        scale=scale,
        batch_hint=batch_hint,
        rounding_seed=rounding_seed,
    )


# An absent checkpoint_scale (any checkpoint but fp8) is replaced by slot_ids, never read.
_SUBSTITUTES = {"checkpoint_scale": "slot_ids"}


def plugin_inputs(tensors: Mapping[str, object]) -> list:
    """The plugin's input list (in :data:`INPUTS` order) from a layer's tensors; a
    checkpoint_scale that is None or absent is replaced by slot_ids.

    Raises:
        ValueError: an unknown name, or a tensor missing.
    """
    unknown = sorted(set(tensors) - set(INPUTS))
    if unknown:
        raise ValueError(f"{PLUGIN}: unknown inputs {unknown}; expected names from {', '.join(INPUTS)}")
    missing = [n for n in INPUTS if n not in _SUBSTITUTES and tensors.get(n) is None]
    if missing:
        raise ValueError(f"{PLUGIN}: missing inputs {missing}")
    return [tensors[n] if tensors.get(n) is not None else tensors[_SUBSTITUTES[n]] for n in INPUTS]


SCALE_LAYOUT = "[num_slots, v_heads, head_v_dim]"


def _layouts(a: GatedDeltaReplayAttrs, fp8: bool) -> Tuple[Tuple[str, tuple], ...]:
    hk, hv, dk, dv, L = a.k_heads, a.v_heads, a.head_k_dim, a.head_v_dim, a.L
    if a.per_channel:
        g_rec = ("[num_slots, v_heads, L, head_k_dim]", ("num_slots", hv, L, dk))
        g = ("[batch, v_heads, head_k_dim]", ("batch", hv, dk))
    else:
        g_rec = ("[num_slots, v_heads, L]", ("num_slots", hv, L))
        g = ("[batch, v_heads]", ("batch", hv))
    return (
        ("[num_slots, v_heads, head_v_dim, head_k_dim]", ("num_slots", hv, dv, dk)),
        ("[num_slots, v_heads, L, head_v_dim]", ("num_slots", hv, L, dv)),
        ("[num_slots, k_heads, L, head_k_dim]", ("num_slots", hk, L, dk)),
        g_rec,
        ("[num_slots]", ("num_slots",)),
        ("[num_slots]", ("num_slots",)),
        ("[batch, k_heads, head_k_dim]", ("batch", hk, dk)),
        ("[batch, k_heads, head_k_dim]", ("batch", hk, dk)),
        ("[batch, v_heads, head_v_dim]", ("batch", hv, dv)),
        g,
        ("[batch, v_heads]", ("batch", hv)),
        ("[batch]", ("batch",)),
        (SCALE_LAYOUT, ("num_slots", hv, dv)) if fp8 else ("[batch] (slot_ids in its place)", ("batch",)),
    )


# The plugin's name of each torch dtype a g record may have (TORCH_DTYPES reversed).
_DTYPE_NAMES_OF_TORCH = {t: n for n, t in TORCH_DTYPES.items()}


def g_records_dtype(per_channel: bool, *, state_dtype: str, record_dtype: str) -> str:
    """The g_records dtype name of a layer, by the caches' own rule
    (:meth:`trtllm_replayssm.cache.KDAReplayCache.g_record_dtype`, so that the plugin takes the
    caches the core allocates): "f16" for KDA's per-channel log-decays
    ([num_slots, v_heads, L, head_k_dim]) beside bf16 or f16 d / k records, "f32" otherwise (GDN's
    [num_slots, v_heads, L]; KDA with f32 records).

    Args:
        per_channel: a KDA layer (:attr:`GatedDeltaReplayAttrs.per_channel`).
        state_dtype: the checkpoint's, one of :data:`STATE_DTYPES` (never fp64, the one checkpoint
            dtype that changes the rule).
        record_dtype: d_records' and k_records', one of :data:`FLOATS`.
    """
    cache = KDAReplayCache if per_channel else GDNReplayCache
    return _DTYPE_NAMES_OF_TORCH[cache.g_record_dtype(TORCH_DTYPES[state_dtype], TORCH_DTYPES[record_dtype])]


def tensor_infos(
    a: GatedDeltaReplayAttrs, *, state_dtype: str, act_dtype: str, record_dtype: str = None, gate_dtype: str = "f32"
) -> Tuple[TensorInfo, ...]:
    """The inputs' :class:`TensorInfo` for a layer (batch and num_slots dynamic; checkpoint_scale
    present with an fp8 ``state_dtype``, else slot_ids in its place; g_records in
    :func:`g_records_dtype`)."""
    rec = record_dtype or act_dtype
    dtypes = dict(
        checkpoint=state_dtype,
        d_records=rec,
        k_records=rec,
        g_records=g_records_dtype(a.per_channel, state_dtype=state_dtype, record_dtype=rec),
        cursor="i32",
        arrivals="i32",
        q=act_dtype,
        k=act_dtype,
        v=act_dtype,
        g=gate_dtype,
        beta=gate_dtype,
        slot_ids="i32",
        checkpoint_scale="f32" if state_dtype == FP8 else "i32",
    )
    return tuple(
        TensorInfo(dtypes[n], len(dims), tuple(d if isinstance(d, int) else None for d in dims))
        for n, (_, dims) in zip(INPUTS, _layouts(a, state_dtype == FP8))
    )


def check_inputs(a: GatedDeltaReplayAttrs, infos: Sequence[TensorInfo]) -> None:
    """Shape and dtype inference checks of the plugin layer (the kernel validates nothing).

    Raises:
        ValueError: wrong input count, rank, static dimension, or inconsistent batch / num_slots;
            checkpoint_scale absent with an fp8 checkpoint or given with another; a
            rounding_seed with an f32 checkpoint.
        TypeError: wrong dtype (g_records: other than :func:`g_records_dtype`).
    """
    if len(infos) != len(INPUTS):
        raise ValueError(f"{PLUGIN}: got {len(infos)} inputs; expected {len(INPUTS)}: {', '.join(INPUTS)}")
    by = dict(zip(INPUTS, infos))
    check_dtype(PLUGIN, "checkpoint", by["checkpoint"], STATE_DTYPES)
    check_checkpoint_scale(PLUGIN, by["checkpoint"], by["checkpoint_scale"], SCALE_LAYOUT)
    check_rounding_seed(PLUGIN, a.rounding_seed, by["checkpoint"].dtype)
    symbols: Dict[str, int] = {}
    for name, info, (layout, dims) in zip(INPUTS, infos, _layouts(a, by["checkpoint"].dtype == FP8)):
        check_rank_and_dims(PLUGIN, name, info, layout, dims, symbols)
    check_dtype(PLUGIN, "d_records", by["d_records"], FLOATS)
    check_dtype(PLUGIN, "k_records", by["k_records"], (by["d_records"].dtype,))
    rec = by["d_records"].dtype
    want_g = g_records_dtype(a.per_channel, state_dtype=by["checkpoint"].dtype, record_dtype=rec)
    why = f"the caches' g record dtype for {'KDA' if a.per_channel else 'GDN'} with {rec} records"
    check_dtype(PLUGIN, "g_records", by["g_records"], (want_g,), why=why)
    check_dtype(PLUGIN, "q", by["q"], FLOATS)
    for name in ("k", "v"):
        check_dtype(PLUGIN, name, by[name], (by["q"].dtype,))
    for name in ("g", "beta"):
        check_dtype(PLUGIN, name, by[name], FLOATS)
    for name in ("cursor", "arrivals", "slot_ids"):
        check_dtype(PLUGIN, name, by[name], ("i32",))


def _scalars(a: GatedDeltaReplayAttrs) -> Tuple[Scalar, ...]:
    """The entry kernel's scalars, in its parameter order (strides of dense tensors)."""
    hk, hv, dk, dv, L = a.k_heads, a.v_heads, a.head_k_dim, a.head_v_dim, a.L
    ch = dk if a.per_channel else 1  # trailing extent of g_records and g
    values = dict(
        num_slots=InputDim(INPUTS.index("checkpoint"), 0),
        stride_c_slot=hv * dv * dk,
        stride_c_head=dv * dk,
        stride_c_row=dk,
        stride_sc_slot=hv * dv,  # checkpoint_scale (dense); never read without fp8
        stride_sc_head=dv,
        stride_dr_slot=hv * L * dv,
        stride_dr_head=L * dv,
        stride_dr_pos=dv,
        stride_kr_slot=hk * L * dk,
        stride_kr_head=L * dk,
        stride_kr_pos=dk,
        stride_gr_slot=hv * L * ch,
        stride_gr_head=L * ch,
        stride_gr_pos=ch,
        stride_q_batch=hk * dk,
        stride_q_head=dk,
        stride_k_batch=hk * dk,
        stride_k_head=dk,
        stride_v_batch=hv * dv,
        stride_v_head=dv,
        stride_g_batch=hv * ch,
        stride_g_head=ch,
        stride_beta_batch=hv,
        stride_beta_head=1,
        stride_o_batch=hv * dv,
        stride_o_head=dv,
        head_v_dim=dv,
        head_k_dim=dk,
        v_per_k=hv // hk,
        sr_seed=max(a.rounding_seed, 0),  # read only with SR
    )
    return tuple(Scalar(n, v) for n, v in values.items())


def _constexprs(a: GatedDeltaReplayAttrs, state_dtype: str) -> Dict[str, object]:
    """Constexprs as ``launch_gated_delta_replay_step`` passes them, and the scale."""
    cfg = LaunchConfig(a.block_head_dim, a.num_warps, a.chunks, a.num_stages)
    return dict(
        SCALE=a.scale,
        **replay_constexprs(a.L, a.head_k_dim, a.per_channel, a.use_qk_l2norm, cfg),
        HAS_SCALE=state_dtype == FP8,
        SR=a.rounding_seed != ROUNDING_OFF,
    )


def kernel_spec(a: GatedDeltaReplayAttrs, infos: Sequence[TensorInfo]) -> KernelSpec:
    """The entry kernel's specialization and launch; ``infos`` passed :func:`check_inputs`. An
    fp8 checkpoint compiles with HAS_SCALE, a ``rounding_seed`` with SR (seed: ``sr_seed``)."""
    dtypes = [i.dtype for i in infos]
    words = (
        f"{'kda' if a.per_channel else 'gdn'}_s{dtypes[0]}_r{dtypes[1]}_a{dtypes[6]}"
        f"_hk{a.k_heads}_hv{a.v_heads}_dk{a.head_k_dim}_dv{a.head_v_dim}_L{a.L}"
        f"{'_l2' if a.use_qk_l2norm else ''}{'_sr' if a.rounding_seed != ROUNDING_OFF else ''}"
        f"_bh{a.block_head_dim}x{a.chunks}_st{a.num_stages}_w{a.num_warps}"
    )
    return build_kernel_spec(
        PLUGIN,
        words,
        ENTRY.arg_names,
        dtypes,
        [dtypes[{**LIKE_INPUT, **ALIASED_OUTPUTS}[o]] for o in range(len(OUTPUTS))],
        _scalars(a),
        _constexprs(a, dtypes[0]),
        (triton.cdiv(a.head_v_dim, a.block_head_dim * a.chunks), a.v_heads, InputDim(_V, 0)),
        a.num_warps,
    )


def compile_kernel(spec: KernelSpec, arch: int) -> CompiledKernel:
    """The entry kernel's PTX for ``sm_{arch}`` (:func:`~trtllm_replayssm_plugins.ptx.compile_ptx`)."""
    return compile_ptx(spec, ENTRY, arch)


def run_op(a: GatedDeltaReplayAttrs, inputs: Sequence[torch.Tensor], out: torch.Tensor) -> None:
    """The layer through the ``replayssm::gated_delta_replay_step`` custom op (TensorRT's JIT
    path): ``inputs`` in plugin order, ``out`` the o buffer; caches (and an fp8 checkpoint's
    scales) updated in place."""
    fp8 = inputs[0].dtype == torch.float8_e4m3fn
    torch.ops.replayssm.gated_delta_replay_step(
        *inputs[:_SCALE],
        a.scale,
        a.use_qk_l2norm,
        out,
        inputs[_SCALE] if fp8 else None,
        None if a.rounding_seed == ROUNDING_OFF else a.rounding_seed,
    )
