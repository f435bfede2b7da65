"""Stand-ins for what cannot be imported here: TensorRT-LLM v1.2.1's engine-path Mamba-2 model
(``MambaForCausalLM`` -> ``backbone.layers[i].ssm``, a ``tensorrt_llm.layers.ssm.Mamba2``), its
network tensors, and the network ops the rewritten forward calls.

They carry only what the hook reads or calls, written from the v1.2.1 sources named in
``trtllm_engine.hook.SOURCES``: the ``Mamba2.__init__`` attributes (TP-local ``d_inner``,
``nheads``, ``ngroups``, ``headdim``, ``d_state``, ``chunk_size``, ``rmsnorm``, ``dtype``, the
fp32 ``A``, ``D``, ``dt_bias`` parameters), its submodules (``in_proj``, ``conv1d``, ``norm``,
``out_proj``) and the engine input names of ``MambaForCausalLM.prepare_inputs`` with paged
state and packed input. Every tensor records which network inputs it was computed from, so a
test can tell which engine inputs each op reads.
"""

from __future__ import annotations

from typing import FrozenSet, List, Tuple


class Tensor:
    """A network tensor: a name and the network inputs it depends on."""

    def __init__(self, name: str, sources: FrozenSet[str] = frozenset(), is_input: bool = False):
        self.name = name
        self.sources = frozenset({name}) if is_input else frozenset(sources)

    def __repr__(self) -> str:
        return f"Tensor({self.name})"


def _derived(name: str, *inputs) -> Tensor:
    sources = frozenset().union(*(t.sources for t in inputs if isinstance(t, Tensor)))
    return Tensor(name, sources)


class Parameter:
    def __init__(self, name: str):
        self.value = Tensor(name)  # a weight: no network input


class Submodule:
    """in_proj, out_proj, norm: one tensor in, one out; records its calls."""

    def __init__(self, name: str, calls: List):
        self.name, self.calls = name, calls

    def __call__(self, x):
        self.calls.append((self.name, (x,)))
        return _derived(f"{self.name}({x.name})", x)


class Conv1d:
    """MambaConv1d with the conv1d plugin and paged state: (x_conv, None)."""

    def __init__(self, calls: List):
        self.calls = calls

    def __call__(self, x, conv_state, host_request_types, last_token_ids, host_context_lengths, slot_mapping, conv_indices):
        args = (x, conv_state, host_request_types, last_token_ids, host_context_lengths, slot_mapping)
        self.calls.append(("conv1d", args))
        return _derived(f"conv1d({x.name})", *args), None


class Mamba2:
    """``tensorrt_llm.layers.ssm.Mamba2`` attributes (tp_size 1) and submodules."""

    def __init__(self, d_model, d_inner, d_state=128, headdim=64, ngroups=1, chunk_size=256, rmsnorm=True, dtype="bfloat16"):
        self.calls: List[Tuple[str, tuple]] = []
        self.d_model, self.d_inner, self.d_state, self.headdim = d_model, d_inner, d_state, headdim
        self.ngroups, self.chunk_size, self.rmsnorm, self.dtype = ngroups, chunk_size, rmsnorm, dtype
        self.nheads = d_inner // headdim
        self.A, self.D, self.dt_bias = Parameter("A"), Parameter("D"), Parameter("dt_bias")
        self.in_proj = Submodule("in_proj", self.calls)
        self.conv1d = Conv1d(self.calls)
        self.norm = Submodule("norm", self.calls) if rmsnorm else None
        self.out_proj = Submodule("out_proj", self.calls)


class Mamba1:
    """A Mamba-1 ``ssm`` (not rewritten)."""


class MambaLayer:
    def __init__(self, ssm):
        self.ssm = ssm


class Backbone:
    def __init__(self, layers):
        self.layers = layers


class MambaForCausalLM:
    """``model.backbone.layers[i].ssm``, as v1.2.1's ``MambaForCausalLM``."""

    def __init__(self, num_layers=2, **mamba2):
        self.backbone = Backbone([MambaLayer(Mamba2(**mamba2)) for _ in range(num_layers)])


def engine_inputs(num_layers: int):
    """The network inputs of v1.2.1's ``MambaForCausalLM.prepare_inputs`` with paged state and
    packed input (``remove_input_padding``), not gathering context logits."""
    names = ["input_ids", "host_request_types", "host_context_lengths", "last_token_ids", "slot_mapping"]
    for i in range(num_layers):
        names += [f"conv_state_ptr_{i}", f"rnn_state_ptr_{i}"]
    return {n: Tensor(n, is_input=True) for n in names}


class RecordingOps:
    """The ``ops`` of ``hook.replay_forward``: records each plugin layer and its inputs."""

    def __init__(self):
        self.calls: List[Tuple[str, tuple, dict]] = []

    def route(self, plan, host_request_types, slot_mapping):
        self.calls.append(("route", (host_request_types, slot_mapping), {}))
        return _derived("stock_slots", host_request_types, slot_mapping)

    def selective_scan(self, *args, **kwargs):
        self.calls.append(("selective_scan", args, kwargs))
        return _derived("y_stock", *args, *kwargs.values()), None

    def replay_block(self, plan, inputs):
        self.calls.append(("replay_block", tuple(inputs), {}))
        return _derived("y", *inputs)


class Compiled:
    """A ``CompiledKernel`` stand-in (the PTX export needs Triton's compiler, not the interpreter)."""

    def __init__(self, spec, ptx=".version 8.7\n.visible .entry k()\n{}", kernel_name="k", shared_mem=0):
        self.spec, self.ptx, self.kernel_name, self.shared_mem = spec, ptx, kernel_name, shared_mem
