"""Builder entries: add one SSM layer's ReplaySSM step to a ``tensorrt.INetworkDefinition``.

Import-guarded: calling it without TensorRT (>= 10.9 for ``aot=True``, >= 10.6 for JIT)
raises ImportError with the fix. Each replay step (Mamba-2, GDN, KDA) is one kernel, so one
plugin layer; a step that needed a pre-kernel would add one plugin layer per kernel, the first
one's output tensor feeding the second.
"""

from typing import Optional

from . import NAMESPACE, gated_delta, mamba2
from .tensorrt_plugin import _dtype_name, import_tensorrt, register_plugins

__all__ = ["add_gdn_replay_step", "add_kda_replay_step", "add_mamba2_replay_step"]


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
    batch_hint: int = 64,
    aot: bool = True,
    name: Optional[str] = None,
):
    """Adds a ``replayssm::mamba2_replay_step`` plugin layer; arguments as the op
    ``trtllm_replayssm.ops.mamba2_replay_step`` with the cache given tensor by tensor
    (``tensorrt.ITensor`` each; layouts in :mod:`trtllm_replayssm_plugins.mamba2`).

    The geometry comes from the caches' static dimensions; batch and num_slots may be dynamic.
    The launch configuration is the op's choice for ``batch_hint`` rows.

    Returns:
        The ``IPluginV3Layer``. Output 0 is y [batch, nheads, head_dim]; outputs 1..6 are
        checkpoint, x_records, dt_records, B_records, cursor, arrivals after the step, aliased to
        the inputs. To keep the caches in caller-owned memory across engine runs, mark them as
        network outputs and bind each to the same address as its input (the network needs
        ``PreviewFeature.ALIASED_PLUGIN_IO_10_03`` in the builder config).

    Raises:
        ImportError: no suitable TensorRT. ValueError, TypeError: inputs that do not fit.
    """
    trt, trtp = import_tensorrt(aot)
    register_plugins(aot)
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
        )
    )
    attrs = mamba2.layer_attrs(
        tuple(checkpoint.shape),
        tuple(x_records.shape),
        tuple(B_records.shape),
        state_dtype=_dtype_name(trt, checkpoint.dtype),
        dt_softplus=dt_softplus,
        batch_hint=batch_hint,
        **flags,
    )
    return _add(network, getattr(trtp.op, NAMESPACE).mamba2_replay_step(*inputs, **attrs.values()), aot, name)


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
    batch_hint,
    aot,
    name,
):
    trt, trtp = import_tensorrt(aot)
    register_plugins(aot)
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
        )
    )
    attrs = gated_delta.layer_attrs(
        tuple(checkpoint.shape),
        tuple(d_records.shape),
        tuple(k_records.shape),
        per_channel=per_channel,
        state_dtype=_dtype_name(trt, checkpoint.dtype),
        use_qk_l2norm=use_qk_l2norm,
        scale=scale,
        batch_hint=batch_hint,
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
    batch_hint: int = 64,
    aot: bool = True,
    name: Optional[str] = None,
):
    """Adds a ``replayssm::gated_delta_replay_step`` layer for a Gated DeltaNet layer; arguments
    as ``trtllm_replayssm.ops.gdn_replay_step`` with the cache given tensor by tensor (layouts in
    :mod:`trtllm_replayssm_plugins.gated_delta`; g [batch, v_heads]). ``scale`` None is
    head_k_dim ** -0.5. Returns the layer: output 0 is o, outputs 1..6 the caches, aliased (see
    :func:`add_mamba2_replay_step` for binding them in place)."""
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
        batch_hint=batch_hint,
        aot=aot,
        name=name,
    )
