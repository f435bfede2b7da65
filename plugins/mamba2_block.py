"""The ``replayssm::mamba2_replay_block`` plugin as plain data: the Mamba-2 replay step on the
state block of :mod:`trtllm_replayssm.block`, reached through one pointer. No TensorRT here.

This is the generation-phase layer of a TensorRT-LLM engine-path ``Mamba2`` rewritten by
``trtllm_replayssm_builders.trtllm_engine``: the runtime hands each SSM layer one state buffer
(``rnn_state_ptr_<i>``, the address of ``[num_slots, ...]`` fp32), and this plugin finds the
checkpoint, records and cursors of every slot inside it. In a context step it only converts the
states that the stock plugin left into replay checkpoints (:mod:`.mamba2_block_entry`).

Plugin inputs:

    0 state_ptr  [1]                           i64: device-readable address of the layer buffer
    1 x          [tokens, nheads, head_dim]    act (f32 | bf16 | f16)
    2 dt         [tokens, nheads]              f32 | act, raw
    3 A          [nheads]                      f32, negative
    4 B          [tokens, ngroups, d_state]    act
    5 C          [tokens, ngroups, d_state]    act
    6 slot_ids   [batch]                       i32 (TensorRT-LLM's slot_mapping); < 0: padding
    7 D          [nheads] | [nheads, head_dim] f32 | act   (absent: A, flag off)
    8 z          [tokens, nheads, head_dim]    act         (absent: x)
    9 dt_bias    [nheads]                      f32 | act   (absent: A)

Output 0: y like x, written in generation steps (tokens == batch) for live rows only.

Attributes: those of ``replayssm::mamba2_replay_step`` (:class:`.mamba2.Mamba2ReplayAttrs`:
geometry, L, flags, launch configuration) plus ``num_slots`` (the runtime's slots per layer
buffer: where the tails start) and the activation dtype of the records. The checkpoint is fp32
(the runtime's buffer), so there is no fp8 checkpoint here and ``rounding_seed`` must be -1
(stochastic rounding takes a bf16, f16 or fp8 checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import triton

from trtllm_replayssm.block import ACT_DTYPES, Mamba2StateBlock

from .mamba2 import Mamba2ReplayAttrs, _constexprs, step_scalars
from .mamba2_block_entry import _mamba2_replay_block_plugin_kernel as ENTRY
from .spec import (
    FLOATS,
    InputDim,
    KernelSpec,
    Scalar,
    TensorInfo,
    build_kernel_spec,
    check_dtype,
    check_rank_and_dims,
    check_rounding_seed,
)

__all__ = [
    "PLUGIN",
    "INPUTS",
    "OUTPUTS",
    "LIKE_INPUT",
    "ENTRY",
    "ROW_STRIDES",
    "Mamba2BlockAttrs",
    "check_inputs",
    "kernel_spec",
]

PLUGIN = "mamba2_replay_block"
INPUTS = ("state_ptr", "x", "dt", "A", "B", "C", "slot_ids", "D", "z", "dt_bias")
OUTPUTS = ("out",)
_X, _SLOTS = INPUTS.index("x"), INPUTS.index("slot_ids")
LIKE_INPUT = {0: _X}


@dataclass(frozen=True)
class Mamba2BlockAttrs:
    """Plugin attributes: the replay step's, plus the layer buffer's slot count and act dtype."""

    replay: Mamba2ReplayAttrs
    num_slots: int
    act_dtype: str

    def __post_init__(self) -> None:
        if not isinstance(self.replay, Mamba2ReplayAttrs):
            raise TypeError(f"{PLUGIN}: replay is {type(self.replay).__name__}; expected Mamba2ReplayAttrs")
        if not isinstance(self.num_slots, int) or isinstance(self.num_slots, bool) or self.num_slots < 1:
            raise ValueError(f"{PLUGIN}: num_slots is {self.num_slots!r}; expected a positive int")
        if self.act_dtype not in ACT_DTYPES:
            raise TypeError(f"{PLUGIN}: act_dtype is {self.act_dtype!r}; expected {' | '.join(ACT_DTYPES)}")
        check_rounding_seed(PLUGIN, self.replay.rounding_seed, "f32")  # the layer buffer's checkpoint
        self.block  # noqa: B018  (checks the layout)

    @property
    def block(self) -> Mamba2StateBlock:
        r = self.replay
        return Mamba2StateBlock(r.nheads, r.head_dim, r.d_state, r.ngroups, r.L, self.act_dtype)

    def values(self) -> Dict[str, object]:
        """Attribute name -> value (TensorRT plugin fields): the replay step's, then these."""
        return {**self.replay.values(), "num_slots": self.num_slots, "act_dtype": self.act_dtype}


def _layouts(a: Mamba2BlockAttrs, d_per_dim: bool) -> Tuple[Tuple[str, tuple], ...]:
    r = a.replay
    nh, hd, ds, ng = r.nheads, r.head_dim, r.d_state, r.ngroups
    x = ("[tokens, nheads, head_dim]", ("tokens", nh, hd))
    return (
        ("[1]", (1,)),
        x,
        ("[tokens, nheads]", ("tokens", nh)),
        ("[nheads]", (nh,)),
        ("[tokens, ngroups, d_state]", ("tokens", ng, ds)),
        ("[tokens, ngroups, d_state]", ("tokens", ng, ds)),
        ("[batch]", ("batch",)),
        ("[nheads, head_dim]", (nh, hd)) if d_per_dim else ("[nheads]", (nh,)),
        x,
        ("[nheads]", (nh,)),
    )


def _d_per_dim(a: Mamba2BlockAttrs, infos: Sequence[TensorInfo]) -> bool:
    return a.replay.has_D and infos[INPUTS.index("D")].rank == 2


def check_inputs(a: Mamba2BlockAttrs, infos: Sequence[TensorInfo]) -> None:
    """Shape and dtype checks of the plugin layer (the kernel validates nothing).

    Raises:
        ValueError: wrong input count, rank or static dimension, inconsistent tokens / batch.
        TypeError: wrong dtype (x, B, C, z must be ``act_dtype``).
    """
    if len(infos) != len(INPUTS):
        raise ValueError(f"{PLUGIN}: got {len(infos)} inputs; expected {len(INPUTS)}: {', '.join(INPUTS)}")
    symbols: Dict[str, int] = {}
    for name, info, (layout, dims) in zip(INPUTS, infos, _layouts(a, _d_per_dim(a, infos))):
        check_rank_and_dims(PLUGIN, name, info, layout, dims, symbols)
    by = dict(zip(INPUTS, infos))
    check_dtype(PLUGIN, "state_ptr", by["state_ptr"], ("i64",))
    for name in ("x", "B", "C", "z"):
        check_dtype(PLUGIN, name, by[name], (a.act_dtype,))
    check_dtype(PLUGIN, "dt", by["dt"], FLOATS)
    check_dtype(PLUGIN, "A", by["A"], ("f32",))
    check_dtype(PLUGIN, "slot_ids", by["slot_ids"], ("i32",))
    for name in ("D", "dt_bias"):
        check_dtype(PLUGIN, name, by[name], tuple(dict.fromkeys(("f32", a.act_dtype))))


# Row strides of the step tensors (elements) that a caller may set: the engine flow reads x, B, C
# from the fused conv output and z, dt from the fused in_proj output (builders.trtllm_engine).
ROW_STRIDES = ("stride_x_batch", "stride_z_batch", "stride_dt_batch", "stride_B_batch", "stride_C_batch")


def _scalars(a: Mamba2BlockAttrs, d_per_dim: bool, row_strides: Mapping[str, int]) -> Tuple[Scalar, ...]:
    """The entry's scalars in its parameter order: cache strides from the block layout, step
    strides of dense tensors unless ``row_strides`` names them."""
    r, b = a.replay, a.block
    nh, hd, ds, ng = r.nheads, r.head_dim, r.d_state, r.ngroups
    values = dict(
        num_tokens=InputDim(_X, 0),
        batch=InputDim(_SLOTS, 0),
        num_slots=a.num_slots,
        stride_c_slot=b.slot_stride("checkpoint"),
        stride_c_head=hd * ds,
        stride_c_dim=ds,
        stride_xr_slot=b.slot_stride("x_records"),
        stride_xr_head=r.L * hd,
        stride_xr_pos=hd,
        stride_dtr_slot=b.slot_stride("dt_records"),
        stride_dtr_head=r.L,
        stride_Br_slot=b.slot_stride("B_records"),
        stride_Br_group=r.L * ds,
        stride_Br_pos=ds,
        **step_scalars(nh, hd, ds, ng, d_per_dim),
    )
    unknown = sorted(set(row_strides) - set(ROW_STRIDES))
    if unknown:
        raise ValueError(f"{PLUGIN}: row_strides names {unknown}; expected names from {', '.join(ROW_STRIDES)}")
    for name, value in row_strides.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{PLUGIN}: row_strides[{name!r}] is {value!r}; expected a positive int")
    values.update(row_strides)
    return tuple(Scalar(n, v) for n, v in values.items())


def kernel_spec(
    a: Mamba2BlockAttrs, infos: Sequence[TensorInfo], row_strides: Optional[Mapping[str, int]] = None
) -> KernelSpec:
    """The entry kernel's specialization and launch; ``infos`` passed :func:`check_inputs`.
    ``row_strides``: step-tensor row strides (:data:`ROW_STRIDES`) of non-dense inputs."""
    r, b = a.replay, a.block
    d_per_dim = _d_per_dim(a, infos)
    dtypes = [i.dtype for i in infos]
    constexprs = dict(
        STATE_BYTES=b.state_bytes,
        TAIL_I32=b.tail_bytes // 4,
        **{f"OFF_{k}": b.region(n).offset for k, n in (("DTR", "dt_records"), ("CUR", "cursor"), ("ARR", "arrivals"))},
        OFF_PEND=b.region("pending").offset,
        OFF_XR=b.region("x_records").offset,
        OFF_BR=b.region("B_records").offset,
        BLOCK_HEAD_DIM_ALL=triton.next_power_of_2(r.head_dim),
        **_constexprs(r, d_per_dim, "f32"),
    )
    flags = "".join(
        c for c, on in (("D", r.has_D), ("P", d_per_dim), ("z", r.has_z), ("b", r.has_dt_bias), ("s", r.dt_softplus)) if on
    )
    words = (
        f"a{a.act_dtype}_nh{r.nheads}_hd{r.head_dim}_ds{r.d_state}_g{r.ngroups}_L{r.L}_n{a.num_slots}"
        f"_{flags or 'none'}_bh{r.block_head_dim}x{r.chunks}_st{r.num_stages}_w{r.num_warps}"
    )
    return build_kernel_spec(
        PLUGIN,
        words,
        ENTRY.arg_names,
        dtypes,
        [dtypes[_X]],
        _scalars(a, d_per_dim, row_strides or {}),
        constexprs,
        (triton.cdiv(r.head_dim, r.block_head_dim * r.chunks), r.nheads, InputDim(_SLOTS, 0)),
        r.num_warps,
    )
