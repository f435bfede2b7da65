"""Builder entries: add one SSM layer's ReplaySSM step to a ``tensorrt.INetworkDefinition``.

Import-guarded: calling it without TensorRT (>= 10.9 for ``aot=True``, >= 10.6 for JIT)
raises ImportError with the fix. Each Triton replay step (Mamba-2, GDN, KDA) is one kernel, so
one plugin layer; the Mamba-2 CUDA step (:func:`add_mamba2_replay_step_cuda`) is two kernels,
so two layers, the first one's outputs feeding the second.
"""

from dataclasses import dataclass
from typing import Optional, Tuple

from trtllm_replayssm.kernels.gated_delta_common import H200_MULTIPROCESSORS

from . import NAMESPACE, gated_delta, mamba2, mamba2_cuda
from .spec import TensorInfo, check_checkpoint_scale
from . import tensorrt_plugin
from .tensorrt_plugin import _dtype_name, import_tensorrt, register_plugins

__all__ = [
    "ReplayStepLayers",
    "add_gdn_replay_step",
    "add_kda_replay_step",
    "add_mamba2_replay_step",
    "add_mamba2_replay_step_cuda",
]


def add_mamba2_replay_step(
    network,
    checkpoint,
    x_records,
    dt_records,
    B_records,
    cursor,
    arrivals,
    x,
    dt,
    A,
    B,
    C,
    *,
    slot_ids,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus: bool = True,
    checkpoint_scale=None,
    rounding_seed: Optional[int] = None,
    batch_hint: int = 64,
    aot: bool = True,
    name: Optional[str] = None,
):
    """Adds a ``replayssm::mamba2_replay_step`` plugin layer; arguments as the op
    ``trtllm_replayssm.ops.mamba2_replay_step`` with the cache given tensor by tensor
    (``tensorrt.ITensor`` each; layouts in :mod:`trtllm_replayssm_plugins.mamba2`).

    The geometry comes from the caches' static dimensions; batch and num_slots may be dynamic.
    The launch configuration is the op's choice for ``batch_hint`` rows. An fp8 (e4m3)
    checkpoint needs ``checkpoint_scale`` ([num_slots, nheads, head_dim] f32, the cache's row
    scales); any other refuses one. ``rounding_seed`` (an int in [0, 2^31), bf16, fp16 or fp8
    checkpoints) rounds each flush stochastically, as the op's; it is fixed in the engine.

    Returns:
        The ``IPluginV3Layer``. Output 0 is y [batch, nheads, head_dim]; outputs 1..6 are
        checkpoint, x_records, dt_records, B_records, cursor, arrivals after the step, aliased to
        the inputs; output 7 is checkpoint_scale, aliased with an fp8 checkpoint (otherwise an
        unused buffer). To keep the caches in caller-owned memory across engine runs, mark them
        as network outputs and bind each to the same address as its input (the network needs
        ``PreviewFeature.ALIASED_PLUGIN_IO_10_03`` in the builder config).

    Raises:
        ImportError: no suitable TensorRT. ValueError, TypeError: inputs that do not fit, a
        checkpoint_scale missing (fp8) or not expected, a rounding_seed with an fp32 checkpoint.
    """
    trt, trtp = import_tensorrt(aot)
    register_plugins(aot)
    state_dtype = _check_scale(trt, mamba2, checkpoint, checkpoint_scale, slot_ids)
    inputs, flags = mamba2.plugin_inputs(
        dict(
            checkpoint=checkpoint,
            x_records=x_records,
            dt_records=dt_records,
            B_records=B_records,
            cursor=cursor,
            arrivals=arrivals,
            x=x,
            dt=dt,
            A=A,
            B=B,
            C=C,
            slot_ids=slot_ids,
            D=D,
            z=z,
            dt_bias=dt_bias,
            checkpoint_scale=checkpoint_scale,
        )
    )
    attrs = mamba2.layer_attrs(
        tuple(checkpoint.shape),
        tuple(x_records.shape),
        tuple(B_records.shape),
        state_dtype=state_dtype,
        dt_softplus=dt_softplus,
        batch_hint=batch_hint,
        rounding_seed=rounding_seed,
        **flags,
    )
    return _add(network, getattr(trtp.op, NAMESPACE).mamba2_replay_step(*inputs, **attrs.values()), aot, name)


@dataclass(frozen=True)
class ReplayStepLayers:
    """The layers one replay step added, and its results in the single-layer plugin's output
    order (:func:`add_mamba2_replay_step`): ``get_output(0)`` is y, 1..5 checkpoint, x_records,
    dt_records, B_records, cursor after the step (each a layer's output, aliased to the input it
    updates). The two-layer step neither reads nor writes arrivals, so there is no output 6."""

    layers: Tuple[object, ...]
    outputs: Tuple[object, ...]

    def get_output(self, index: int):
        return self.outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)


def add_mamba2_replay_step_cuda(
    network,
    checkpoint,
    x_records,
    dt_records,
    B_records,
    cursor,
    arrivals,
    x,
    dt,
    A,
    B,
    C,
    *,
    slot_ids,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus: bool = True,
    batch_hint: int = 64,
    multiprocessors: int = H200_MULTIPROCESSORS,
    name: Optional[str] = None,
) -> ReplayStepLayers:
    """Adds the Mamba-2 replay step as the op's CUDA C++ kernels (sm_90a, AOT): the layers
    ``replayssm::mamba2_replay_coefficients`` and ``replayssm::mamba2_replay_step_cuda``
    (:mod:`trtllm_replayssm_plugins.mamba2_cuda`) and a constant [2, 32] i32 tensor, the
    checkpoint's tensor-map template. Arguments as :func:`add_mamba2_replay_step`, in the same
    order; ``arrivals`` is not used (these kernels neither read nor write it): pass None, and do
    not declare it as a network input. ``multiprocessors``: of the GPU the engine is for (the
    step kernel's persistent grid). The network must be built on an sm_90 GPU (the PTX is for
    sm_90a) with its CUDA driver (the template is encoded by ``cuTensorMapEncodeTiled``); the
    engine runs on sm_90 GPUs with a CUDA 13 driver.

    Returns:
        :class:`ReplayStepLayers`: outputs as :func:`add_mamba2_replay_step`'s 0..5 (y, the caches
        after the step, aliased where a layer updates them: checkpoint and cursor by layer 2,
        the records by layer 1). Bind them in place as described there.

    Raises:
        ImportError: no TensorRT with AOT plugins (>= 10.9). ValueError: a build GPU other than
            sm_90; a layer the CUDA export cannot take
            (:func:`~trtllm_replayssm_plugins.mamba2_cuda.export_unsupported`; e.g. an fp32
            checkpoint, whose step kernel needs more than 48 KiB of shared memory), or inputs
            that do not fit. TypeError: wrong dtypes.
    """
    trt, trtp = import_tensorrt(True)
    register_plugins(True)
    arch = tensorrt_plugin.build_arch()
    if arch != mamba2_cuda.ARCH:
        raise ValueError(
            f"add_mamba2_replay_step_cuda: the build GPU is sm_{arch}; the CUDA step's export is for sm_{mamba2_cuda.ARCH}a "
            "(use add_mamba2_replay_step)"
        )
    tensors = dict(checkpoint=checkpoint, x_records=x_records, dt_records=dt_records, B_records=B_records,
                   cursor=cursor, arrivals=arrivals, x=x, dt=dt, A=A, B=B, C=C, slot_ids=slot_ids, D=D, z=z,
                   dt_bias=dt_bias)  # fmt: skip
    flags = {f"has_{n}": tensors[n] is not None for n in ("D", "z", "dt_bias")}
    state_dtype = _dtype_name(trt, checkpoint.dtype)
    _, nheads, head_dim, d_state = tuple(checkpoint.shape)
    attrs = mamba2_cuda.Mamba2CudaAttrs.for_layer(
        nheads, head_dim, d_state, tuple(B_records.shape)[1], tuple(x_records.shape)[2], state_dtype=state_dtype,
        dt_softplus=dt_softplus, batch_hint=batch_hint, multiprocessors=multiprocessors, **flags,
    )  # fmt: skip
    template = mamba2_cuda.map_template(attrs, state_dtype)
    tensors["tensor_maps"] = network.add_constant(template.shape, template).get_output(0)
    for absent, substitute in {**mamba2_cuda.COEFFICIENTS.SUBSTITUTES, **mamba2_cuda.STEP.SUBSTITUTES}.items():
        if tensors[absent] is None:
            tensors[absent] = tensors[substitute]
    op = getattr(trtp.op, NAMESPACE)
    l1 = _add(network, op.mamba2_replay_coefficients(*[tensors[n] for n in mamba2_cuda.COEFFICIENTS.INPUTS],
                                                     **attrs.values()), True, name and f"{name}/coefficients")  # fmt: skip
    coef, c_rows, x_rec, dt_rec, B_rec = (l1.get_output(i) for i in range(len(mamba2_cuda.COEFFICIENTS.OUTPUTS)))
    tensors.update(coef=coef, c_rows=c_rows, x_records=x_rec, B_records=B_rec)
    l2 = _add(network, op.mamba2_replay_step_cuda(*[tensors[n] for n in mamba2_cuda.STEP.INPUTS], **attrs.values()),
              True, name and f"{name}/step")  # fmt: skip
    y, ckpt, cur = (l2.get_output(i) for i in range(3))
    return ReplayStepLayers((l1, l2), (y, ckpt, x_rec, dt_rec, B_rec, cur))


def _check_scale(trt, family, checkpoint, checkpoint_scale, slot_ids) -> str:
    """The checkpoint's dtype name, after checking that ``checkpoint_scale`` is given exactly
    with an fp8 one (slot_ids takes its place otherwise, as the plugin's check expects)."""
    infos = [
        TensorInfo(_dtype_name(trt, t.dtype), len(tuple(t.shape)))
        for t in (checkpoint, slot_ids if checkpoint_scale is None else checkpoint_scale)
    ]
    check_checkpoint_scale(family.PLUGIN, *infos, family.SCALE_LAYOUT)
    return infos[0].dtype


def _add(network, call, aot: bool, name: Optional[str]):
    # TensorRT >= 10.9 returns a creation callable that takes the AOT/JIT choice; 10.6 - 10.8 a tuple.
    layer = network.add_plugin(call, aot=aot) if callable(call) else network.add_plugin(call)
    if name:
        layer.name = name
    return layer


def _add_gated_delta_replay_step(
    per_channel,
    network,
    checkpoint,
    d_records,
    k_records,
    g_records,
    cursor,
    arrivals,
    q,
    k,
    v,
    g,
    beta,
    *,
    slot_ids,
    scale,
    use_qk_l2norm,
    checkpoint_scale,
    rounding_seed,
    batch_hint,
    aot,
    name,
):
    trt, trtp = import_tensorrt(aot)
    register_plugins(aot)
    state_dtype = _check_scale(trt, gated_delta, checkpoint, checkpoint_scale, slot_ids)
    inputs = gated_delta.plugin_inputs(
        dict(
            checkpoint=checkpoint,
            d_records=d_records,
            k_records=k_records,
            g_records=g_records,
            cursor=cursor,
            arrivals=arrivals,
            q=q,
            k=k,
            v=v,
            g=g,
            beta=beta,
            slot_ids=slot_ids,
            checkpoint_scale=checkpoint_scale,
        )
    )
    attrs = gated_delta.layer_attrs(
        tuple(checkpoint.shape),
        tuple(d_records.shape),
        tuple(k_records.shape),
        per_channel=per_channel,
        state_dtype=state_dtype,
        use_qk_l2norm=use_qk_l2norm,
        scale=scale,
        batch_hint=batch_hint,
        rounding_seed=rounding_seed,
    )
    return _add(network, getattr(trtp.op, NAMESPACE).gated_delta_replay_step(*inputs, **attrs.values()), aot, name)


def add_gdn_replay_step(
    network,
    checkpoint,
    d_records,
    k_records,
    g_records,
    cursor,
    arrivals,
    q,
    k,
    v,
    g,
    beta,
    *,
    slot_ids,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    checkpoint_scale=None,
    rounding_seed: Optional[int] = None,
    batch_hint: int = 64,
    aot: bool = True,
    name: Optional[str] = None,
):
    """Adds a ``replayssm::gated_delta_replay_step`` layer for a Gated DeltaNet layer; arguments
    as ``trtllm_replayssm.ops.gdn_replay_step`` with the cache given tensor by tensor (layouts in
    :mod:`trtllm_replayssm_plugins.gated_delta`; g [batch, v_heads]). ``scale`` None is
    head_k_dim ** -0.5. ``checkpoint_scale`` ([num_slots, v_heads, head_v_dim] f32) comes exactly
    with an fp8 checkpoint; ``rounding_seed`` as in :func:`add_mamba2_replay_step`. Returns the
    layer: output 0 is o, outputs 1..6 the caches, aliased, output 7 checkpoint_scale (aliased
    with fp8; see :func:`add_mamba2_replay_step` for binding them in place)."""
    return _add_gated_delta_replay_step(
        False,
        network,
        checkpoint,
        d_records,
        k_records,
        g_records,
        cursor,
        arrivals,
        q,
        k,
        v,
        g,
        beta,
        slot_ids=slot_ids,
        scale=scale,
        use_qk_l2norm=use_qk_l2norm,
        checkpoint_scale=checkpoint_scale,
        rounding_seed=rounding_seed,
        batch_hint=batch_hint,
        aot=aot,
        name=name,
    )


def add_kda_replay_step(
    network,
    checkpoint,
    d_records,
    k_records,
    g_records,
    cursor,
    arrivals,
    q,
    k,
    v,
    g,
    beta,
    *,
    slot_ids,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    checkpoint_scale=None,
    rounding_seed: Optional[int] = None,
    batch_hint: int = 64,
    aot: bool = True,
    name: Optional[str] = None,
):
    """As :func:`add_gdn_replay_step` for a Kimi Delta Attention layer (log-decay per key
    channel: g [batch, v_heads, head_k_dim], g_records [num_slots, v_heads, L, head_k_dim])."""
    return _add_gated_delta_replay_step(
        True,
        network,
        checkpoint,
        d_records,
        k_records,
        g_records,
        cursor,
        arrivals,
        q,
        k,
        v,
        g,
        beta,
        slot_ids=slot_ids,
        scale=scale,
        use_qk_l2norm=use_qk_l2norm,
        checkpoint_scale=checkpoint_scale,
        rounding_seed=rounding_seed,
        batch_hint=batch_hint,
        aot=aot,
        name=name,
    )
