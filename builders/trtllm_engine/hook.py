"""What the engine-flow model-builder hook computes, as plain functions (no TensorRT-LLM here).

The hook (:mod:`.adapter`) takes a TensorRT-LLM v1.2.1 ``MambaForCausalLM`` (Mamba-2 variant)
before ``tensorrt_llm.builder.build`` and rewrites the ``forward`` of each
``tensorrt_llm.layers.ssm.Mamba2`` into :func:`replay_forward`. Everything it decides is here,
over plain attributes, so that it runs and is tested without TensorRT-LLM:

- :class:`EngineBuildSettings` and :func:`check_settings`: the build options the flow needs
  (paged state, packed input, the conv1d plugin, beam width 1, tp = pp = 1, no speculative
  decoding); every problem is listed at once;
- :func:`find_mamba2_layers`: which layers, from ``model.backbone.layers[i].ssm``;
- :func:`plan_layer`: per layer, the state layout in the runtime's buffer, the block plugin's
  attributes and launch table (:class:`Mamba2LayerPlan`);
- :func:`route_plugin_fields`, :func:`block_plugin_fields`: the two C++ plugins' fields, in the
  order ``plugins/cpp/replayssm_engine_plugins.cpp`` serializes them;
- :func:`replay_forward`: the rewritten ``Mamba2.forward``, over an ``ops`` object that adds
  the plugin layers (the adapter's real one, or a test's recording stand-in);
- :func:`engine_io`, :func:`layer_engine_inputs`: the engine's I/O tensor names;
- :func:`engine_state_size`, :func:`engine_config_record`, :func:`check_engine_config`: what
  the engine's ``config.json`` carries so that the runtimes allocate the whole cache.

TensorRT-LLM v1.2.1 sources read (stored versions of NVIDIA/TensorRT-LLM, by commit):
:data:`SOURCES`. Design: docs/engine_flow.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from trtllm_replayssm.block import Mamba2StateBlock
from trtllm_replayssm.cache import MAX_L
from trtllm_replayssm.checks import check_positive_int
from trtllm_replayssm_plugins.mamba2 import Mamba2ReplayAttrs
from trtllm_replayssm_plugins.mamba2_block import Mamba2BlockAttrs
from trtllm_replayssm_plugins.mamba2_block_launch import ENGINE_INPUTS, LaunchTable, launch_table
from trtllm_replayssm_plugins.ptx import MAX_SHARED_MEM

from .state import EngineStateLayout
from .views import Mamba2LayerGeometry, step_views

__all__ = [
    "PINNED_RELEASE",
    "SOURCES",
    "REQUIREMENTS",
    "PLUGIN_NAMESPACE",
    "ROUTE_PLUGIN",
    "BLOCK_PLUGIN",
    "CONFIG_KEY",
    "EngineFlowError",
    "EngineBuildSettings",
    "check_settings",
    "find_mamba2_layers",
    "layer_geometry",
    "Mamba2LayerPlan",
    "plan_layer",
    "PluginFieldSpec",
    "route_plugin_fields",
    "block_plugin_fields",
    "replay_forward",
    "EngineIO",
    "engine_io",
    "layer_engine_inputs",
    "engine_state_size",
    "engine_config_record",
    "check_engine_config",
    "missing_requirements",
    "settings_problems_for_cli",
]

PINNED_RELEASE = "1.2.1"

# Files read for the hook (path -> commit of the stored version read; the v1.2.1 tag itself could
# not be checked out here, see docs/engine_flow.md).
SOURCES = {
    "tensorrt_llm/layers/ssm.py": "aaacc9bd68b3e839fd25a0c7a80964d9b393ac99",
    "tensorrt_llm/models/mamba/model.py": "2340c776201e4dba9aa625b8615e3e6ca9d7a7f6",
    "tensorrt_llm/functional.py": "0071496dc625910229bf433821453636ef3770eb",
    "tensorrt_llm/module.py": "000a01de66f0eab4ab05640711f0253f50f5209c",
    "tensorrt_llm/commands/build.py": "008b2b8d23af95e4e19fa6f354f9c5f6349b2bfc",
    "cpp/tensorrt_llm/batch_manager/rnnStateManager.cpp": "737a7728fd85e89eed2d667a4f87a71ee3d9cfd5",
    "cpp/tensorrt_llm/runtime/rnnStateBuffers.cpp": "8fcf9fc21589b366c3f79da100e289b78b7d118c",
}

# (module, attribute path, parameter names its signature must have, in order): every
# TensorRT-LLM name the adapter touches. The adapter checks them before it rewrites anything.
REQUIREMENTS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("tensorrt_llm.models", "MambaForCausalLM", ()),
    (
        "tensorrt_llm.layers.ssm",
        "Mamba2.forward",
        (
            "self",
            "hidden_states",
            "conv_state",
            "ssm_state",
            "host_request_types",
            "last_token_ids",
            "host_context_lengths",
            "slot_mapping",
            "conv_indices",
        ),
    ),
    (
        "tensorrt_llm.functional",
        "selective_scan",
        (
            "input",
            "state_or_ptr",
            "delta",
            "delta_bias",
            "A",
            "BC",
            "D",
            "host_request_types",
            "last_token_ids",
            "dim",
            "dstate",
            "dt_rank",
            "delta_softplus",
            "dtype",
            "z",
            "host_context_lengths",
            "slot_mapping",
            "nheads",
            "ngroups",
            "chunk_size",
            "mamba_version",
        ),
    ),
    ("tensorrt_llm.functional", "_create_tensor", ("trt_tensor", "producer")),
    ("tensorrt_llm.functional", "default_trtnet", ()),  # functional imports it from ._common
    ("tensorrt_llm.commands.build", "build", ()),
    ("tensorrt_llm.commands.build", "parse_arguments", ()),
    ("tensorrt_llm.commands.build", "main", ()),
)

PLUGIN_NAMESPACE = "replayssm"
ROUTE_PLUGIN = ("Mamba2Route", "1")  # plugins/cpp: getPluginName, getPluginVersion
BLOCK_PLUGIN = ("Mamba2ReplayBlock", "1")
CONFIG_KEY = "replayssm_engine"  # the record in the engine's pretrained_config

_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


class EngineFlowError(RuntimeError):
    """The engine-flow hook cannot engage (the build would otherwise decode on the stock path)."""


@dataclass(frozen=True)
class EngineBuildSettings:
    """The build options the engine flow depends on, read from ``build_config`` and
    ``model.config`` by the adapter.

    Attributes:
        max_batch_size: ``build_config.max_batch_size``; the runtime's slots per layer buffer
            (C++ runtime and Triton: ``maxNumSequences = max_batch_size`` at pp 1).
        max_beam_width: ``build_config.max_beam_width``.
        paged_state, remove_input_padding: ``build_config.plugin_config`` flags.
        mamba_conv1d_plugin: that plugin is enabled (a dtype or ``"auto"``, not None/"disable").
        speculative: ``build_config.speculative_decoding_mode`` is not NONE.
        tp_size, pp_size: ``model.config.mapping``.
        dtype: ``model.config.dtype`` ("bfloat16", "float16", "float32"): the activations'.
        mamba_version: ``model.config.mamba_version``.
        buffer_len: L, records per slot (``--replayssm-buffer-len``).
    """

    max_batch_size: int
    max_beam_width: int
    paged_state: bool
    remove_input_padding: bool
    mamba_conv1d_plugin: bool
    speculative: bool
    tp_size: int
    pp_size: int
    dtype: str
    mamba_version: str
    buffer_len: int

    @property
    def act_dtype(self) -> str:
        """The records' dtype name (f32 | bf16 | f16)."""
        return _DTYPES[self.dtype]


def check_settings(s: EngineBuildSettings) -> None:
    """Raises :class:`EngineFlowError` listing every build option the flow cannot work with.

    Raises:
        ValueError: ``max_batch_size`` or ``buffer_len`` not a positive int.
        EngineFlowError: one line per problem: the option, what is expected, what was given.
    """
    owner = "enable_replayssm_engine"
    check_positive_int(owner, "max_batch_size", s.max_batch_size)
    check_positive_int(owner, "buffer_len", s.buffer_len)
    wants = (
        ("model.config.mamba_version", s.mamba_version == "Mamba2", "'Mamba2'", repr(s.mamba_version)),
        ("buffer_len (--replayssm-buffer-len)", s.buffer_len <= MAX_L, f"at most {MAX_L}", s.buffer_len),
        (
            "plugin_config.paged_state (--paged_state)",
            s.paged_state,
            "enabled: the runtime hands rnn_state_ptr_<i>",
            "disabled",
        ),
        (
            "plugin_config.remove_input_padding (--remove_input_padding)",
            s.remove_input_padding,
            "enabled: the step views read [tokens, width] tensors",
            "disabled",
        ),
        ("plugin_config.mamba_conv1d_plugin (--mamba_conv1d_plugin)", s.mamba_conv1d_plugin, "enabled", "disabled"),
        ("build_config.max_beam_width (--max_beam_width)", s.max_beam_width == 1, "1", s.max_beam_width),
        ("build_config.speculative_decoding_mode", not s.speculative, "none", "a speculative mode"),
        ("model.config.mapping.tp_size", s.tp_size == 1, "1", s.tp_size),
        ("model.config.mapping.pp_size", s.pp_size == 1, "1", s.pp_size),
        ("model.config.dtype", s.dtype in _DTYPES, " | ".join(_DTYPES), repr(s.dtype)),
    )
    problems = [f"  {name}: expected {want}, got {got}" for name, ok, want, got in wants if not ok]
    if problems:
        raise EngineFlowError(f"{owner}: the build cannot use the ReplaySSM engine flow:\n" + "\n".join(problems))


def find_mamba2_layers(model, mamba2_cls) -> List[Tuple[int, object]]:
    """``(layer index, Mamba2 module)`` of every decoder layer of ``model``.

    Args:
        model: a ``MambaForCausalLM``: ``model.backbone.layers[i].ssm`` (v1.2.1's ``MambaLayer``).
        mamba2_cls: ``tensorrt_llm.layers.ssm.Mamba2`` (a test passes a stand-in class).
    Raises:
        EngineFlowError: no ``backbone.layers``, no layer, or a layer whose ``ssm`` is not a
            ``mamba2_cls`` (a Mamba-1 model).
    """
    owner = "find_mamba2_layers"
    layers = getattr(getattr(model, "backbone", None), "layers", None)
    if layers is None:
        raise EngineFlowError(f"{owner}: model is {type(model).__name__}; expected MambaForCausalLM with backbone.layers")
    found, other = [], []
    for i, decoder_layer in enumerate(layers):
        ssm = getattr(decoder_layer, "ssm", None)
        (found if isinstance(ssm, mamba2_cls) else other).append((i, ssm))
    if other:
        i, ssm = other[0]
        raise EngineFlowError(
            f"{owner}: backbone.layers[{i}].ssm is {type(ssm).__name__}; expected {mamba2_cls.__name__} in every layer "
            f"({len(other)} of {len(found) + len(other)} are not)"
        )
    if not found:
        raise EngineFlowError(f"{owner}: model.backbone.layers is empty; expected at least one Mamba2 layer")
    return found


def layer_geometry(layer) -> Mamba2LayerGeometry:
    """The TP-local geometry of a ``Mamba2`` module (its ``d_inner``, ``d_state``, ``ngroups``,
    ``nheads``, ``headdim`` attributes, as v1.2.1's ``Mamba2.__init__`` sets them)."""
    values = {}
    for name in ("d_inner", "d_state", "ngroups", "nheads", "headdim"):
        if not hasattr(layer, name):
            raise EngineFlowError(
                f"layer_geometry: the {type(layer).__name__} has no attribute {name!r}; expected v1.2.1's Mamba2"
            )
        values[name] = getattr(layer, name)
    return Mamba2LayerGeometry(**values)


@dataclass(frozen=True)
class Mamba2LayerPlan:
    """What the hook decided for one layer.

    Attributes:
        index: the decoder layer (``rnn_state_ptr_<index>`` is its buffer).
        geometry: TP-local Mamba2 geometry.
        layout: the layer buffer (``layout.plugin_slots`` slots, the last one scratch).
        attrs: the block plugin's attributes (``attrs.num_slots == layout.plugin_slots``).
        table: the block plugin's launch table (step inputs read as views of the fused tensors).
        rmsnorm: the layer has its grouped RmsNorm after the scan.
    """

    index: int
    geometry: Mamba2LayerGeometry
    layout: EngineStateLayout
    attrs: Mamba2BlockAttrs
    table: LaunchTable
    rmsnorm: bool


def plan_layer(index: int, layer, settings: EngineBuildSettings) -> Mamba2LayerPlan:
    """The plan of one ``Mamba2`` module under ``settings`` (see :class:`Mamba2LayerPlan`).

    The replay step gets D, z (the gate), dt_bias and softplus, as the stock
    ``selective_scan(..., delta_softplus=True, z=zxbcdt)`` call of v1.2.1's ``Mamba2.forward``;
    its launch configuration is the op's for ``max_batch_size`` rows.
    """
    g = layer_geometry(layer)
    block = Mamba2StateBlock(g.nheads, g.headdim, g.d_state, g.ngroups, settings.buffer_len, settings.act_dtype)
    layout = EngineStateLayout(block, settings.max_batch_size)
    replay = Mamba2ReplayAttrs.for_layer(
        g.nheads,
        g.headdim,
        g.d_state,
        g.ngroups,
        settings.buffer_len,
        has_D=True,
        has_z=True,
        has_dt_bias=True,
        dt_softplus=True,
        batch_hint=settings.max_batch_size,
    )
    attrs = Mamba2BlockAttrs(replay, layout.plugin_slots, settings.act_dtype)
    return Mamba2LayerPlan(index, g, layout, attrs, launch_table(attrs, step_views(g)), bool(getattr(layer, "rmsnorm", True)))


@dataclass(frozen=True)
class PluginFieldSpec:
    """One plugin field: name, TensorRT field type ("char", "int32", "int64"), value(s)."""

    name: str
    kind: str
    value: object


def route_plugin_fields(plan: Mamba2LayerPlan) -> Tuple[PluginFieldSpec, ...]:
    """``replayssm::Mamba2Route`` fields: the scratch slot the stock scan writes to in a
    generation step."""
    return (PluginFieldSpec("scratch_slot", "int32", (plan.layout.scratch_slot,)),)


def block_plugin_fields(plan: Mamba2LayerPlan, compiled) -> Tuple[PluginFieldSpec, ...]:
    """``replayssm::Mamba2ReplayBlock`` fields, in the C++ plugin's serialization order.

    Args:
        plan: the layer's plan.
        compiled: the exported entry kernel for the build GPU
            (``trtllm_replayssm_plugins.ptx.compile_ptx(plan.table.spec, ENTRY, arch)``, a
            ``CompiledKernel``): its ``spec``, ``kernel_name``, ``ptx``, ``shared_mem``.
    Raises:
        EngineFlowError: the PTX was compiled for another specialization, or needs more shared
            memory than a launch without an attribute call gets.
    """
    owner = "block_plugin_fields"
    want, got = plan.table.spec.variant, getattr(getattr(compiled, "spec", None), "variant", None)
    if got != want:
        raise EngineFlowError(f"{owner}: compiled.spec.variant is {got!r}; expected the plan's {want!r}")
    if not 0 <= compiled.shared_mem <= MAX_SHARED_MEM:
        raise EngineFlowError(f"{owner}: compiled.shared_mem is {compiled.shared_mem}; expected 0 to {MAX_SHARED_MEM} bytes")
    return (
        PluginFieldSpec("ptx", "char", compiled.ptx),
        PluginFieldSpec("kernel_name", "char", compiled.kernel_name),
        PluginFieldSpec("launch_table", "int64", plan.table.flat()),
        PluginFieldSpec("shared_mem", "int32", (compiled.shared_mem,)),
    )


def replay_forward(
    layer,
    plan: Mamba2LayerPlan,
    ops,
    hidden_states,
    conv_state,
    ssm_state,
    host_request_types,
    last_token_ids,
    host_context_lengths=None,
    slot_mapping=None,
    conv_indices=None,
):
    """The rewritten ``Mamba2.forward`` (v1.2.1's parameters; paged state, packed input).

    Shapes (TP-local, T tokens, R rows = sequences in the step):
        hidden_states [T, d_model] act; conv_state, ssm_state: i64 [1], host addresses of the
        layer's conv and state buffers (``conv_state_ptr_<i>``, ``rnn_state_ptr_<i>``);
        host_request_types i32 [R] (host), last_token_ids i32 [R], host_context_lengths i32 [R]
        (host), slot_mapping i32 [R].

    Steps: ``in_proj`` and ``conv1d`` as the stock layer; ``ops.route`` gives the stock scan its
    slots (a context step: ``slot_mapping``; a generation step: every row the scratch slot);
    ``ops.selective_scan`` (stock) writes each context row's final state where the checkpoint
    lies; ``ops.replay_block`` reads the layer buffer through ``ssm_state`` and writes y: in a
    context step a copy of the stock y after admitting the state as the checkpoint (cursor 0),
    in a generation step the replay step. Then the RmsNorm and ``out_proj`` as the stock layer.

    Mutates (at run time): the layer buffer behind ``ssm_state`` (checkpoints, records, cursors
    of the rows' slots, the scratch slot) and the conv state, as the stock layer does.

    Returns:
        ``(out [T, d_model], conv_state, ssm_state)``: the conv and state outputs of the stock
        plugins (None with paged state), as v1.2.1's ``Mamba2.forward``.
    Raises:
        EngineFlowError: no ``slot_mapping`` or ``host_context_lengths`` (paged state and packed
            input are required).
    """
    for name, value in (("slot_mapping", slot_mapping), ("host_context_lengths", host_context_lengths)):
        if value is None:
            raise EngineFlowError(
                f"replay_forward (layer {plan.index}): {name} is None; expected the engine input "
                f"(the build needs --paged_state enable and --remove_input_padding enable)"
            )
    zxbcdt = layer.in_proj(hidden_states)
    xbc, conv_out = layer.conv1d(
        zxbcdt, conv_state, host_request_types, last_token_ids, host_context_lengths, slot_mapping, conv_indices
    )
    stock_slots = ops.route(plan, host_request_types, slot_mapping)
    y_stock, state_out = ops.selective_scan(
        xbc,
        ssm_state,
        zxbcdt,
        layer.dt_bias.value,
        layer.A.value,
        xbc,
        layer.D.value,
        host_request_types,
        last_token_ids,
        layer.d_inner,
        layer.d_state,
        dt_rank=0,
        delta_softplus=True,
        dtype=layer.dtype,
        z=zxbcdt,
        host_context_lengths=host_context_lengths,
        slot_mapping=stock_slots,
        nheads=layer.nheads,
        ngroups=layer.ngroups,
        chunk_size=layer.chunk_size,
        mamba_version="Mamba2",
    )
    block_inputs = dict(
        rnn_state_ptr=ssm_state,
        host_request_types=host_request_types,
        slot_mapping=slot_mapping,
        xbc=xbc,
        zxbcdt=zxbcdt,
        A=layer.A.value,
        D=layer.D.value,
        dt_bias=layer.dt_bias.value,
        y_stock=y_stock,
    )
    y = ops.replay_block(plan, [block_inputs[name] for name in ENGINE_INPUTS])
    if plan.rmsnorm:
        y = layer.norm(y)
    return layer.out_proj(y), conv_out, state_out


@dataclass(frozen=True)
class EngineIO:
    """An engine's I/O tensor names: inputs and outputs, each sorted."""

    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]


# Engine inputs every rewritten layer reads besides its own two pointers (paged state, packed input).
_SHARED_LAYER_INPUTS = ("host_request_types", "last_token_ids", "host_context_lengths", "slot_mapping")


def layer_engine_inputs(index: int) -> Tuple[str, ...]:
    """The engine inputs rewritten layer ``index`` reads (through its stock conv1d and scan, and
    the two ReplaySSM plugins): the same as the stock layer's."""
    return (f"conv_state_ptr_{index}", f"rnn_state_ptr_{index}") + _SHARED_LAYER_INPUTS


def engine_io(num_layers: int, *, gather_context_logits: bool = False) -> EngineIO:
    """The I/O tensors of a ``MambaForCausalLM`` engine built with the hook (tp = pp = 1, paged
    state, packed input): ``input_ids`` and ``last_token_ids`` (``prepare_inputs``), the layers'
    inputs (:func:`layer_engine_inputs`), output ``logits``. The rewrite adds no tensor and
    removes none, so the runtime binds what it binds for the stock engine."""
    check_positive_int("engine_io", "num_layers", num_layers)
    names = {"input_ids", "last_token_ids"}
    for i in range(num_layers):
        names.update(layer_engine_inputs(i))
    del gather_context_logits  # changes which logits rows are returned, not the tensors
    return EngineIO(tuple(sorted(names)), ("logits",))


def engine_state_size(plans: Sequence[Mamba2LayerPlan]) -> int:
    """``pretrained_config.state_size`` for the engine: one value for every layer (the runtime
    reads one), the largest any layer needs.

    Raises:
        EngineFlowError: no plan, or plans with different slot counts.
    """
    if not plans:
        raise EngineFlowError("engine_state_size: plans is empty; expected one plan per Mamba2 layer")
    slots = sorted({p.layout.num_slots for p in plans})
    if len(slots) != 1:
        raise EngineFlowError(f"engine_state_size: the plans have slot counts {slots}; expected one")
    return max(p.layout.runtime_state_size for p in plans)


def engine_config_record(plans: Sequence[Mamba2LayerPlan], stock_state_size: int) -> Dict[str, object]:
    """The ``pretrained_config`` entries the hook sets: ``state_size`` (what the runtimes size
    each slot's state by) and :data:`CONFIG_KEY`, a record of the layout for readers and for
    :func:`check_engine_config`."""
    p = plans[0]
    return {
        "state_size": engine_state_size(plans),
        CONFIG_KEY: {
            "release": PINNED_RELEASE,
            "buffer_len": p.layout.block.L,
            "act_dtype": p.layout.block.act_dtype,
            "num_slots": p.layout.num_slots,
            "scratch_slot": p.layout.scratch_slot,
            "stock_state_size": stock_state_size,
            "layers": [p.index for p in plans],
        },
    }


def check_engine_config(config: Mapping, expected: Mapping[str, object]) -> None:
    """Checks an engine ``config.json`` (parsed) after the build: its ``pretrained_config`` has
    the entries of ``expected`` (:func:`engine_config_record`) and ``build_config.max_batch_size``
    is the slot count the layout was sized for.

    Raises:
        EngineFlowError: an entry missing or different (the engine would not run).
    """
    owner = "check_engine_config"
    pretrained = config.get("pretrained_config", {})
    problems = [
        f"  pretrained_config.{k}: expected {v!r}, got {pretrained.get(k, '(missing)')!r}"
        for k, v in expected.items()
        if pretrained.get(k) != v
    ]
    slots = expected.get(CONFIG_KEY, {}).get("num_slots")
    got_batch = config.get("build_config", {}).get("max_batch_size")
    if got_batch != slots:
        problems.append(f"  build_config.max_batch_size: expected {slots!r} (the layout's slots), got {got_batch!r}")
    if problems:
        raise EngineFlowError(f"{owner}: the engine config does not carry the ReplaySSM layout:\n" + "\n".join(problems))


def missing_requirements(lookup) -> List[str]:
    """The :data:`REQUIREMENTS` not met, one line each.

    Args:
        lookup: ``(module, attribute path) -> (object or None, parameter names or None)``; the
            adapter imports and inspects, a test answers from stand-ins.
    """
    out = []
    for module, name, params in REQUIREMENTS:
        obj, got = lookup(module, name)
        if obj is None:
            out.append(f"  {module}.{name}: missing")
            continue
        if params and (got is None or [p for p in got if p in params] != list(params)):
            out.append(f"  {module}.{name}: expected parameters {', '.join(params)}; got {', '.join(got or ('?',))}")
    return out


def settings_problems_for_cli(trtllm_build_args: Sequence[str]) -> Optional[str]:
    """A usage problem of the arguments passed through to ``trtllm-build`` that the hook could
    not see itself: ``--workers`` above 1 builds in spawned processes, where the hook is not
    installed. None when there is none."""
    args = list(trtllm_build_args)
    for i, a in enumerate(args):
        value = None
        if a == "--workers" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--workers="):
            value = a.split("=", 1)[1]
        if value is not None and value.strip() != "1":
            return (
                f"--workers {value}: expected 1 (trtllm-build builds with more workers in spawned processes, "
                f"which do not run the ReplaySSM hook; build several ranks with mpirun instead)"
            )
    if not any(a.split("=", 1)[0] in ("--checkpoint_dir", "--model_config") for a in args):
        return "expected --checkpoint_dir DIR or --model_config FILE among the trtllm-build arguments; got neither"
    return None
