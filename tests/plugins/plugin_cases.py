"""Shared helpers of the plugin tests (CPU interpreter, PTX export, H200 driver-API launch).

The plugin package is installed as ``trtllm_replayssm_plugins`` (setup.py maps it onto
``plugins/``); from an uninstalled checkout :func:`import_plugins_package` loads it under that
name. Importing this module does that, so tests import it before the plugin package.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Dict, Sequence

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
# First lines of a subprocess script that needs the plugin package (and this module).
SUBPROCESS_PRELUDE = (
    f"import sys; sys.path[:0] = [{ROOT!r}, {HERE!r}]\nimport plugin_cases; plugin_cases.import_plugins_package()\n"
)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
TORCH_NAMES = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float8_e4m3fn: "fp8",
    torch.int32: "i32",
    torch.int64: "i64",
}
FP8 = torch.float8_e4m3fn


def import_plugins_package():
    try:
        return importlib.import_module("trtllm_replayssm_plugins")
    except ModuleNotFoundError:
        pass
    spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_plugins",
        os.path.join(ROOT, "plugins", "__init__.py"),
        submodule_search_locations=[os.path.join(ROOT, "plugins")],
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["trtllm_replayssm_plugins"] = module
    spec.loader.exec_module(module)
    return module


def subprocess_env() -> Dict[str, str]:
    """Environment of a subprocess that compiles PTX: Triton as the compiler, not the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, HERE, env.get("PYTHONPATH")]))
    return env


def info_of(t: torch.Tensor):
    from trtllm_replayssm_plugins.spec import TensorInfo

    return TensorInfo(TORCH_NAMES.get(t.dtype, str(t.dtype)), t.dim(), tuple(t.shape))


def _randn(shape, generator, dtype, device):
    return torch.randn(shape, generator=generator).to(dtype).to(device)


def _fill_checkpoint(c, generator) -> None:
    """Random checkpoint values; an fp8 one as codes of random rows with row scales in
    [0.5, 1) / 448 x 4 (codes up to 448: what a flush leaves, scales not all alike)."""
    c.checkpoint.copy_(torch.randn(c.checkpoint.shape, generator=generator).to(c.checkpoint.dtype))
    if c.checkpoint_scale is not None:
        c.checkpoint_scale.copy_((torch.rand(c.checkpoint_scale.shape, generator=generator) + 0.5) / 112.0)


def _seed(a):
    """The op's ``rounding_seed`` for plugin attributes ``a`` (-1: None)."""
    return None if a.rounding_seed < 0 else a.rounding_seed


class Mamba2Case:
    """Layers, steps and launches of ``replayssm::mamba2_replay_step`` for the tests."""

    name = "mamba2"

    @staticmethod
    def family():
        from trtllm_replayssm_plugins import mamba2

        return mamba2

    @staticmethod
    def layer(a, *, num_slots, state_dtype, act_dtype, device, generator=None, D_per_dim=False):
        """Cache (garbage in unused slots and record positions, cursors spread over [0, L)) and
        parameters, as plugin-named tensors (optionals absent when the flag is off;
        checkpoint_scale present with an fp8 checkpoint)."""
        from trtllm_replayssm.cache import Mamba2ReplayCache

        g = generator
        c = Mamba2ReplayCache.allocate(
            num_slots,
            a.nheads,
            a.head_dim,
            a.d_state,
            a.ngroups,
            a.L,
            state_dtype=state_dtype,
            act_dtype=act_dtype,
            device=device,
        )
        _fill_checkpoint(c, g)
        c.x_records.copy_(torch.randn(c.x_records.shape, generator=g).to(act_dtype))
        c.B_records.copy_(torch.randn(c.B_records.shape, generator=g).to(act_dtype))
        c.dt_records.copy_(torch.rand(c.dt_records.shape, generator=g) * 0.1)
        c.cursor.copy_(torch.arange(num_slots, dtype=torch.int32) % a.L)
        t = {n: getattr(c, n) for n in Mamba2Case.family().INPUTS[:6]}
        if c.checkpoint_scale is not None:
            t["checkpoint_scale"] = c.checkpoint_scale
        t["A"] = -(torch.rand(a.nheads, generator=g) + 1.0).to(device)
        if a.has_D:
            t["D"] = torch.randn((a.nheads, a.head_dim) if D_per_dim else (a.nheads,), generator=g).to(device)
        if a.has_dt_bias:
            t["dt_bias"] = (torch.rand(a.nheads, generator=g) - 4.0).to(device)
        return t

    @staticmethod
    def step(a, batch, act_dtype, device, generator=None):
        step = dict(
            x=_randn((batch, a.nheads, a.head_dim), generator, act_dtype, device),
            dt=_randn((batch, a.nheads), generator, act_dtype, device),
            B=_randn((batch, a.ngroups, a.d_state), generator, act_dtype, device),
            C=_randn((batch, a.ngroups, a.d_state), generator, act_dtype, device),
        )
        if a.has_z:
            step["z"] = _randn((batch, a.nheads, a.head_dim), generator, act_dtype, device)
        return step

    @staticmethod
    def inputs(layer, step, slot_ids):
        return Mamba2Case.family().plugin_inputs({**layer, **step, "slot_ids": slot_ids})[0]

    @staticmethod
    def launch_kernel(a, layer, step, slot_ids, out):
        """The op's launcher with the plugin's launch configuration."""
        from trtllm_replayssm.kernels.common import LaunchConfig
        from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

        cfg = LaunchConfig(a.block_head_dim, a.num_warps, a.chunks, a.num_stages)
        launch_mamba2_replay_step(
            *(layer[n] for n in Mamba2Case.family().INPUTS[:6]),
            step["x"],
            step["dt"],
            layer["A"],
            step["B"],
            step["C"],
            slot_ids=slot_ids,
            D=layer.get("D"),
            z=step.get("z"),
            dt_bias=layer.get("dt_bias"),
            dt_softplus=a.dt_softplus,
            out=out,
            config=cfg,
            checkpoint_scale=layer.get("checkpoint_scale"),
            rounding_seed=_seed(a),
        )

    @staticmethod
    def public_op(a, layer, step, slot_ids, out):
        """The public op (validation, then ``torch.ops.replayssm``; default launch config)."""
        from trtllm_replayssm.cache import Mamba2ReplayCache
        from trtllm_replayssm.ops import mamba2_replay_step

        cache = Mamba2ReplayCache(
            **{n: layer[n] for n in Mamba2Case.family().INPUTS[:6]}, checkpoint_scale=layer.get("checkpoint_scale")
        )
        mamba2_replay_step(
            cache,
            step["x"],
            step["dt"],
            layer["A"],
            step["B"],
            step["C"],
            slot_ids=slot_ids,
            D=layer.get("D"),
            z=step.get("z"),
            dt_bias=layer.get("dt_bias"),
            dt_softplus=a.dt_softplus,
            out=out,
            rounding_seed=_seed(a),
        )

    @staticmethod
    def out_like(step):
        return step["x"]


class GatedDeltaCase:
    """Layers, steps and launches of ``replayssm::gated_delta_replay_step`` (GDN, KDA)."""

    name = "gated_delta"

    @staticmethod
    def family():
        from trtllm_replayssm_plugins import gated_delta

        return gated_delta

    @staticmethod
    def layer(a, *, num_slots, state_dtype, act_dtype, device, generator=None):
        from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache

        g = generator
        cls = KDAReplayCache if a.per_channel else GDNReplayCache
        c = cls.allocate(
            num_slots,
            a.k_heads,
            a.v_heads,
            a.head_k_dim,
            a.head_v_dim,
            a.L,
            state_dtype=state_dtype,
            record_dtype=act_dtype,
            device=device,
        )
        _fill_checkpoint(c, g)
        c.d_records.copy_(torch.randn(c.d_records.shape, generator=g).to(act_dtype))
        k = torch.nn.functional.normalize(torch.randn(c.k_records.shape, generator=g), dim=-1)
        c.k_records.copy_(k.to(act_dtype))
        c.g_records.copy_(-torch.rand(c.g_records.shape, generator=g) * 0.1)
        c.cursor.copy_(torch.arange(num_slots, dtype=torch.int32) % a.L)
        t = {n: getattr(c, n) for n in GatedDeltaCase.family().INPUTS[:6]}
        if c.checkpoint_scale is not None:
            t["checkpoint_scale"] = c.checkpoint_scale
        return t

    @staticmethod
    def step(a, batch, act_dtype, device, generator=None):
        hk, hv, dk, dv = a.k_heads, a.v_heads, a.head_k_dim, a.head_v_dim
        g_shape = (batch, hv, dk) if a.per_channel else (batch, hv)
        return dict(
            q=_randn((batch, hk, dk), generator, act_dtype, device),
            k=_randn((batch, hk, dk), generator, act_dtype, device),
            v=_randn((batch, hv, dv), generator, act_dtype, device),
            g=(-torch.rand(g_shape, generator=generator) * 0.1).to(device),
            beta=torch.sigmoid(torch.randn((batch, hv), generator=generator)).to(device),
        )

    @staticmethod
    def inputs(layer, step, slot_ids):
        return GatedDeltaCase.family().plugin_inputs({**layer, **step, "slot_ids": slot_ids})

    @staticmethod
    def launch_kernel(a, layer, step, slot_ids, out):
        from trtllm_replayssm.kernels.common import LaunchConfig
        from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step

        cfg = LaunchConfig(a.block_head_dim, a.num_warps, a.chunks, a.num_stages)
        launch_gated_delta_replay_step(
            *(layer[n] for n in GatedDeltaCase.family().INPUTS[:6]),
            step["q"],
            step["k"],
            step["v"],
            step["g"],
            step["beta"],
            slot_ids=slot_ids,
            scale=a.scale,
            use_qk_l2norm=a.use_qk_l2norm,
            out=out,
            config=cfg,
            checkpoint_scale=layer.get("checkpoint_scale"),
            rounding_seed=_seed(a),
        )

    @staticmethod
    def public_op(a, layer, step, slot_ids, out):
        from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache
        from trtllm_replayssm.ops import gated_delta

        cls, op = (
            (KDAReplayCache, gated_delta.kda_replay_step) if a.per_channel else (GDNReplayCache, gated_delta.gdn_replay_step)
        )
        cache = cls(
            **{n: layer[n] for n in GatedDeltaCase.family().INPUTS[:6]}, checkpoint_scale=layer.get("checkpoint_scale")
        )
        op(
            cache,
            step["q"],
            step["k"],
            step["v"],
            step["g"],
            step["beta"],
            slot_ids=slot_ids,
            scale=a.scale,
            use_qk_l2norm=a.use_qk_l2norm,
            out=out,
            rounding_seed=_seed(a),
        )

    @staticmethod
    def out_like(step):
        return step["v"]


def output_buffers(family, inputs: Sequence[torch.Tensor], out: torch.Tensor) -> list:
    """The plugin's outputs as TensorRT binds them: ``out``, the aliased inputs themselves (the
    caches; checkpoint_scale with an fp8 checkpoint), and a new buffer (filled with 7) for any
    other output (checkpoint_scale's without fp8: like slot_ids, never written)."""
    from trtllm_replayssm_plugins.spec import aliased_outputs

    aliases = aliased_outputs(family, info_of(inputs[0]).dtype) if hasattr(family, "FP8_ALIASED_OUTPUTS") else {}
    return [out] + [
        inputs[aliases[o]] if o in aliases else torch.full_like(inputs[family.LIKE_INPUT[o]], 7)
        for o in range(1, len(family.OUTPUTS))
    ]


def launch_arguments(family, spec, inputs: Sequence[torch.Tensor], out: torch.Tensor, outputs=None) -> list:
    """The kernel arguments exactly as TensorRT passes them: per ``spec.params`` an input
    tensor, a scalar (from the input shapes) or an output tensor (``outputs``, by default
    :func:`output_buffers`: the aliased caches are the input tensors themselves)."""
    outputs = output_buffers(family, inputs, out) if outputs is None else outputs
    scalars = spec.scalar_values([tuple(t.shape) for t in inputs])
    pick = {"input": inputs, "scalar": scalars, "output": outputs}
    return [pick[p.role][p.index] for p in spec.params]


def grid_of(spec, inputs: Sequence[torch.Tensor]) -> tuple:
    return tuple(spec.grid_values([tuple(t.shape) for t in inputs]))


import_plugins_package()
