"""The Mamba-2 replay step's CUDA C++ kernels (``kernels/cuda/mamba2_replay_step.cu``, the op's route
on sm_90) as two TensorRT AOT plugin layers, as plain data: inputs, attributes, shape rules, the
kernels' specialization, PTX, launch parameters. No TensorRT here.

The op runs the step as two launches (``trtllm_replayssm.kernels.mamba2_replay_cuda``): a
coefficient launch, then a persistent step kernel that copies checkpoint rows with TMA tensor
maps. An AOT plugin launches one kernel with pointers and int32 scalars, so each launch is one
plugin layer, and the step kernel's tensor maps, which encode the checkpoint's address, are
patched on the device: the network holds a template of both maps (encoded when the network is
built, for the layer's geometry, with a placeholder address and slot count) and each CTA of
layer 2 writes its own pair, with the checkpoint's address and slot count, into a scratch output
(``tensormap.replace``, sm_90a).

``replayssm::mamba2_replay_coefficients`` (layer 1)::

    0 x_records  [num_slots, nheads, L, head_dim]   bf16      outputs: 0 coef [batch, nheads, CF] f32
    1 dt_records [num_slots, nheads, L]             f32                1 c_rows [batch, ngroups, d_state] bf16
    2 B_records  [num_slots, ngroups, L, d_state]   bf16               2-4 x_records, dt_records, B_records
    3 cursor     [num_slots]                        i32                    (aliased to inputs 0-2: the
    4 x          [batch, nheads, head_dim]          bf16                   step's record appended)
    5 dt         [batch, nheads]                    f32 | bf16 | f16, raw
    6 A          [nheads]                           f32
    7 B, 8 C     [batch, ngroups, d_state]          bf16
    9 slot_ids   [batch]                            i32; < 0: padding row
   10 dt_bias    [nheads]                           f32 | bf16 (A in its place when absent)

``replayssm::mamba2_replay_step_cuda`` (layer 2)::

    0 checkpoint [num_slots, nheads, head_dim, d_state]  bf16 | f32    outputs: 0 out (y, like x)
    1 coef, 2 c_rows            layer 1's outputs 0, 1                          1 checkpoint, 2 cursor
    3 x_records, 4 B_records    layer 1's outputs 2, 4                            (aliased to inputs 0, 5)
    5 cursor     [num_slots]    i32                                             3 map_scratch
    6 slot_ids   [batch]        i32                                               [grid, 2, 32] i32
    7 D          [nheads] | [nheads, head_dim]   f32 | bf16 (x in its place when absent)
    8 z          [batch, nheads, head_dim]       bf16 (x in its place when absent)
    9 x          [batch, nheads, head_dim]       bf16
   10 tensor_maps [2, 32] i32: the template (:func:`map_template`)

with CF = ``coefficient_floats(L)``. ``arrivals`` is not an input: the two launches do not use it.
What the export takes (:func:`export_unsupported`): the op's CUDA rules
(``cuda_geometry_unsupported``: bf16 activations, a bf16 or fp32 checkpoint, head_dim a multiple
of 16 up to 128, d_state a multiple of 64 up to 256, L <= 32) and the step kernel's two stages
within 48 KiB of shared memory (``ptx.MAX_SHARED_MEM``: TensorRT's AOT launch is not documented
to raise a kernel's dynamic shared memory limit): bf16 checkpoints of Nemotron-3-Super's
geometry, not fp32 ones. No fp8 checkpoints and no stochastic rounding (the CUDA step has
neither). The PTX is for sm_90a (H100, H200) and declares PTX ISA 9.0 (NVRTC 13.0): it needs a
CUDA 13 driver.

Differences from the op's launches: no programmatic dependent launch (an AOT plugin cannot ask
for one; the op measured it a gain at batch 1-64), and the step kernel's grid is fixed at
``min_ctas`` CTAs a multiprocessor of the target GPU (CTAs past the last unit exit at once)
where the op takes ``min(batch * nheads, ...)``. The launch configuration is the op's table's for
``batch_hint`` rows (``ring_config``).
"""

from __future__ import annotations

import hashlib

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from trtllm_replayssm.kernels.gated_delta_common import H200_MULTIPROCESSORS
from trtllm_replayssm.kernels.mamba2_replay_cuda import (
    SOURCE,
    CudaStepConfig,
    coefficient_floats,
    coefficient_split,
    cuda_geometry_unsupported,
    ring_config,
    step_defines,
    step_shared_bytes,
    step_threads,
)
from trtllm_replayssm.kernels.nvrtc import (
    DTYPE_CODE,
    checkpoint_map_boxes,
    compile_program,
    encode_tensor_map_4d,
    nvrtc_version,
)

from . import mamba2
from .ptx import MAX_SHARED_MEM, CompiledKernel, parse_ptx_entries
from .spec import (
    DTYPE_NAMES,
    FLOATS,
    InputDim,
    KernelParam,
    KernelSpec,
    Scalar,
    TensorInfo,
    check_attr_fields,
    check_dtype,
    check_rank_and_dims,
)

__all__ = [
    "ARCH",
    "COEFFICIENTS",
    "STEP",
    "STATE_DTYPES",
    "MAP_WORDS",
    "Mamba2CudaAttrs",
    "CudaPluginLayer",
    "compile_cuda_ptx",
    "export_unsupported",
    "map_template",
]

ARCH = 90  # sm_90a: tensormap.replace
STATE_DTYPES = ("bf16", "f32")
MAP_WORDS = 32  # int32 words of one 128-byte tensor map
_TORCH = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
# A 16-byte aligned stand-in address and slot count for the template; layer 2 replaces both.
_PLACEHOLDER_ADDRESS = 1 << 20
_PLACEHOLDER_SLOTS = 1


def export_unsupported(head_dim: int, d_state: int, L: int, *, state_dtype: str, act_dtype: str = "bf16") -> Optional[str]:
    """Why the CUDA step cannot be exported for this layer (None: it can): the op's CUDA rules,
    then the step kernel's shared memory within :data:`ptx.MAX_SHARED_MEM`."""
    if state_dtype not in _TORCH or act_dtype not in _TORCH:
        return f"checkpoint {state_dtype} / activations {act_dtype}; the CUDA step takes bf16 or f32 / bf16"
    reason = cuda_geometry_unsupported(_TORCH[state_dtype], _TORCH[act_dtype], head_dim, d_state, L)
    if reason is not None:
        return reason
    smem = step_shared_bytes(head_dim, d_state, L, 2, _TORCH[state_dtype].itemsize)
    if smem > MAX_SHARED_MEM:
        return (
            f"the step kernel needs {smem} bytes of shared memory for two stages of head_dim {head_dim} x d_state "
            f"{d_state} {state_dtype} rows (> {MAX_SHARED_MEM}: TensorRT's AOT launch is not documented to raise the "
            "limit)"
        )
    return None


@dataclass(frozen=True)
class Mamba2CudaAttrs:
    """Attributes of both plugin layers (TensorRT plugin fields), in registration order.

    Geometry: nheads, head_dim, d_state, ngroups, L. Flags: has_D, has_z, has_dt_bias,
    dt_softplus. Launch: coef_warps (layer 1's warps a CTA, 4 or 16), min_ctas (layer 2's
    resident CTAs a multiprocessor: its register cap and its grid), multiprocessors (of the GPU
    the engine is built for; layer 2 launches min_ctas x multiprocessors CTAs).
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
    coef_warps: int
    min_ctas: int
    multiprocessors: int

    def __post_init__(self) -> None:
        owner = "mamba2_replay_step_cuda attributes"
        check_attr_fields(owner, self, max_L=32)
        if self.nheads % self.ngroups:
            raise ValueError(f"{owner}: ngroups = {self.ngroups} must divide nheads = {self.nheads}")
        if self.coef_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"{owner}: coef_warps is {self.coef_warps}; expected 1, 2, 4, 8 or 16")

    @classmethod
    def for_layer(
        cls,
        nheads: int,
        head_dim: int,
        d_state: int,
        ngroups: int,
        L: int,
        *,
        state_dtype: str = "bf16",
        has_D: bool = True,
        has_z: bool = False,
        has_dt_bias: bool = True,
        dt_softplus: bool = True,
        batch_hint: int = 64,
        multiprocessors: int = H200_MULTIPROCESSORS,
    ) -> "Mamba2CudaAttrs":
        """Attributes of one layer with the op's launch table for ``batch_hint`` rows.

        Raises:
            ValueError: the layer cannot take the CUDA export (:func:`export_unsupported`).
        """
        reason = export_unsupported(head_dim, d_state, L, state_dtype=state_dtype)
        if reason is not None:
            raise ValueError(f"mamba2_replay_step_cuda: {reason}")
        smem = step_shared_bytes(head_dim, d_state, L, 2, _TORCH[state_dtype].itemsize)
        cfg = ring_config(head_dim, smem, batch_hint, f"mamba2_replay_step_cuda: head_dim {head_dim}")
        flags = dict(has_D=has_D, has_z=has_z, has_dt_bias=has_dt_bias, dt_softplus=dt_softplus)
        return cls(nheads, head_dim, d_state, ngroups, L, **flags, coef_warps=cfg.coef_warps, min_ctas=cfg.min_ctas,
                   multiprocessors=multiprocessors)  # fmt: skip

    def values(self) -> Dict[str, object]:
        """Attribute name -> value, in registration order (TensorRT plugin fields)."""
        return asdict(self)

    @property
    def grid(self) -> int:
        """Layer 2's CTAs (persistent)."""
        return self.min_ctas * self.multiprocessors


def map_template(a: Mamba2CudaAttrs, state_dtype: str) -> np.ndarray:
    """The [2, 32] int32 template of the checkpoint's (load, store) tensor maps for this layer:
    dense [num_slots, nheads, head_dim, d_state] strides, the op's boxes and swizzle, a placeholder
    address and slot count that layer 2 replaces. Needs the CUDA driver (``cuTensorMapEncodeTiled``;
    the machine that builds the engine has one)."""
    dtype = _TORCH[state_dtype]
    shape = (_PLACEHOLDER_SLOTS, a.nheads, a.head_dim, a.d_state)
    strides = (a.nheads * a.head_dim * a.d_state, a.head_dim * a.d_state, a.d_state)
    maps = [encode_tensor_map_4d(_PLACEHOLDER_ADDRESS, dtype, shape, strides, box)
            for box in checkpoint_map_boxes(a.head_dim, dtype.itemsize)]  # fmt: skip
    return np.frombuffer(b"".join(maps), dtype=np.int32).reshape(2, MAP_WORDS).copy()


def _defines(
    a: Mamba2CudaAttrs, infos: Mapping[str, TensorInfo], state_dtype: str, entries: int
) -> Tuple[Tuple[str, int], ...]:
    """The .cu file's -D constants of a layer's module (AOT_ENTRIES = ``entries``: 1 layer 1's
    entry, 2 layer 2's). A dtype code or D_PER_DIM of an input the layer does not have is 0
    (the other layer's entry reads it, this one is not compiled)."""
    code = {n: DTYPE_CODE[_TORCH[i.dtype]] for n, i in infos.items() if i.dtype in _TORCH}
    flags = dict(HAS_D=int(a.has_D), D_PER_DIM=int(a.has_D and "D" in infos and infos["D"].rank == 2),
                 HAS_Z=int(a.has_z), HAS_DT_BIAS=int(a.has_dt_bias), DT_SOFTPLUS=int(a.dt_softplus),
                 DT_CODE=code.get("dt", 0), DTB_CODE=code.get("dt_bias", 0) if a.has_dt_bias else 0,
                 D_CODE=code.get("D", 0) if a.has_D else 0, AOT_ENTRIES=entries)  # fmt: skip
    cfg = CudaStepConfig(stages=2, min_ctas=a.min_ctas, pdl=False, coef_warps=a.coef_warps)
    return step_defines(a.nheads, a.ngroups, a.head_dim, a.d_state, a.L, cfg, flags, _TORCH[state_dtype].itemsize)


class CudaPluginLayer:
    """One of the two plugin layers, in the shape the TensorRT adapter (``tensorrt_plugin``)
    reads a plugin family: PLUGIN, INPUTS, OUTPUTS, ALIASED_OUTPUTS, LIKE_INPUT, NEW_OUTPUTS
    (output -> (dims, dtype name): a new tensor), ATTRS, check_inputs, kernel_spec and
    compile_kernel. AOT only: it has no ``run_op`` (TensorRT's JIT path runs the
    ``mamba2_replay_step`` plugin, whose op takes this route itself on sm_90)."""

    FP8_ALIASED_OUTPUTS: Dict[int, int] = {}
    ATTRS = Mamba2CudaAttrs

    def __init__(self, plugin: str, entry: str, inputs: Tuple[str, ...], outputs: Tuple[str, ...],
                 aliased: Dict[int, int], like: Dict[int, int], substitutes: Dict[str, str], is_step: bool):  # fmt: skip
        self.PLUGIN, self.ENTRY_NAME, self.INPUTS, self.OUTPUTS = plugin, entry, inputs, outputs
        self.ALIASED_OUTPUTS, self.LIKE_INPUT, self.SUBSTITUTES = aliased, like, substitutes
        self.is_step = is_step  # layer 2 (the step kernel), else layer 1 (the coefficients)

    def __repr__(self) -> str:
        return f"CudaPluginLayer({self.PLUGIN})"

    # ------------------------------------------------------------------ shapes and dtypes
    def _layouts(self, a: Mamba2CudaAttrs, d_per_dim: bool) -> Dict[str, Tuple[str, tuple]]:
        base = mamba2.input_layouts(a, d_per_dim, False)
        own = dict(
            coef=(f"[batch, nheads, {coefficient_floats(a.L)}]", ("batch", a.nheads, coefficient_floats(a.L))),
            c_rows=("[batch, ngroups, d_state]", ("batch", a.ngroups, a.d_state)),
            tensor_maps=(f"[2, {MAP_WORDS}] (map_template)", (2, MAP_WORDS)),
        )
        layouts = {n: base.get(n) or own[n] for n in self.INPUTS}
        for name, flag in (("D", a.has_D), ("z", a.has_z), ("dt_bias", a.has_dt_bias)):
            if name in layouts and not flag:
                layouts[name] = base[self.SUBSTITUTES[name]]
        return layouts

    def NEW_OUTPUTS(self, a: Mamba2CudaAttrs) -> Dict[int, Tuple[tuple, str]]:
        """Outputs that are new tensors of their own shape: output -> (dims: ints or
        :class:`InputDim`, dtype name)."""
        batch = InputDim(self.INPUTS.index("x"), 0)
        shapes = dict(
            coef=((batch, a.nheads, coefficient_floats(a.L)), "f32"),
            map_scratch=((a.grid, 2, MAP_WORDS), "i32"),
        )
        return {o: shapes[n] for o, n in enumerate(self.OUTPUTS) if n in shapes}

    def tensor_infos(self, a: Mamba2CudaAttrs, *, state_dtype: str, dt_dtype: str = "bf16", param_dtype: str = "f32",
                     d_per_dim: bool = False) -> Tuple[TensorInfo, ...]:  # fmt: skip
        """The inputs' :class:`TensorInfo` (batch and num_slots dynamic), substitutes included."""
        dtypes = dict(checkpoint=state_dtype, x_records="bf16", dt_records="f32", B_records="bf16", cursor="i32",
                      x="bf16", dt=dt_dtype, A="f32", B="bf16", C="bf16", slot_ids="i32", coef="f32", c_rows="bf16",
                      tensor_maps="i32", z="bf16", D=param_dtype if a.has_D else "bf16",
                      dt_bias=param_dtype if a.has_dt_bias else "f32")  # fmt: skip
        layouts = self._layouts(a, a.has_D and d_per_dim)
        return tuple(
            TensorInfo(dtypes[n], len(dims), tuple(d if isinstance(d, int) else None for d in dims))
            for n, (_, dims) in ((n, layouts[n]) for n in self.INPUTS)
        )

    def check_inputs(self, a: Mamba2CudaAttrs, infos: Sequence[TensorInfo]) -> None:
        """Shape and dtype checks at network build time (the kernels validate nothing).

        Raises:
            ValueError: wrong input count, rank, static dimension, inconsistent batch /
                num_slots, or a layer the export cannot take (:func:`export_unsupported`).
            TypeError: wrong dtype.
        """
        if len(infos) != len(self.INPUTS):
            raise ValueError(f"{self.PLUGIN}: got {len(infos)} inputs; expected {len(self.INPUTS)}: {', '.join(self.INPUTS)}")
        by = dict(zip(self.INPUTS, infos))
        if "checkpoint" in by:
            check_dtype(self.PLUGIN, "checkpoint", by["checkpoint"], STATE_DTYPES)
        state = by["checkpoint"].dtype if "checkpoint" in by else "bf16"
        reason = export_unsupported(a.head_dim, a.d_state, a.L, state_dtype=state)
        if reason is not None:
            raise ValueError(f"{self.PLUGIN}: {reason}")
        d_per_dim = a.has_D and "D" in by and by["D"].rank == 2
        symbols: Dict[str, int] = {}
        layouts = self._layouts(a, d_per_dim)
        for name, info in by.items():
            check_rank_and_dims(self.PLUGIN, name, info, *layouts[name], symbols)
        for name in ("x_records", "B_records", "x", "B", "C", "z", "c_rows"):
            if name in by:
                check_dtype(self.PLUGIN, name, by[name], ("bf16",))
        for name in ("dt_records", "A", "coef"):
            if name in by:
                check_dtype(self.PLUGIN, name, by[name], ("f32",))
        for name in ("cursor", "slot_ids", "tensor_maps"):
            if name in by:
                check_dtype(self.PLUGIN, name, by[name], ("i32",))
        if "dt" in by:
            check_dtype(self.PLUGIN, "dt", by["dt"], FLOATS)
        for name in ("D", "dt_bias"):
            if name in by:
                check_dtype(self.PLUGIN, name, by[name], ("f32", "bf16"))

    # ------------------------------------------------------------------ the kernel
    def kernel_spec(self, a: Mamba2CudaAttrs, infos: Sequence[TensorInfo]) -> KernelSpec:
        """The entry's specialization and launch. ``infos`` must have passed :meth:`check_inputs`.
        ``constexprs`` holds the .cu file's -D constants; ``signature`` the parameters' types in
        the plugin dtypes' names (``spec.DTYPE_NAMES``)."""
        by = dict(zip(self.INPUTS, infos))
        state = by["checkpoint"].dtype if "checkpoint" in by else STATE_DTYPES[0]
        # layer 1 has no checkpoint input: its code does not depend on the checkpoint dtype
        defines = dict(_defines(a, by, state, 2 if self.is_step else 1))
        in_types = ["*" + DTYPE_NAMES[i.dtype] for i in infos]
        if self.is_step:
            scalars = (Scalar("batch", InputDim(self.INPUTS.index("x"), 0)),
                       Scalar("num_slots", InputDim(self.INPUTS.index("checkpoint"), 0)))  # fmt: skip
            grid = (a.grid, 1, 1)
            threads = step_threads(a.head_dim)
        else:
            scalars = (Scalar("num_slots", InputDim(self.INPUTS.index("x_records"), 0)),)
            grid = (a.ngroups * coefficient_split(a.nheads // a.ngroups), InputDim(self.INPUTS.index("x"), 0), 1)
            threads = 32 * a.coef_warps
        new = self.NEW_OUTPUTS(a)
        out_types = []
        for o in range(len(self.OUTPUTS)):
            if o in new:
                out_types.append("*" + DTYPE_NAMES[new[o][1]])
            else:
                out_types.append(in_types[{**self.LIKE_INPUT, **self.ALIASED_OUTPUTS}[o]])
        params = [KernelParam(n, "input", i, t) for i, (n, t) in enumerate(zip(self.INPUTS, in_types))]
        params += [KernelParam(s.name, "scalar", i, "i32") for i, s in enumerate(scalars)]
        params += [KernelParam(n, "output", o, t) for o, (n, t) in enumerate(zip(self.OUTPUTS, out_types))]
        key = repr((sorted(defines.items()), [p.triton_type for p in params], grid, threads))
        return KernelSpec(
            name=self.PLUGIN,
            variant=f"s{state}_nh{a.nheads}_hd{a.head_dim}_ds{a.d_state}_g{a.ngroups}_L{a.L}_"
            f"{hashlib.sha1(key.encode()).hexdigest()[:8]}",
            fn_arg_names=tuple(p.name for p in params),
            signature={p.name: p.triton_type for p in params},
            constexprs=defines,
            divisible=(),
            params=tuple(params),
            scalars=scalars,
            grid=grid,
            num_warps=threads // 32,
        )

    def compile_kernel(self, spec: KernelSpec, arch: int) -> CompiledKernel:
        """:func:`compile_cuda_ptx` of this layer's entry, with its dynamic shared memory (layer 2:
        the ring of two stages; layer 1: none)."""
        c = spec.constexprs
        smem = step_shared_bytes(c["ROWS"], c["DSTATE"], c["LREC"], 2, 4 if c["CKPT_F32"] else 2) if self.is_step else 0
        return compile_cuda_ptx(spec, self.ENTRY_NAME, arch, smem)


COEFFICIENTS = CudaPluginLayer(
    "mamba2_replay_coefficients",
    "mamba2_replay_coefficients_aot",
    ("x_records", "dt_records", "B_records", "cursor", "x", "dt", "A", "B", "C", "slot_ids", "dt_bias"),
    ("coef", "c_rows", "x_records", "dt_records", "B_records"),
    aliased={2: 0, 3: 1, 4: 2},
    like={1: 7},  # c_rows like B
    substitutes={"dt_bias": "A"},
    is_step=False,
)
STEP = CudaPluginLayer(
    "mamba2_replay_step_cuda",
    "mamba2_replay_step_aot",
    ("checkpoint", "coef", "c_rows", "x_records", "B_records", "cursor", "slot_ids", "D", "z", "x", "tensor_maps"),
    ("out", "checkpoint", "cursor", "map_scratch"),
    aliased={1: 0, 2: 5},
    like={0: 9},  # out like x
    substitutes={"D": "x", "z": "x"},
    is_step=True,
)


def compile_cuda_ptx(spec: KernelSpec, entry: str, arch: int, shared_mem: int) -> CompiledKernel:
    """PTX of ``entry`` (``kernels/cuda/mamba2_replay_step.cu`` with ``spec.constexprs`` as -D
    constants) by NVRTC for sm_90a, checked against the plugin's launch list: no GPU needed.
    ``shared_mem``: the launch's dynamic shared memory (bytes), at most ``ptx.MAX_SHARED_MEM``.

    Raises:
        ValueError: ``arch`` is not 90.
        RuntimeError: NVRTC fails, the entry is missing, its parameters are not ``spec.params``
            (pointers .u64, int32 scalars .u32) in order, or ``shared_mem`` is too large.
    """
    if arch != ARCH:
        raise ValueError(f"{spec.name}: arch is {arch}; the CUDA step's export is for sm_{ARCH}a only")
    if shared_mem > MAX_SHARED_MEM:
        raise RuntimeError(f"{spec.name} ({spec.variant}): {shared_mem} bytes of shared memory (> {MAX_SHARED_MEM})")
    ptx = compile_program(SOURCE, f"sm_{ARCH}a", tuple(sorted(spec.constexprs.items())), "ptx").decode()
    entries = parse_ptx_entries(ptx)
    if entry not in entries:
        raise RuntimeError(f"{spec.name}: the PTX has no entry {entry} (entries: {', '.join(entries)})")
    want = tuple("u64" if p.triton_type.startswith("*") else "u32" for p in spec.params)
    got = tuple(t for t, _ in entries[entry].params)
    if got != want:
        raise RuntimeError(f"{spec.name}: PTX entry parameter types {got} do not match the plugin's launch list {want}")
    return CompiledKernel(spec, arch, entry, ptx, shared_mem, 0, f"nvrtc {nvrtc_version()}")
