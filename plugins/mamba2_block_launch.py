"""The launch table of the C++ engine plugin (``plugins/cpp``): how its ``enqueue`` fills the
``mamba2_replay_block`` entry kernel's arguments, as plain integers. No TensorRT, no CUDA here.

TensorRT 10 has no host-located plugin inputs (``ITensor::setLocation`` is deprecated and must be
``kDEVICE``), and TensorRT-LLM v1.2.1's engine runtime binds ``rnn_state_ptr_<i>`` and
``host_request_types`` to pageable host memory (``BufferManager::cpu`` = ``std::malloc``), which
its own plugins read on the CPU in ``enqueue``. An AOT plugin's kernel cannot read them, so a
small C++ ``IPluginV3`` reads both on the host and launches the exported PTX with
``cuLaunchKernel``, taking each argument from this table (docs/engine_flow.md).

Table rows, one per runtime kernel parameter in launch order, ``(kind, a, b)``:

    ARG_INPUT    pointer: plugin input ``a`` advanced by ``b`` elements of its dtype
    ARG_STATE    pointer to a device int64 holding ``*rnn_state_ptr`` (staged by the plugin)
    ARG_OUTPUT   pointer: plugin output ``a``
    ARG_CONST    int32 scalar ``a``
    ARG_ROWS     int32 scalar: the step's rows (``slot_mapping``'s length)
    ARG_PHASE    int32 scalar for the entry's ``num_tokens``: rows + 1 in a context step
                 (``host_request_types[0] == 0``), rows in a generation step; the entry only
                 compares it with ``batch``, so a context step of one-token prompts still admits

The grid is ``(grid_x, nheads, rows)``. Engine plugin inputs, in order (:data:`ENGINE_INPUTS`),
with the row strides of the fused tensors of TensorRT-LLM's ``Mamba2`` layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Tuple

import triton

from .mamba2_block import INPUTS, Mamba2BlockAttrs, kernel_spec
from .spec import InputDim, KernelSpec, TensorInfo

__all__ = [
    "ARG_INPUT",
    "ARG_STATE",
    "ARG_OUTPUT",
    "ARG_CONST",
    "ARG_ROWS",
    "ARG_PHASE",
    "ENGINE_INPUTS",
    "StepView",
    "LaunchTable",
    "launch_table",
]

ARG_INPUT, ARG_STATE, ARG_OUTPUT, ARG_CONST, ARG_ROWS, ARG_PHASE = range(6)

# The C++ plugin's inputs. 0 and 1 are host memory (read in enqueue); the rest are device tensors.
ENGINE_INPUTS = (
    "rnn_state_ptr",  # int64 [1], host: the layer buffer's address
    "host_request_types",  # int32 [rows], host: 0 context, 1 generation
    "slot_mapping",  # int32 [rows]
    "xbc",  # act [tokens, conv_dim]: the conv1d output (x | B | C)
    "zxbcdt",  # act [tokens, in_proj width]: the in_proj output (z | xBC | dt | pad)
    "A",  # f32 [nheads]
    "D",  # f32 [nheads]
    "dt_bias",  # f32 [nheads]
    "y_stock",  # act [tokens, nheads * head_dim]: the stock selective_scan output (context)
)
_SIZES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4}


@dataclass(frozen=True)
class StepView:
    """Where one step input of the entry kernel lies: engine input, element offset, row stride."""

    source: str
    offset: int
    row_stride: int


@dataclass(frozen=True)
class LaunchTable:
    """What the C++ plugin needs for one specialization: the PTX's kernel name and variant, the
    argument rows, the grid's x extent, threads per block."""

    spec: KernelSpec
    args: Tuple[Tuple[int, int, int], ...]
    grid_x: int
    grid_y: int

    def flat(self) -> Tuple[int, ...]:
        """The table as the plugin field ``launch_table`` (int64): n, then n (kind, a, b), then
        grid_x, grid_y, threads per block."""
        out = [len(self.args)]
        for row in self.args:
            out.extend(row)
        return tuple(out + [self.grid_x, self.grid_y, self.spec.block[0]])


def _check_view(name: str, view: StepView, dtype: str) -> None:
    if view.source not in ENGINE_INPUTS:
        raise ValueError(f"launch_table: views[{name!r}].source is {view.source!r}; expected one of {ENGINE_INPUTS}")
    if (view.offset * _SIZES[dtype]) % 16:
        raise ValueError(
            f"launch_table: views[{name!r}] starts {view.offset} elements ({view.offset * _SIZES[dtype]} bytes) into "
            f"{view.source}; expected a multiple of 16 bytes (the PTX assumes 16-byte aligned pointers)"
        )


def launch_table(a: Mamba2BlockAttrs, views: Mapping[str, StepView]) -> LaunchTable:
    """The launch table of ``a`` with the step inputs x, dt, B, C, z read through ``views``.

    Args:
        a: plugin attributes; ``a.replay.has_z`` and ``has_D``, ``has_dt_bias`` as the layer has.
        views: "x", "dt", "B", "C", "z" -> :class:`StepView` (row strides in elements).
    Raises:
        ValueError: a view missing or unknown, misaligned, or on an unknown engine input.
    """
    step = ("x", "dt", "B", "C", "z")
    if sorted(views) != sorted(step):
        raise ValueError(f"launch_table: views names {sorted(views)}; expected {sorted(step)}")
    act = a.act_dtype
    for name in step:
        _check_view(name, views[name], act)
    r = a.replay
    strides = {f"stride_{n}_batch": views[n].row_stride for n in step}
    infos = [
        TensorInfo("i64", 1, (1,)),
        TensorInfo(act, 3, (None, r.nheads, r.head_dim)),
        TensorInfo(act, 2, (None, r.nheads)),
        TensorInfo("f32", 1, (r.nheads,)),
        TensorInfo(act, 3, (None, r.ngroups, r.d_state)),
        TensorInfo(act, 3, (None, r.ngroups, r.d_state)),
        TensorInfo("i32", 1, (None,)),
        TensorInfo("f32", 1, (r.nheads,)),
        TensorInfo(act, 3, (None, r.nheads, r.head_dim)),
        TensorInfo("f32", 1, (r.nheads,)),
    ]
    spec = kernel_spec(a, infos, strides)
    sources: Dict[str, Tuple[int, int, int]] = {
        n: (ARG_INPUT, ENGINE_INPUTS.index(v.source), v.offset) for n, v in views.items()
    }
    sources.update(
        state_ptr=(ARG_STATE, 0, 0),
        slot_ids=(ARG_INPUT, ENGINE_INPUTS.index("slot_mapping"), 0),
        A=(ARG_INPUT, ENGINE_INPUTS.index("A"), 0),
        D=(ARG_INPUT, ENGINE_INPUTS.index("D" if r.has_D else "A"), 0),
        dt_bias=(ARG_INPUT, ENGINE_INPUTS.index("dt_bias" if r.has_dt_bias else "A"), 0),
    )
    rows = []
    for p in spec.params:
        if p.role == "input":
            rows.append(sources[INPUTS[p.index]])
        elif p.role == "output":
            rows.append((ARG_OUTPUT, p.index, 0))
        else:
            value = spec.scalars[p.index].value
            if p.name == "num_tokens":
                rows.append((ARG_PHASE, 0, 0))
            elif isinstance(value, InputDim):
                rows.append((ARG_ROWS, 0, 0))
            else:
                rows.append((ARG_CONST, int(value), 0))
    if spec.signature["num_tokens"] != "i32" or spec.signature["batch"] != "i32":
        raise RuntimeError("launch_table: num_tokens and batch must stay runtime i32 arguments")
    grid_x = triton.cdiv(r.head_dim, r.block_head_dim * r.chunks)
    return LaunchTable(spec, tuple(rows), grid_x, r.nheads)
