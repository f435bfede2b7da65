"""TensorRT registration of the ReplaySSM plugins (``tensorrt.plugin``, namespace "replayssm").

Thin on purpose: each definition only translates between TensorRT's descriptors and the plain
functions of the family module (``mamba2``: shape checks, kernel specialization, scalars, grid)
and :func:`~trtllm_replayssm_plugins.ptx.compile_ptx`.

Per plugin, :func:`register_plugins` defines:

* ``register``: shape/dtype inference. Checks the inputs against the attributes (raising
  ``ValueError``/``TypeError`` at network build time), returns ``out`` shaped like ``x`` and the
  cache tensors aliased to their inputs (in-place update); the checkpoint_scale output is
  aliased to its input with an fp8 checkpoint, else a new buffer like its substitute, slot_ids
  (:func:`~trtllm_replayssm_plugins.spec.aliased_outputs`); an output of a shape of its own
  (the CUDA layers' ``NEW_OUTPUTS``) from its dimensions.
* ``aot_impl`` (TensorRT >= 10.9): the entry kernel's name, its PTX for the build GPU
  (``family.compile_kernel``), the launch parameters and the scalar arguments as ``SymInt32``
  expressions. The engine then runs without Python; attributes are not serialized.
* ``impl`` (JIT, TensorRT 10.6 - 10.8 or on request): runs the ``replayssm::`` op through
  PyTorch on TensorRT's stream; the serving process must import this module. The CUDA step's
  two layers (:data:`~trtllm_replayssm_plugins.AOT_ONLY`) have none: they are registered only
  with ``aot_impl``.

The functions' parameter lists are generated from the family's input names and attribute
fields, because ``tensorrt.plugin`` reads them with ``inspect.signature``: inputs, attributes,
then ``outputs`` and ``tactic`` (AOT) or ``outputs`` and ``stream`` (JIT).
"""

import inspect
from typing import Tuple

import triton

from . import AOT_ONLY, FAMILIES, NAMESPACE
from .spec import FP8, InputDim, TensorInfo, aliased_outputs

__all__ = ["MIN_TENSORRT", "MIN_TENSORRT_AOT", "build_arch", "import_tensorrt", "register_plugins", "version_tuple"]

MIN_TENSORRT = (10, 6)  # tensorrt.plugin (JIT) appeared in 10.6
MIN_TENSORRT_AOT = (10, 9)  # tensorrt.plugin.aot_impl appeared in 10.9

_REGISTERED = False


def version_tuple(version: str) -> Tuple[int, int]:
    """(major, minor) of a version string such as ``"10.9.0.34"``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def import_tensorrt(aot: bool = True):
    """``(tensorrt, tensorrt.plugin)``, or ImportError naming the version needed and the fix."""
    need = MIN_TENSORRT_AOT if aot else MIN_TENSORRT
    need_s = ".".join(map(str, need))
    try:
        import tensorrt as trt
    except ImportError as e:
        raise ImportError(
            f"trtllm_replayssm_plugins needs TensorRT >= {need_s} "
            f"({'AOT' if aot else 'JIT'} plugins); install it with "
            "`pip install 'trtllm_replayssm[tensorrt]'`"
        ) from e
    if version_tuple(trt.__version__) < need:
        raise ImportError(
            f"trtllm_replayssm_plugins needs TensorRT >= {need_s} for "
            f"{'AOT' if aot else 'JIT'} plugins; found {trt.__version__}"
        )
    import tensorrt.plugin as trtp

    return trt, trtp


def _dtype_name(trt, dtype) -> str:
    """The plugin layer's name of a TensorRT dtype (``spec.DTYPE_NAMES``; fp8 is TensorRT's
    DataType.FP8, e4m3), or TensorRT's own for anything else."""
    names = {trt.float32: "f32", trt.bfloat16: "bf16", trt.float16: "f16", trt.fp8: FP8, trt.int32: "i32"}
    return names.get(dtype, str(dtype))


def _info(trt, desc) -> TensorInfo:
    exprs = list(desc.shape_expr)
    if any(e.is_fake for e in exprs):
        return TensorInfo(_dtype_name(trt, desc.dtype), len(exprs))
    return TensorInfo(
        _dtype_name(trt, desc.dtype), len(exprs), tuple(e.constant_value() if e.is_constant else None for e in exprs)
    )


def build_arch() -> int:
    """Compute capability of the GPU TensorRT builds on (the PTX is compiled for it)."""
    return triton.runtime.driver.active.get_current_target().arch


def _signature(names, annotations, tail, returns=inspect.Signature.empty) -> inspect.Signature:
    """Parameters ``names`` (annotated where ``annotations`` has an entry), then ``tail``."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(n, kind, annotation=a) for n, a in zip(names, annotations)]
    params += [inspect.Parameter(n, kind) for n in names[len(annotations) :] + tuple(tail)]
    return inspect.Signature(params, return_annotation=returns)


def _define(trt, trtp, family) -> None:
    plugin_id = f"{NAMESPACE}::{family.PLUGIN}"
    attr_fields = list(family.ATTRS.__dataclass_fields__)
    attr_types = [{"int": int, "bool": bool, "float": float}[family.ATTRS.__dataclass_fields__[n].type] for n in attr_fields]
    n_in, n_attr = len(family.INPUTS), len(attr_fields)

    def register_fn(*descs, **attrs):
        a = family.ATTRS(**attrs)
        infos = [_info(trt, d) for d in descs]
        family.check_inputs(a, infos)
        aliases = aliased_outputs(family, infos[0].dtype)
        new = family.NEW_OUTPUTS(a) if hasattr(family, "NEW_OUTPUTS") else {}
        types = {"f32": trt.float32, "i32": trt.int32}

        def output(o):
            if o in aliases:
                return descs[aliases[o]].aliased()
            if o in new:
                dims, dtype = new[o]
                shape = tuple(descs[d.input].shape_expr[d.axis] if isinstance(d, InputDim) else d for d in dims)
                return trtp.from_shape_expr(shape, types[dtype])
            return descs[family.LIKE_INPUT[o]].like()

        return tuple(output(o) for o in range(len(family.OUTPUTS)))

    register_fn.__signature__ = _signature(
        family.INPUTS + tuple(attr_fields),
        [trtp.TensorDesc] * n_in + attr_types,
        (),
        Tuple[(trtp.TensorDesc,) * len(family.OUTPUTS)],
    )
    trtp.register(plugin_id)(register_fn)

    if hasattr(trtp, "aot_impl"):

        def aot_impl_fn(*args):
            descs, values = args[:n_in], args[n_in : n_in + n_attr]
            a = family.ATTRS(*values)
            spec = family.kernel_spec(a, [_info(trt, d) for d in descs])
            compiled = family.compile_kernel(spec, build_arch())
            shapes = [d.shape_expr for d in descs]
            launch = trtp.KernelLaunchParams()
            launch.grid_x, launch.grid_y, launch.grid_z = spec.grid_values(shapes)
            launch.block_x, launch.block_y, launch.block_z = spec.block
            launch.shared_mem = compiled.shared_mem
            scalars = trtp.SymIntExprs.from_tuple([trtp.SymInt32(v) for v in spec.scalar_values(shapes)])
            return compiled.kernel_name, compiled.ptx, launch, scalars

        aot_impl_fn.__signature__ = _signature(family.INPUTS + tuple(attr_fields), [], ("outputs", "tactic"))
        trtp.aot_impl(plugin_id)(aot_impl_fn)

    if not hasattr(family, "run_op"):
        return

    def impl_fn(*args, stream):
        import torch

        tensors, values, outputs = args[:n_in], args[n_in : n_in + n_attr], args[n_in + n_attr]
        a = family.ATTRS(*values)
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            outs = [torch.as_tensor(t, device="cuda") for t in outputs]
            ins = [torch.as_tensor(t, device="cuda") for t in tensors]
            state = FP8 if ins[0].dtype == torch.float8_e4m3fn else str(ins[0].dtype)
            for o, i in aliased_outputs(family, state).items():
                ins[i] = outs[o]  # the same buffer, through its writable (output) view
            family.run_op(a, ins, outs[0])

    impl_fn.__signature__ = _signature(family.INPUTS + tuple(attr_fields), [], ("outputs", "stream"))
    trtp.impl(plugin_id)(impl_fn)


def register_plugins(aot: bool = True) -> None:
    """Registers every plugin of :data:`~trtllm_replayssm_plugins.FAMILIES` and, where TensorRT
    has AOT plugins, of :data:`~trtllm_replayssm_plugins.AOT_ONLY` (once per process).

    Raises:
        ImportError: TensorRT missing or older than needed (10.9 with ``aot``, else 10.6).
    """
    global _REGISTERED
    trt, trtp = import_tensorrt(aot)
    if _REGISTERED:
        return
    for family in FAMILIES + (AOT_ONLY if hasattr(trtp, "aot_impl") else ()):
        _define(trt, trtp, family)
    _REGISTERED = True
