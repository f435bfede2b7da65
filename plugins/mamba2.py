"""The ``replayssm::mamba2_replay_step`` plugin as plain data: inputs, attributes, shape rules,
the entry kernel's specialization, scalars and grid. No TensorRT here.

Plugin inputs (all always present; an absent optional is replaced by the tensor the op's
launcher substitutes, and its flag is off: z -> x, D -> A, dt_bias -> A; checkpoint_scale ->
slot_ids, present exactly when the checkpoint is fp8):

    0 checkpoint  [num_slots, nheads, head_dim, d_state]   f32 | bf16 | f16 | fp8 (e4m3)
    1 x_records   [num_slots, nheads, L, head_dim]         act (f32 | bf16 | f16)
    2 dt_records  [num_slots, nheads, L]                   f32
    3 B_records   [num_slots, ngroups, L, d_state]         act
    4 cursor      [num_slots]                              i32
    5 arrivals    [num_slots]                              i32, zero between launches
    6 x           [batch, nheads, head_dim]                act
    7 dt          [batch, nheads]                          f32 | bf16 | f16, raw
    8 A           [nheads]                                 f32, negative
    9 B          [batch, ngroups, d_state]                 act
   10 C          [batch, ngroups, d_state]                 act
   11 slot_ids   [batch]                                   i32; < 0: padding row
   12 D          [nheads] | [nheads, head_dim]             f32 | act
   13 z          [batch, nheads, head_dim]                 act
   14 dt_bias    [nheads]                                  f32 | act
   15 checkpoint_scale [num_slots, nheads, head_dim]       f32: an fp8 checkpoint's row scales

Plugin outputs: 0 out (y, like x; padding and skipped rows are not written, so they hold
whatever the buffer held), then 1..6 the cache tensors 0..5, aliased (updated in place), then
7 checkpoint_scale: aliased to input 15 with an fp8 checkpoint (a flush rewrites its rows'
scales); otherwise a buffer like slot_ids that nothing writes.

Attributes: the layer geometry (checked against the static dimensions of the inputs), the
flags, the launch configuration of the replay kernel (``LaunchConfig``), which TensorRT
cannot choose per batch the way the op does (:meth:`Mamba2ReplayAttrs.for_layer` takes it from
the op's heuristic for an expected batch), and ``rounding_seed``: -1, or the seed of stochastic
rounding at flush (bf16, f16 and fp8 checkpoints; the kernel's ``sr_seed``, an int32 scalar of
the launch, so one PTX serves every seed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch
import triton

import trtllm_replayssm.ops  # noqa: F401 - registers torch.ops.replayssm.* (run_op)

from trtllm_replayssm.cache import MAX_L
from trtllm_replayssm.kernels.common import mamba2_launch_config
from trtllm_replayssm.kernels.mamba2_replay import fold_constexprs

from .mamba2_entry import _mamba2_replay_step_plugin_kernel as ENTRY
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
    "Mamba2ReplayAttrs",
    "check_inputs",
    "compile_kernel",
    "input_layouts",
    "kernel_spec",
    "layer_attrs",
    "plugin_inputs",
    "run_op",
    "tensor_infos",
    "step_scalars",
]

PLUGIN = "mamba2_replay_step"
INPUTS = (
    "checkpoint",
    "x_records",
    "dt_records",
    "B_records",
    "cursor",
    "arrivals",
    "x",
    "dt",
    "A",
    "B",
    "C",
    "slot_ids",
    "D",
    "z",
    "dt_bias",
    "checkpoint_scale",
)
OUTPUTS = ("out", "checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals", "checkpoint_scale")
# output index -> input index it aliases; output 0 (y) is a new tensor shaped like x.
ALIASED_OUTPUTS = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5}
_X, _SCALE = INPUTS.index("x"), INPUTS.index("checkpoint_scale")
FP8_ALIASED_OUTPUTS = {7: _SCALE}  # aliased with an fp8 checkpoint only (spec.aliased_outputs)
LIKE_INPUT = {0: _X, 7: _SCALE}  # output index -> input whose shape and dtype it takes


@dataclass(frozen=True)
class Mamba2ReplayAttrs:
    """Plugin attributes (TensorRT plugin fields), in registration order.

    Geometry: nheads, head_dim, d_state, ngroups, L. Flags: has_D, has_z, has_dt_bias,
    dt_softplus. Launch configuration (see ``trtllm_replayssm.kernels.common.LaunchConfig``):
    block_head_dim, chunks, num_stages, num_warps. rounding_seed: -1 (round to nearest) or the
    seed in [0, 2^31) of stochastic rounding at flush (a bf16, f16 or fp8 checkpoint).
    """

    nheads: int
    head_dim: int
    d_state: int
    ngroups: int
    L: int
    has_D: bool
    has_z: bool
    has_dt_bias: bool
    dt_softplus: bool
    block_head_dim: int
    chunks: int
    num_stages: int
    num_warps: int
    rounding_seed: int = ROUNDING_OFF

    def __post_init__(self) -> None:
        owner = f"{PLUGIN} attributes"
        check_attr_fields(owner, self, max_L=MAX_L)
        if self.nheads % self.ngroups:
            raise ValueError(f"{owner}: ngroups = {self.ngroups} must divide nheads = {self.nheads}")
        check_launch_attrs(
            owner,
            self,
            largest=max(
                self.nheads * self.head_dim * self.d_state,
                self.nheads * self.L * self.head_dim,
                self.ngroups * self.L * self.d_state,
            ),
        )

    @classmethod
    def for_layer(
        cls,
        nheads: int,
        head_dim: int,
        d_state: int,
        ngroups: int,
        L: int,
        *,
        state_dtype: str = "f32",
        has_D: bool = True,
        has_z: bool = False,
        has_dt_bias: bool = True,
        dt_softplus: bool = True,
        batch_hint: int = 64,
        rounding_seed: Optional[int] = None,
    ) -> "Mamba2ReplayAttrs":
        """Attributes of one layer, with the op's launch configuration for ``batch_hint`` rows;
        ``rounding_seed`` None is round to nearest (the attribute's -1)."""
        if state_dtype not in STATE_DTYPES:
            raise TypeError(f"{PLUGIN}: state_dtype is {state_dtype!r}; expected {' | '.join(STATE_DTYPES)}")
        seed = ROUNDING_OFF if rounding_seed is None else rounding_seed
        check_rounding_seed(PLUGIN, seed, state_dtype)
        cfg = mamba2_launch_config("replay_step", head_dim, d_state, batch_hint, TORCH_DTYPES[state_dtype])
        return cls(
            nheads,
            head_dim,
            d_state,
            ngroups,
            L,
            has_D,
            has_z,
            has_dt_bias,
            dt_softplus,
            cfg.block_head_dim,
            cfg.chunks,
            cfg.num_stages,
            cfg.num_warps,
            seed,
        )

    def values(self) -> Dict[str, object]:
        """Attribute name -> value, in registration order (TensorRT plugin fields)."""
        return asdict(self)


ATTRS = Mamba2ReplayAttrs


def layer_attrs(
    checkpoint_shape: Sequence[int],
    x_records_shape: Sequence[int],
    B_records_shape: Sequence[int],
    *,
    state_dtype: str,
    has_D: bool,
    has_z: bool,
    has_dt_bias: bool,
    dt_softplus: bool,
    batch_hint: int,
    rounding_seed: Optional[int] = None,
) -> Mamba2ReplayAttrs:
    """Attributes of a layer from its cache shapes (geometry axes must be static)."""
    named = (
        ("checkpoint", checkpoint_shape, "[num_slots, nheads, head_dim, d_state]"),
        ("x_records", x_records_shape, "[num_slots, nheads, L, head_dim]"),
        ("B_records", B_records_shape, "[num_slots, ngroups, L, d_state]"),
    )
    for name, shape, layout in named:
        if len(shape) != 4 or any(d is None or d < 1 for d in shape[1:]):
            raise ValueError(f"{PLUGIN}: {name} has shape {tuple(shape)}; expected {layout} with static geometry")
    _, nheads, head_dim, d_state = checkpoint_shape
    return Mamba2ReplayAttrs.for_layer(
        nheads,
        head_dim,
        d_state,
        B_records_shape[1],
        x_records_shape[2],
        state_dtype=state_dtype,
        has_D=has_D,
        has_z=has_z,
        has_dt_bias=has_dt_bias,
        dt_softplus=dt_softplus,
        batch_hint=batch_hint,
        rounding_seed=rounding_seed,
    )


# The op's launcher passes these for an absent optional tensor; the plugin does the same. An
# absent checkpoint_scale (any checkpoint but fp8) has no flag: the checkpoint's dtype says it.
_FLAGGED = {"D": "A", "z": "x", "dt_bias": "A"}
_SUBSTITUTES = {**_FLAGGED, "checkpoint_scale": "slot_ids"}


def plugin_inputs(tensors: Mapping[str, object]) -> Tuple[list, Dict[str, bool]]:
    """The plugin's input list (in :data:`INPUTS` order) from a layer's tensors, and the
    ``has_D`` / ``has_z`` / ``has_dt_bias`` flags. An optional that is None or absent is
    replaced by its substitute (D, dt_bias -> A; z -> x; checkpoint_scale -> slot_ids) and its
    flag is off.

    Raises:
        ValueError: an unknown name, or a required tensor missing.
    """
    unknown = sorted(set(tensors) - set(INPUTS))
    if unknown:
        raise ValueError(f"{PLUGIN}: unknown inputs {unknown}; expected names from {', '.join(INPUTS)}")
    missing = [n for n in INPUTS if n not in _SUBSTITUTES and tensors.get(n) is None]
    if missing:
        raise ValueError(f"{PLUGIN}: missing inputs {missing}")
    flags = {f"has_{n}": tensors.get(n) is not None for n in _FLAGGED}
    return [tensors[n] if tensors.get(n) is not None else tensors[_SUBSTITUTES[n]] for n in INPUTS], flags


SCALE_LAYOUT = "[num_slots, nheads, head_dim]"


def _layouts(a: Mamba2ReplayAttrs, d_per_dim: bool, fp8: bool) -> Tuple[Tuple[str, tuple], ...]:
    """Per input: (layout words, expected dims: ints for geometry, names for dynamic dims)."""
    nh, hd, ds, ng, L = a.nheads, a.head_dim, a.d_state, a.ngroups, a.L
    z = ("[batch, nheads, head_dim]", ("batch", nh, hd))
    scale = (SCALE_LAYOUT, ("num_slots", nh, hd)) if fp8 else ("[batch] (slot_ids in its place)", ("batch",))
    return (
        ("[num_slots, nheads, head_dim, d_state]", ("num_slots", nh, hd, ds)),
        ("[num_slots, nheads, L, head_dim]", ("num_slots", nh, L, hd)),
        ("[num_slots, nheads, L]", ("num_slots", nh, L)),
        ("[num_slots, ngroups, L, d_state]", ("num_slots", ng, L, ds)),
        ("[num_slots]", ("num_slots",)),
        ("[num_slots]", ("num_slots",)),
        ("[batch, nheads, head_dim]", ("batch", nh, hd)),
        ("[batch, nheads]", ("batch", nh)),
        ("[nheads]", (nh,)),
        ("[batch, ngroups, d_state]", ("batch", ng, ds)),
        ("[batch, ngroups, d_state]", ("batch", ng, ds)),
        ("[batch]", ("batch",)),
        ("[nheads, head_dim]", (nh, hd)) if d_per_dim else ("[nheads]", (nh,)),
        z,
        ("[nheads]", (nh,)),
        scale,
    )


def input_layouts(a, d_per_dim: bool, fp8: bool) -> Dict[str, Tuple[str, tuple]]:
    """Per input name: (layout words, expected dims) for a layer ``a`` (anything with nheads,
    head_dim, d_state, ngroups and L: the CUDA plugin layers share these layouts)."""
    return dict(zip(INPUTS, _layouts(a, d_per_dim, fp8)))


def _d_per_dim(a: Mamba2ReplayAttrs, infos: Sequence[TensorInfo]) -> bool:
    return a.has_D and infos[INPUTS.index("D")].rank == 2


def tensor_infos(
    a: Mamba2ReplayAttrs,
    *,
    state_dtype: str,
    act_dtype: str,
    dt_dtype: str = "f32",
    param_dtype: str = "f32",
    d_per_dim: bool = False,
) -> Tuple[TensorInfo, ...]:
    """The inputs' :class:`TensorInfo` for a layer (batch and num_slots dynamic), with the
    substitutes of absent optionals (checkpoint_scale present with an fp8 ``state_dtype``);
    what TensorRT shows the plugin at build time."""
    dtypes = dict(
        checkpoint=state_dtype,
        x_records=act_dtype,
        dt_records="f32",
        B_records=act_dtype,
        cursor="i32",
        arrivals="i32",
        x=act_dtype,
        dt=dt_dtype,
        A="f32",
        B=act_dtype,
        C=act_dtype,
        slot_ids="i32",
        D=param_dtype if a.has_D else "f32",
        z=act_dtype,
        dt_bias=param_dtype if a.has_dt_bias else "f32",
        checkpoint_scale="f32" if state_dtype == FP8 else "i32",
    )
    layouts = _layouts(a, a.has_D and d_per_dim, state_dtype == FP8)
    return tuple(
        TensorInfo(dtypes[n], len(dims), tuple(d if isinstance(d, int) else None for d in dims))
        for n, (_, dims) in zip(INPUTS, layouts)
    )


def check_inputs(a: Mamba2ReplayAttrs, infos: Sequence[TensorInfo]) -> None:
    """Shape and dtype inference checks of the plugin layer (the kernel validates nothing).

    Raises:
        ValueError: wrong input count, rank, static dimension, or inconsistent batch / num_slots;
            checkpoint_scale absent with an fp8 checkpoint or given with another; a
            rounding_seed with an f32 checkpoint.
        TypeError: wrong dtype.
    """
    if len(infos) != len(INPUTS):
        raise ValueError(f"{PLUGIN}: got {len(infos)} inputs; expected {len(INPUTS)}: {', '.join(INPUTS)}")
    by = dict(zip(INPUTS, infos))
    check_dtype(PLUGIN, "checkpoint", by["checkpoint"], STATE_DTYPES)
    check_checkpoint_scale(PLUGIN, by["checkpoint"], by["checkpoint_scale"], SCALE_LAYOUT)
    check_rounding_seed(PLUGIN, a.rounding_seed, by["checkpoint"].dtype)
    d_per_dim = _d_per_dim(a, infos)
    symbols: Dict[str, int] = {}
    for name, info, (layout, dims) in zip(INPUTS, infos, _layouts(a, d_per_dim, by["checkpoint"].dtype == FP8)):
        check_rank_and_dims(PLUGIN, name, info, layout, dims, symbols)
    act = by["x_records"].dtype
    check_dtype(PLUGIN, "x_records", by["x_records"], FLOATS)
    for name in ("B_records", "x", "B", "C", "z"):
        check_dtype(PLUGIN, name, by[name], (act,))
    for name in ("dt_records", "A"):
        check_dtype(PLUGIN, name, by[name], ("f32",))
    for name in ("cursor", "arrivals", "slot_ids"):
        check_dtype(PLUGIN, name, by[name], ("i32",))
    check_dtype(PLUGIN, "dt", by["dt"], FLOATS)
    for name in ("D", "dt_bias"):
        check_dtype(PLUGIN, name, by[name], tuple(dict.fromkeys(("f32", act))))


def _scalars(a: Mamba2ReplayAttrs, d_per_dim: bool) -> Tuple[Scalar, ...]:
    """The entry kernel's scalars, in its parameter order. Strides are those of dense
    (contiguous) tensors, which is what TensorRT passes and what the op requires of caches."""
    nh, hd, ds, ng, L = a.nheads, a.head_dim, a.d_state, a.ngroups, a.L
    values = dict(
        num_slots=InputDim(INPUTS.index("checkpoint"), 0),
        stride_c_slot=nh * hd * ds,
        stride_c_head=hd * ds,
        stride_c_dim=ds,
        stride_sc_slot=nh * hd,  # checkpoint_scale (dense); never read without fp8
        stride_sc_head=hd,
        stride_xr_slot=nh * L * hd,
        stride_xr_head=L * hd,
        stride_xr_pos=hd,
        stride_dtr_slot=nh * L,
        stride_dtr_head=L,
        stride_Br_slot=ng * L * ds,
        stride_Br_group=L * ds,
        stride_Br_pos=ds,
        **step_scalars(nh, hd, ds, ng, d_per_dim),
        sr_seed=max(a.rounding_seed, 0),  # read only with SR
    )
    return tuple(Scalar(n, v) for n, v in values.items())


def step_scalars(nh: int, hd: int, ds: int, ng: int, d_per_dim: bool) -> Dict[str, int]:
    """The replay entry kernels' scalars after the cache strides, in parameter order: the strides
    of dense step inputs (x, z, out [tokens, nheads, head_dim]; dt [tokens, nheads]; D; B, C
    [tokens, ngroups, d_state]) and the geometry."""
    return dict(
        stride_x_batch=nh * hd,
        stride_x_head=hd,
        stride_z_batch=nh * hd,
        stride_z_head=hd,
        stride_o_batch=nh * hd,
        stride_o_head=hd,
        stride_dt_batch=nh,
        stride_dt_head=1,
        stride_D_head=hd if d_per_dim else 1,
        stride_B_batch=ng * ds,
        stride_B_group=ds,
        stride_C_batch=ng * ds,
        stride_C_group=ds,
        head_dim=hd,
        d_state=ds,
        heads_per_group=nh // ng,
    )


def _constexprs(a: Mamba2ReplayAttrs, d_per_dim: bool, state_dtype: str) -> Dict[str, object]:
    """Constexprs as ``launch_mamba2_replay_step`` passes them for this configuration."""
    return dict(
        L=a.L,
        BLOCK_L=max(16, triton.next_power_of_2(a.L)),
        BLOCK_HEAD_DIM=a.block_head_dim,
        SPAN_HEAD_DIM=a.block_head_dim * a.chunks,
        BLOCK_D_STATE=triton.next_power_of_2(a.d_state),
        NUM_STAGES=a.num_stages,
        **fold_constexprs(a.d_state, TORCH_DTYPES[state_dtype]),
        HAS_D=a.has_D,
        D_PER_DIM=d_per_dim,
        HAS_Z=a.has_z,
        HAS_DT_BIAS=a.has_dt_bias,
        DT_SOFTPLUS=a.dt_softplus,
    )


def kernel_spec(a: Mamba2ReplayAttrs, infos: Sequence[TensorInfo]) -> KernelSpec:
    """The entry kernel's specialization for these attributes and input dtypes/ranks, and how
    TensorRT launches it. ``infos`` must have passed :func:`check_inputs`. An fp8 checkpoint
    compiles with HAS_SCALE (rows loaded times their scale, a flush stores codes and new
    scales), a ``rounding_seed`` with SR (the seed is the runtime scalar ``sr_seed``)."""
    d_per_dim = _d_per_dim(a, infos)
    dtypes = [i.dtype for i in infos]
    sr = a.rounding_seed != ROUNDING_OFF
    flags = "".join(
        c for c, on in (("D", a.has_D), ("P", d_per_dim), ("z", a.has_z), ("b", a.has_dt_bias), ("s", a.dt_softplus)) if on
    )
    words = (
        f"s{dtypes[0]}_a{dtypes[1]}_nh{a.nheads}_hd{a.head_dim}_ds{a.d_state}_g{a.ngroups}"
        f"_L{a.L}_{flags or 'none'}{'_sr' if sr else ''}_bh{a.block_head_dim}x{a.chunks}_st{a.num_stages}_w{a.num_warps}"
    )
    return build_kernel_spec(
        PLUGIN,
        words,
        ENTRY.arg_names,
        dtypes,
        [dtypes[{**LIKE_INPUT, **ALIASED_OUTPUTS}[o]] for o in range(len(OUTPUTS))],
        _scalars(a, d_per_dim),
        dict(_constexprs(a, d_per_dim, dtypes[0]), HAS_SCALE=dtypes[0] == FP8, SR=sr),
        (triton.cdiv(a.head_dim, a.block_head_dim * a.chunks), a.nheads, InputDim(_X, 0)),
        a.num_warps,
    )


def compile_kernel(spec: KernelSpec, arch: int) -> CompiledKernel:
    """The entry kernel's PTX for ``sm_{arch}`` (:func:`~trtllm_replayssm_plugins.ptx.compile_ptx`)."""
    return compile_ptx(spec, ENTRY, arch)


def run_op(a: Mamba2ReplayAttrs, inputs: Sequence[torch.Tensor], out: torch.Tensor) -> None:
    """The layer through the ``replayssm::mamba2_replay_step`` custom op (TensorRT's JIT path):
    ``inputs`` in plugin order (torch views of the TensorRT buffers), ``out`` the y buffer.
    The caches (and an fp8 checkpoint's scales) are updated in place, as the aliased outputs
    require."""
    t = dict(zip(INPUTS, inputs))
    torch.ops.replayssm.mamba2_replay_step(
        t["checkpoint"],
        t["x_records"],
        t["dt_records"],
        t["B_records"],
        t["cursor"],
        t["arrivals"],
        t["x"],
        t["dt"],
        t["A"],
        t["B"],
        t["C"],
        t["slot_ids"],
        t["D"] if a.has_D else None,
        t["z"] if a.has_z else None,
        t["dt_bias"] if a.has_dt_bias else None,
        a.dt_softplus,
        out,
        t["checkpoint_scale"] if t["checkpoint"].dtype == torch.float8_e4m3fn else None,
        None if a.rounding_seed == ROUNDING_OFF else a.rounding_seed,
    )
