"""The TensorRT-LLM-facing part of the engine flow: a thin, import-guarded adapter.

Nothing here decides anything: which layers, the plugin fields, the rewritten forward, the
engine I/O and the engine config entries are :mod:`.hook`'s plain functions. This module only
connects them to TensorRT-LLM v1.2.1 (every name it touches is in ``hook.REQUIREMENTS``, checked
before anything is rewritten) and to TensorRT:

- :func:`enable_replayssm_engine` rewrites a ``MambaForCausalLM`` before ``build``: each
  ``Mamba2`` module's ``forward`` becomes :func:`.hook.replay_forward` over :class:`_TrtOps`,
  which adds the ``replayssm::Mamba2Route`` and ``replayssm::Mamba2ReplayBlock`` plugin layers
  (the C++ library of ``plugins/cpp``, loaded by :func:`load_plugin_library`) and the stock
  ``selective_scan``; ``model.config.state_size`` becomes the engine layout's.
- :func:`run_trtllm_build` runs ``trtllm-build``'s ``main`` with ``tensorrt_llm.commands.build.build``
  wrapped so that every model it builds is rewritten first, then checks the written engine
  config (``hook.check_engine_config``).

Not run: TensorRT-LLM cannot be installed where this was written; the adapter was only imported.
A hook that cannot engage raises :class:`.hook.EngineFlowError` or ImportError; it never builds
the stock engine instead.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import os
import sys
import warnings
from typing import List, Optional, Sequence

from .hook import (
    BLOCK_PLUGIN,
    PINNED_RELEASE,
    PLUGIN_NAMESPACE,
    ROUTE_PLUGIN,
    EngineBuildSettings,
    EngineFlowError,
    block_plugin_fields,
    check_engine_config,
    check_settings,
    engine_config_record,
    find_mamba2_layers,
    missing_requirements,
    plan_layer,
    replay_forward,
    route_plugin_fields,
)

__all__ = ["PLUGIN_LIBRARY_ENV", "import_tensorrt_llm", "load_plugin_library", "enable_replayssm_engine", "run_trtllm_build"]

PLUGIN_LIBRARY_ENV = "TRTLLM_REPLAYSSM_PLUGIN_LIB"
_PLAN_ATTR = "_replayssm_engine_plan"


def import_tensorrt_llm():
    """``tensorrt_llm``, after checking every name of ``hook.REQUIREMENTS``.

    Raises:
        ImportError: tensorrt_llm is not importable (the message names the release needed).
        EngineFlowError: the installed release lacks a name or a parameter the hook uses.
    """
    try:
        import tensorrt_llm
    except ImportError as e:
        raise ImportError(
            f"trtllm_replayssm_builders.trtllm_engine: import tensorrt_llm failed ({e}); expected TensorRT-LLM "
            f"{PINNED_RELEASE} (pip install tensorrt_llm=={PINNED_RELEASE}, on a machine with a CUDA GPU)"
        ) from e

    def lookup(module, name):
        try:
            obj = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            return None, None
        try:
            return obj, list(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            return obj, None

    missing = missing_requirements(lookup)
    version = getattr(tensorrt_llm, "__version__", "?")
    if missing:
        raise EngineFlowError(
            f"import_tensorrt_llm: TensorRT-LLM {version} lacks what the engine flow uses (written for "
            f"{PINNED_RELEASE}):\n" + "\n".join(missing)
        )
    if version != PINNED_RELEASE:
        warnings.warn(
            f"trtllm_replayssm engine flow: written for TensorRT-LLM {PINNED_RELEASE}, running {version}", stacklevel=2
        )
    return tensorrt_llm


def load_plugin_library(path: Optional[str] = None) -> str:
    """Loads the ReplaySSM engine plugin library (built from ``plugins/cpp``) into this process;
    ``path`` defaults to ``$TRTLLM_REPLAYSSM_PLUGIN_LIB``.

    The library registers its two creators with TensorRT's plugin registry when it is loaded (a
    static initializer, as under ``LD_PRELOAD`` at serve time), so it is loaded with ``dlopen``
    (``ctypes.CDLL``, after ``import tensorrt`` so that it binds to the same ``libnvinfer``), not
    with ``IPluginRegistry::loadLibrary``, which would register them a second time. Loading it
    again (or when it was preloaded) registers nothing new.

    Raises:
        EngineFlowError: no path, no file, or the library registers no ``replayssm`` creators.
        OSError: the dynamic loader refuses the file (e.g. a missing ``libnvinfer`` or ``libcuda``).
    """
    path = path or os.environ.get(PLUGIN_LIBRARY_ENV)
    if not path or not os.path.isfile(path):
        raise EngineFlowError(
            f"load_plugin_library: path is {path!r}; expected the plugin library built from plugins/cpp "
            f"(--replayssm-plugin-lib or ${PLUGIN_LIBRARY_ENV})"
        )
    import ctypes

    import tensorrt as trt

    ctypes.CDLL(os.path.abspath(path), mode=ctypes.RTLD_GLOBAL)
    registry = trt.get_plugin_registry()
    for name, version in (ROUTE_PLUGIN, BLOCK_PLUGIN):
        if registry.get_creator(name, version, PLUGIN_NAMESPACE) is None:
            raise EngineFlowError(
                f"load_plugin_library: {path} registers no {PLUGIN_NAMESPACE}::{name} version {version}; "
                f"expected the creators of plugins/cpp"
            )
    return path


class _TrtOps:
    """``ops`` of :func:`.hook.replay_forward` on a TensorRT-LLM network being built."""

    def __init__(self, trt, arch: int):
        from tensorrt_llm import functional

        self._trt, self._arch = trt, arch
        self._functional, self._net = functional, functional.default_trtnet
        self.selective_scan = functional.selective_scan

    def _plugin(self, name_version, fields):
        trt = self._trt
        import numpy as np

        creator = trt.get_plugin_registry().get_creator(*name_version, PLUGIN_NAMESPACE)
        if creator is None:
            raise EngineFlowError(
                f"replay_forward: plugin {PLUGIN_NAMESPACE}::{name_version[0]} is not registered; expected it loaded"
            )
        kinds = {"char": (trt.PluginFieldType.CHAR, np.int8), "int32": (trt.PluginFieldType.INT32, np.int32)}
        kinds["int64"] = (trt.PluginFieldType.INT64, np.int64)
        pf = []
        for f in fields:
            ftype, np_type = kinds[f.kind]
            data = np.frombuffer(f.value.encode(), dtype=np.int8) if f.kind == "char" else np.array(f.value, dtype=np_type)
            pf.append(trt.PluginField(f.name, data, ftype))
        return creator.create_plugin(name_version[0], trt.PluginFieldCollection(pf), trt.TensorRTPhase.BUILD)

    def _add(self, plugin, inputs):
        layer = self._net().add_plugin_v3([t.trt_tensor for t in inputs], [], plugin)
        return self._functional._create_tensor(layer.get_output(0), layer)

    def route(self, plan, host_request_types, slot_mapping):
        return self._add(self._plugin(ROUTE_PLUGIN, route_plugin_fields(plan)), [host_request_types, slot_mapping])

    def replay_block(self, plan, inputs):
        from trtllm_replayssm_plugins.mamba2_block import ENTRY
        from trtllm_replayssm_plugins.ptx import compile_ptx

        compiled = compile_ptx(plan.table.spec, ENTRY, self._arch)
        return self._add(self._plugin(BLOCK_PLUGIN, block_plugin_fields(plan, compiled)), inputs)


def _settings(model, build_config, buffer_len: int) -> EngineBuildSettings:
    pc = build_config.plugin_config
    mode = getattr(build_config, "speculative_decoding_mode", None)
    conv = getattr(pc, "mamba_conv1d_plugin", None)
    dtype = model.config.dtype
    return EngineBuildSettings(
        max_batch_size=build_config.max_batch_size,
        max_beam_width=build_config.max_beam_width,
        paged_state=bool(pc.paged_state),
        remove_input_padding=bool(pc.remove_input_padding),
        mamba_conv1d_plugin=conv not in (None, False, "disable"),
        speculative=mode is not None and getattr(mode, "name", str(mode)).upper() != "NONE",
        tp_size=model.config.mapping.tp_size,
        pp_size=model.config.mapping.pp_size,
        dtype=dtype if isinstance(dtype, str) else str(dtype),
        mamba_version=getattr(model.config, "mamba_version", None),
        buffer_len=buffer_len,
    )


def enable_replayssm_engine(model, build_config, *, buffer_len: int = 16, arch: Optional[int] = None) -> dict:
    """Rewrites ``model`` (a v1.2.1 ``MambaForCausalLM``, before ``build``) in place.

    Args:
        model: the model ``build`` will trace; its ``Mamba2`` modules get :func:`.hook.replay_forward`.
        build_config: the ``BuildConfig`` it is built with (read only).
        buffer_len: L, records per slot.
        arch: compute capability for the PTX (default: the current CUDA device's).
    Returns:
        The ``pretrained_config`` entries set (:func:`.hook.engine_config_record`).
    Raises:
        ImportError, EngineFlowError: see :func:`import_tensorrt_llm`; a model that is not a
            Mamba-2 ``MambaForCausalLM`` or was rewritten already; build options the flow
            cannot use (:func:`.hook.check_settings`).
    """
    import_tensorrt_llm()
    from tensorrt_llm.layers.ssm import Mamba2
    from tensorrt_llm.models import MambaForCausalLM

    if not isinstance(model, MambaForCausalLM):
        raise EngineFlowError(f"enable_replayssm_engine: model is {type(model).__name__}; expected MambaForCausalLM")
    settings = _settings(model, build_config, buffer_len)
    check_settings(settings)
    layers = find_mamba2_layers(model, Mamba2)
    done = [i for i, layer in layers if _PLAN_ATTR in layer.__dict__]
    if done:
        raise EngineFlowError(f"enable_replayssm_engine: layers {done} were rewritten already; expected a fresh model")
    if arch is None:
        import torch

        if not torch.cuda.is_available():
            raise EngineFlowError(
                "enable_replayssm_engine: arch is None and torch sees no CUDA GPU; expected one (or arch=90)"
            )
        major, minor = torch.cuda.get_device_capability()
        arch = 10 * major + minor
    import tensorrt as trt

    ops = _TrtOps(trt, arch)
    plans = [plan_layer(i, layer, settings) for i, layer in layers]
    for (_, layer), plan in zip(layers, plans):
        layer.forward = functools.partial(replay_forward, layer, plan, ops)
        setattr(layer, _PLAN_ATTR, plan)
    record = engine_config_record(plans, model.config.state_size)
    for key, value in record.items():
        setattr(model.config, key, value)
    return record


@contextlib.contextmanager
def _wrapped_build(buffer_len: int, records: List[dict]):
    """``tensorrt_llm.commands.build.build`` rewrites each model first (restored on exit)."""
    module = importlib.import_module("tensorrt_llm.commands.build")
    original = module.build

    def build_with_replayssm(model, build_config):
        records.append(enable_replayssm_engine(model, build_config, buffer_len=buffer_len))
        return original(model, build_config)

    module.build = build_with_replayssm
    try:
        yield
    finally:
        module.build = original


def run_trtllm_build(trtllm_build_args: Sequence[str], *, buffer_len: int, plugin_lib: Optional[str] = None) -> int:
    """``trtllm-build`` with the hook: ``trtllm_build_args`` go to its own parser unchanged.

    Raises:
        ImportError, EngineFlowError: no TensorRT-LLM, no plugin library, a build the hook did
            not rewrite (no model was built in this process), or an engine config without the
            layout.
    """
    import_tensorrt_llm()
    load_plugin_library(plugin_lib)
    from tensorrt_llm.commands import build as trtllm_build

    args = trtllm_build.parse_arguments().parse_args(list(trtllm_build_args))
    records: List[dict] = []
    argv = sys.argv
    sys.argv = ["trtllm-build", *trtllm_build_args]
    try:
        with _wrapped_build(buffer_len, records):
            trtllm_build.main()
    finally:
        sys.argv = argv
    if not records:
        raise EngineFlowError(
            "run_trtllm_build: the ReplaySSM hook rewrote 0 models; expected trtllm-build to build in this "
            "process (--workers 1; with several ranks, mpirun)"
        )
    config_path = os.path.join(args.output_dir, "config.json")
    if not args.dry_run:
        with open(config_path) as f:
            check_engine_config(json.load(f), records[0])
    return 0
