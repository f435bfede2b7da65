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
SUBPROCESS_PRELUDE = (f"import sys; sys.path[:0] = [{ROOT!r}, {HERE!r}]\n"
                      "import plugin_cases; plugin_cases.import_plugins_package()\n")

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
TORCH_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int32: "i32"}


def import_plugins_package():
    try:
        return importlib.import_module("trtllm_replayssm_plugins")
    except ModuleNotFoundError:
        pass
    spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_plugins", os.path.join(ROOT, "plugins", "__init__.py"),
        submodule_search_locations=[os.path.join(ROOT, "plugins")])
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


def make_layer(a, *, num_slots: int, state_dtype, act_dtype, device, L_spread: bool = True,
               D_per_dim: bool = False, generator=None) -> Dict[str, torch.Tensor]:
    """A layer's cache (garbage in unused slots and record positions, cursors spread over
    [0, L)) and parameters, as plugin-named tensors (optionals absent when the flag is off)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    g = generator
    c = Mamba2ReplayCache.allocate(num_slots, a.nheads, a.head_dim, a.d_state, a.ngroups, a.L,
                                   state_dtype=state_dtype, act_dtype=act_dtype, device=device)
    c.checkpoint.copy_(torch.randn(c.checkpoint.shape, generator=g).to(state_dtype))
    c.x_records.copy_(torch.randn(c.x_records.shape, generator=g).to(act_dtype))
    c.B_records.copy_(torch.randn(c.B_records.shape, generator=g).to(act_dtype))
    c.dt_records.copy_(torch.rand(c.dt_records.shape, generator=g) * 0.1)
    if L_spread:
        c.cursor.copy_(torch.arange(num_slots, dtype=torch.int32) % a.L)
    from trtllm_replayssm_plugins import mamba2
    t = {n: getattr(c, n) for n in mamba2.INPUTS[:6]}  # the cache inputs
    t["A"] = -(torch.rand(a.nheads, generator=g) + 1.0).to(device)
    if a.has_D:
        shape = (a.nheads, a.head_dim) if D_per_dim else (a.nheads,)
        t["D"] = torch.randn(shape, generator=g).to(device)
    if a.has_dt_bias:
        t["dt_bias"] = (torch.rand(a.nheads, generator=g) - 4.0).to(device)
    return t


def make_step(a, batch: int, act_dtype, device, generator=None) -> Dict[str, torch.Tensor]:
    """Random inputs of one decode step (z only when the layer has it)."""
    def r(*shape):
        return torch.randn(*shape, generator=generator).to(act_dtype).to(device)
    step = dict(x=r(batch, a.nheads, a.head_dim), dt=r(batch, a.nheads),
                B=r(batch, a.ngroups, a.d_state), C=r(batch, a.ngroups, a.d_state))
    if a.has_z:
        step["z"] = r(batch, a.nheads, a.head_dim)
    return step


def launch_arguments(spec, inputs: Sequence[torch.Tensor], out: torch.Tensor) -> list:
    """The kernel arguments exactly as TensorRT passes them: per ``spec.params`` an input
    tensor, a scalar (from the input shapes) or an output tensor (the aliased caches are the
    input tensors themselves)."""
    from trtllm_replayssm_plugins import mamba2
    outputs = [out] + [inputs[mamba2.ALIASED_OUTPUTS[o]] for o in range(1, len(mamba2.OUTPUTS))]
    scalars = spec.scalar_values([tuple(t.shape) for t in inputs])
    pick = {"input": inputs, "scalar": scalars, "output": outputs}
    return [pick[p.role][p.index] for p in spec.params]


def grid_of(spec, inputs: Sequence[torch.Tensor]) -> tuple:
    return tuple(spec.grid_values([tuple(t.shape) for t in inputs]))


import_plugins_package()
