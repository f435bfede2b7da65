"""The rewritten layer's engine I/O against TensorRT-LLM v1.2.1's runtime names.

The runtime side is written here from the v1.2.1 C++ sources read (not importable here; stored
versions named in ``trtllm_engine.hook.SOURCES``):

- ``cpp/tensorrt_llm/runtime/rnnStateBuffers.cpp``, ``RnnStateBuffers::getRuntimeBuffers`` with
  paged state, first and last pipeline rank: inputs ``input_ids``, ``last_token_ids``,
  ``slot_mapping``, ``conv_state_ptr_<i>`` and ``rnn_state_ptr_<i>`` per recurrent layer,
  ``host_request_types``, ``host_context_lengths``; output ``logits``;
- ``cpp/tensorrt_llm/batch_manager/rnnStateManager.cpp``, ``RnnStateManager::getPtrBuffers``
  (the in-flight batching runtime that Triton's ``tensorrtllm`` backend runs): the same
  ``conv_state_ptr_`` and ``rnn_state_ptr_`` prefixes.

The model side runs the rewritten forward (``hook.replay_forward``) on stand-ins
(engine_standins.py): every tensor carries the network inputs it was computed from, so the test
sees which engine inputs each layer and each plugin reads.
"""

import os

import pytest

import engine_standins as S
from trtllm_replayssm_builders.trtllm_engine import hook
from trtllm_replayssm_plugins.mamba2_block_launch import ENGINE_INPUTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# RnnStateBuffers::getRuntimeBuffers / RnnStateManager::getPtrBuffers (v1.2.1), paged state
RUNTIME_SHARED_INPUTS = ("input_ids", "last_token_ids", "slot_mapping", "host_request_types", "host_context_lengths")
RUNTIME_LAYER_PREFIXES = ("conv_state_ptr_", "rnn_state_ptr_")
RUNTIME_OUTPUTS = ("logits",)


def _runtime_inputs(num_layers):
    return set(RUNTIME_SHARED_INPUTS) | {f"{p}{i}" for p in RUNTIME_LAYER_PREFIXES for i in range(num_layers)}


def _settings(max_batch_size=16):
    return hook.EngineBuildSettings(max_batch_size, 1, True, True, True, False, 1, 1, "bfloat16", "Mamba2", 16)


def _run_model(num_layers):
    """Runs every rewritten layer of a stand-in model; per layer, the engine inputs its calls read."""
    model = S.MambaForCausalLM(num_layers=num_layers, d_model=256, d_inner=256, d_state=16, ngroups=2)
    ins = S.engine_inputs(num_layers)
    per_layer = []
    for i, layer in hook.find_mamba2_layers(model, S.Mamba2):
        plan = hook.plan_layer(i, layer, _settings())
        ops = S.RecordingOps()
        hook.replay_forward(
            layer,
            plan,
            ops,
            S.Tensor(f"hidden_{i}"),
            ins[f"conv_state_ptr_{i}"],
            ins[f"rnn_state_ptr_{i}"],
            ins["host_request_types"],
            ins["last_token_ids"],
            host_context_lengths=ins["host_context_lengths"],
            slot_mapping=ins["slot_mapping"],
        )
        read = set()
        for _, args, kwargs in ops.calls + [(n, a, {}) for n, a in layer.calls]:
            for t in list(args) + list(kwargs.values()):
                if isinstance(t, S.Tensor):
                    read |= t.sources
        per_layer.append((read, ops))
    return ins, per_layer


def test_each_rewritten_layer_reads_its_own_pointers_and_the_shared_inputs():
    _, per_layer = _run_model(3)
    for i, (read, _) in enumerate(per_layer):
        assert read == set(hook.layer_engine_inputs(i))
        assert {f"rnn_state_ptr_{i}", f"conv_state_ptr_{i}", "slot_mapping", "host_request_types"} <= read


@pytest.mark.parametrize("num_layers", [1, 3, 64])
def test_engine_io_is_what_the_v121_runtime_binds(num_layers):
    io = hook.engine_io(num_layers)
    assert set(io.inputs) == _runtime_inputs(num_layers)
    assert io.outputs == RUNTIME_OUTPUTS
    # the rewrite adds no engine tensor: every input is one the stock MambaForCausalLM declares
    assert set(io.inputs) == set(S.engine_inputs(num_layers))
    assert hook.engine_io(num_layers, gather_context_logits=True) == io


def test_the_model_reads_exactly_the_engine_inputs():
    ins, per_layer = _run_model(3)
    read = set().union(*(r for r, _ in per_layer)) | {"input_ids"}  # the embedding reads input_ids
    assert read == set(hook.engine_io(3).inputs) == set(ins)


def test_plugin_inputs_match_the_cpp_plugins():
    """Route reads (host_request_types, slot_mapping); the block plugin's first three inputs are
    the layer's state pointer, host_request_types and slot_mapping, the C++ plugin's ENGINE_INPUTS
    order, of which it reads 0 and 1 on the host."""
    _, per_layer = _run_model(2)
    for i, (_, ops) in enumerate(per_layer):
        route = next(c for c in ops.calls if c[0] == "route")
        assert [t.name for t in route[1]] == ["host_request_types", "slot_mapping"]
        block = next(c for c in ops.calls if c[0] == "replay_block")
        assert [t.name for t in block[1][:3]] == [f"rnn_state_ptr_{i}", "host_request_types", "slot_mapping"]
        assert ENGINE_INPUTS[:3] == ("rnn_state_ptr", "host_request_types", "slot_mapping")
    src = open(os.path.join(ROOT, "plugins", "cpp", "replayssm_engine_plugins.cpp")).read()
    assert "static_cast<int32_t const*>(in[1])[0] == kContext; // host memory" in src
    assert "*static_cast<int64_t const*>(in[0])" in src


# The plugin fields against the C++ plugins and their creators (names, types, order), the
# syntax check and the CPU harness: test_engine_plugins_cpp.py.
