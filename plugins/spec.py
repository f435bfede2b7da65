"""What a TensorRT AOT plugin layer launches, as plain data: no TensorRT, no GPU.

TensorRT's Python AOT plugins (``tensorrt.plugin.aot_impl``, TensorRT >= 10.9) launch exactly
one kernel per plugin layer, with the kernel parameters in a fixed order:

    input tensor pointers (plugin input order), scalar arguments, output tensor pointers

and every scalar a 32-bit integer shape expression. A :class:`KernelSpec` states all of it for
one specialization: the Triton signature of the entry kernel, its constexprs and alignment hints,
the runtime parameters in launch order, each scalar as a constant or a dimension of an input,
and the grid. The TensorRT adapter (``tensorrt_plugin``) only translates a spec; the tests and
the driver-API launch read the same spec.

Specialization follows Triton's own JIT rules (``triton.runtime.jit``), so that a PTX built
here runs the same code as the JIT launch of the ``replayssm::`` op on the same tensors: an
integer scalar equal to 1 becomes a constexpr (and leaves the parameter list), one divisible by
16 gets ``tt.divisibility = 16``; every pointer gets ``tt.divisibility = 16`` (TensorRT and
PyTorch allocations are at least 256-byte aligned). Scalars that depend on a dynamic dimension
are never specialized.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

from trtllm_replayssm.checks import ROUNDED_CHECKPOINT_DTYPES, is_rounding_seed

__all__ = [
    "DTYPE_NAMES",
    "FP8",
    "ROUNDING_OFF",
    "FLOATS",
    "STATE_DTYPES",
    "TORCH_DTYPES",
    "aliased_outputs",
    "check_checkpoint_scale",
    "check_rounding_seed",
    "InputDim",
    "KernelParam",
    "KernelSpec",
    "Scalar",
    "TensorInfo",
    "build_kernel_spec",
    "check_rank_and_dims",
    "check_dtype",
    "resolve",
    "specialize_scalar",
]

# dtype names used by the plugin layer (TensorRT- and torch-independent) -> Triton pointer type.
# "fp8" is float8-e4m3 (TensorRT's DataType.FP8, torch.float8_e4m3fn, Triton's fp8e4nv), the
# name the core's tools use (bench.timing.DT).
DTYPE_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "fp8": "fp8e4nv", "i32": "i32", "i64": "i64"}
FP8 = "fp8"
# Activation and record dtypes of the plugins.
FLOATS = ("f32", "bf16", "f16")
# Checkpoint dtypes the replay-step plugins take; an fp8 checkpoint comes with its row scales.
STATE_DTYPES = FLOATS + (FP8,)
# The torch dtype of each checkpoint dtype name (the core's launch tables take torch dtypes).
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, FP8: torch.float8_e4m3fn}
# The ``rounding_seed`` attribute's value for round-to-nearest (no stochastic rounding).
ROUNDING_OFF = -1


@dataclass(frozen=True)
class InputDim:
    """A dimension of a plugin input, known only when the engine runs (e.g. batch)."""

    input: int
    axis: int


Dim = Union[int, InputDim]


def resolve(dim: Dim, shapes: Sequence[Sequence]) -> object:
    """Value of ``dim`` given the input shapes (ints, or TensorRT shape expressions)."""
    return dim if isinstance(dim, int) else shapes[dim.input][dim.axis]


@dataclass(frozen=True)
class Scalar:
    """One scalar kernel argument: its entry-kernel parameter name and its value."""

    name: str
    value: Dim


def specialize_scalar(value: Dim) -> Tuple[str, bool]:
    """Triton's JIT specialization of an int32 argument: ("constexpr" | "i32", divisible by 16).

    A dynamic value (an :class:`InputDim`) is never specialized.
    """
    if isinstance(value, InputDim):
        return "i32", False
    if value == 1:
        return "constexpr", False
    return "i32", value % 16 == 0


@dataclass(frozen=True)
class KernelParam:
    """A runtime parameter of the entry kernel, in TensorRT's launch order."""

    name: str
    role: str  # "input" | "scalar" | "output"
    index: int  # plugin input / scalar / output index
    triton_type: str  # "*fp32", "*bf16", "*i32", "i32" ...


@dataclass(frozen=True)
class KernelSpec:
    """One specialization of a plugin's entry kernel and how TensorRT launches it.

    Attributes:
        name: the plugin (and exported kernel family) name, e.g. "mamba2_replay_step".
        variant: the specialization in words plus a hash of the full key; the exported PTX is
            ``{name}_sm{arch}_{variant}.ptx`` (FlashInfer-style names).
        fn_arg_names: the entry kernel's parameter names, in declaration order.
        signature: Triton signature: parameter name -> "*fp32" | "i32" | "constexpr" ...
        constexprs: parameter name -> value, for every "constexpr" entry of ``signature``.
        divisible: parameters that get ``tt.divisibility = 16``.
        params: runtime parameters in launch order: inputs, scalars, outputs.
        scalars: value of each runtime scalar, in launch order (constants or input dims).
        grid: (x, y, z), each a constant or an input dim.
        num_warps: threads per block / 32.
    """

    name: str
    variant: str
    fn_arg_names: Tuple[str, ...]
    signature: Mapping[str, str]
    constexprs: Mapping[str, object]
    divisible: Tuple[str, ...]
    params: Tuple[KernelParam, ...]
    scalars: Tuple[Scalar, ...]
    grid: Tuple[Dim, Dim, Dim]
    num_warps: int

    @property
    def block(self) -> Tuple[int, int, int]:
        return (self.num_warps * 32, 1, 1)

    def triton_attrs(self) -> Dict[Tuple[int], list]:
        """``ASTSource`` attrs: {(param index,): [["tt.divisibility", 16]]}."""
        return {(self.fn_arg_names.index(n),): [["tt.divisibility", 16]] for n in self.divisible}

    def scalar_values(self, shapes: Sequence[Sequence]) -> list:
        """Runtime scalar arguments in launch order, from the input shapes."""
        return [resolve(s.value, shapes) for s in self.scalars]

    def grid_values(self, shapes: Sequence[Sequence]) -> list:
        return [resolve(g, shapes) for g in self.grid]


def build_kernel_spec(
    name: str,
    words: str,
    arg_names: Sequence[str],
    input_dtypes: Sequence[str],
    output_dtypes: Sequence[str],
    scalars: Sequence[Scalar],
    constexprs: Mapping[str, object],
    grid: Tuple[Dim, Dim, Dim],
    num_warps: int,
) -> KernelSpec:
    """The :class:`KernelSpec` of an entry kernel that declares its parameters as TensorRT
    passes them: one pointer per input, ``scalars`` (in order), one pointer per output, then
    the ``constexprs``. Scalars are specialized as Triton's JIT does (:func:`specialize_scalar`).

    Args:
        words: readable part of the variant (geometry, dtypes, flags, configuration).
    Raises:
        RuntimeError: the entry's parameter list is not inputs, scalars, outputs, constexprs.
    """
    arg_names = tuple(arg_names)
    n_in, n_sc, n_out = len(input_dtypes), len(scalars), len(output_dtypes)
    in_names, sc_names = arg_names[:n_in], arg_names[n_in : n_in + n_sc]
    out_names, cx_names = arg_names[n_in + n_sc : n_in + n_sc + n_out], arg_names[n_in + n_sc + n_out :]
    if sc_names != tuple(x.name for x in scalars) or set(cx_names) != set(constexprs):
        raise RuntimeError(
            f"{name}: the entry kernel's parameters {arg_names} are not "
            f"{n_in} inputs, scalars {tuple(x.name for x in scalars)}, {n_out} outputs, "
            f"constexprs {tuple(constexprs)}"
        )
    constexprs = dict(constexprs)
    signature: Dict[str, str] = {n: "constexpr" for n in cx_names}
    divisible = list(in_names) + list(out_names)
    params, runtime_scalars = [], []
    for i, (n, dt) in enumerate(zip(in_names, input_dtypes)):
        signature[n] = "*" + DTYPE_NAMES[dt]
        params.append(KernelParam(n, "input", i, signature[n]))
    for x in scalars:
        kind, div = specialize_scalar(x.value)
        signature[x.name] = kind
        if kind == "constexpr":
            constexprs[x.name] = x.value
            continue
        if div:
            divisible.append(x.name)
        params.append(KernelParam(x.name, "scalar", len(runtime_scalars), kind))
        runtime_scalars.append(x)
    for o, (n, dt) in enumerate(zip(out_names, output_dtypes)):
        signature[n] = "*" + DTYPE_NAMES[dt]
        params.append(KernelParam(n, "output", o, signature[n]))
    signature = {n: signature[n] for n in arg_names}
    key = repr((sorted(signature.items()), sorted(constexprs.items()), sorted(divisible), num_warps))
    return KernelSpec(
        name=name,
        variant=f"{words}_{hashlib.sha1(key.encode()).hexdigest()[:8]}",
        fn_arg_names=arg_names,
        signature=signature,
        constexprs=constexprs,
        divisible=tuple(divisible),
        params=tuple(params),
        scalars=tuple(runtime_scalars),
        grid=grid,
        num_warps=num_warps,
    )


@dataclass(frozen=True)
class TensorInfo:
    """What the plugin layer knows of an input while TensorRT infers shapes.

    Attributes:
        dtype: "f32" | "bf16" | "f16" | "i32", or TensorRT's name for anything else.
        rank: number of dimensions.
        dims: per dimension an int, or None when dynamic; ``dims`` itself is None while only
            ranks and dtypes are known (TensorRT's output-dtype pass).
    """

    dtype: str
    rank: int
    dims: Optional[Tuple[Optional[int], ...]] = None


def check_dtype(plugin: str, name: str, info: TensorInfo, allowed: Sequence[str], why: str = "") -> None:
    """TypeError naming ``plugin``, the input ``name``, its dtype and the ``allowed`` ones (with
    ``why`` in parentheses, where a rule picks them) unless ``info.dtype`` is among them."""
    if info.dtype not in allowed:
        reason = f" ({why})" if why else ""
        raise TypeError(f"{plugin}: {name} is {info.dtype}; expected {' | '.join(allowed)}{reason}")


def check_rank_and_dims(
    plugin: str, name: str, info: TensorInfo, layout: str, expected: Sequence[Union[int, str]], symbols: Dict[str, int]
) -> None:
    """``info`` has rank ``len(expected)``; each static dim equals its expected int, and each
    named dim (e.g. "batch") agrees with the other inputs' (recorded in ``symbols``).

    Int entries are the layer geometry: TensorRT must know them when it builds (a dynamic
    dimension there raises). Named entries may be dynamic.
    """
    want = "(" + ", ".join(str(e) for e in expected) + ")"
    if info.rank != len(expected):
        raise ValueError(f"{plugin}: {name} has rank {info.rank}; expected {layout} = {want}")
    if info.dims is None:
        return
    for axis, (got, exp) in enumerate(zip(info.dims, expected)):
        if isinstance(exp, int):
            if got is None:
                raise ValueError(
                    f"{plugin}: {name} has a dynamic dimension {axis}; expected {layout} = {want} with static geometry"
                )
            if got != exp:
                raise ValueError(f"{plugin}: {name} has shape {info.dims}; expected {layout} = {want}")
        elif got is not None:
            seen = symbols.setdefault(exp, got)
            if seen != got:
                raise ValueError(f"{plugin}: {name} has {exp} = {got} (shape {info.dims}); another input has {exp} = {seen}")


_INT32_MAX = 2**31 - 1


def check_attr_fields(owner: str, attrs, *, max_L: int) -> None:
    """Every field of a plugin's attribute dataclass has its declared type (bool; float > 0 and
    finite; ``rounding_seed`` an int in [-1, 2^31); else int >= 1), and 1 <= L <= ``max_L``."""
    for f in fields(attrs):
        v = getattr(attrs, f.name)
        if f.name == "rounding_seed":
            if not (is_rounding_seed(v) or (type(v) is int and v == ROUNDING_OFF)):
                raise ValueError(
                    f"{owner}: rounding_seed is {v!r}; expected {ROUNDING_OFF} (round to nearest) or an int in [0, 2^31)"
                )
        elif f.type == "bool":
            if not isinstance(v, bool):
                raise TypeError(f"{owner}: {f.name} is {v!r}; expected a bool")
        elif f.type == "float":
            if not isinstance(v, float) or not math.isfinite(v) or v <= 0:
                raise TypeError(f"{owner}: {f.name} is {v!r}; expected a positive finite float")
        elif not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{owner}: {f.name} is {v!r}; expected a positive int")
    if attrs.L > max_L:
        raise ValueError(f"{owner}: L is {attrs.L}; expected 1 <= L <= {max_L}")


def check_launch_attrs(owner: str, attrs, *, largest: int, min_block: int = 1, block_reason: str = "") -> None:
    """``block_head_dim`` a power of 2 >= ``min_block``, ``num_warps`` a power of 2 up to 16, and
    ``largest`` (elements in one slot of the biggest cache tensor) within int32 strides."""
    block = attrs.block_head_dim
    if block & (block - 1) or block < min_block:
        want = "a power of 2" + (f" >= {min_block} ({block_reason})" if min_block > 1 else "")
        raise ValueError(f"{owner}: block_head_dim is {block}; expected {want}")
    if attrs.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"{owner}: num_warps is {attrs.num_warps}; expected 1, 2, 4, 8 or 16")
    if largest > _INT32_MAX:
        raise ValueError(
            f"{owner}: one slot of the cache holds {largest} elements; the kernel's int32 strides allow at most {_INT32_MAX}"
        )


def check_rounding_seed(plugin: str, rounding_seed: int, state_dtype: str) -> None:
    """A ``rounding_seed`` attribute other than :data:`ROUNDING_OFF` (stochastic rounding at
    flush) needs a bf16, f16 or fp8 checkpoint, as the ops' (``checks.check_rounding_seed``)."""
    if rounding_seed != ROUNDING_OFF and TORCH_DTYPES.get(state_dtype) not in ROUNDED_CHECKPOINT_DTYPES:
        raise ValueError(
            f"{plugin}: rounding_seed is {rounding_seed} (checkpoint: {state_dtype}); expected {ROUNDING_OFF} "
            f"(off): stochastic rounding takes a bf16, f16 or fp8 checkpoint"
        )


def check_checkpoint_scale(plugin: str, checkpoint: TensorInfo, scale: TensorInfo, layout: str) -> None:
    """An fp8 checkpoint comes with ``checkpoint_scale``, its row scales (f32, ``layout``); any
    other checkpoint with the substitute of an absent one (``slot_ids``, i32 of rank 1).
    Dimensions are checked with the other inputs' (:func:`check_rank_and_dims`)."""
    if checkpoint.dtype == FP8:
        ok, want = (scale.dtype, scale.rank) == ("f32", 3), f"{layout} f32, the fp8 checkpoint's row scales"
    else:
        ok = (scale.dtype, scale.rank) == ("i32", 1)
        want = "none (slot_ids in its place): only an fp8 checkpoint takes checkpoint_scale"
    if not ok:
        raise ValueError(
            f"{plugin}: checkpoint_scale is {scale.dtype} of rank {scale.rank} (checkpoint: {checkpoint.dtype}); "
            f"expected {want}"
        )


def aliased_outputs(family, state_dtype: str) -> Dict[int, int]:
    """Output index -> the input it aliases (updated in place) for a replay-step plugin
    (``family``: its module) with a ``state_dtype`` checkpoint: the caches
    (``family.ALIASED_OUTPUTS``) and, with an fp8 checkpoint, checkpoint_scale
    (``family.FP8_ALIASED_OUTPUTS``). Any other output is a new tensor like its
    ``family.LIKE_INPUT`` (without fp8, the checkpoint_scale output: a buffer like slot_ids that
    the kernel never writes)."""
    return {**family.ALIASED_OUTPUTS, **(family.FP8_ALIASED_OUTPUTS if state_dtype == FP8 else {})}
