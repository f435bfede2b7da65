"""GPU: the replay Triton kernels on TensorRT-LLM-style strided pool views (coalesced slot
stride for checkpoints and records), bit-identical to the public ops on dense caches, and a
captured CUDA graph with padding rows equal to eager. Run on the H200:
``python -m pytest -q tests/builders_trtllm/test_steps_gpu.py``."""

import pytest
import torch

from pooled import outside
from test_steps import L, NUM_SLOTS, Family, pooled_layer
from trtllm_replayssm_builders.trtllm.steps import replay_slot_ids

pytestmark = pytest.mark.gpu

CASES = [
    ("mamba2", torch.bfloat16, torch.float32, None),  # Nemotron-3 default dtypes
    ("mamba2", torch.bfloat16, torch.bfloat16, None),
    ("gdn", torch.bfloat16, torch.float32, None),
    ("gdn", torch.bfloat16, torch.float32, torch.float32),
    ("kda", torch.bfloat16, torch.float32, torch.float32),
]
IDS = [f"{k}-act{str(a)[6:]}-state{str(s)[6:]}-rec{str(r or a)[6:]}" for k, a, s, r in CASES]


def _to_cuda(layer, checkpoint, backing):
    """The CPU-built pool views, rebuilt on the GPU with the same strides and offsets."""
    from trtllm_replayssm_builders.trtllm.store import ReplayRecordStore

    cuda = {name: raw.cuda() for name, raw in backing.items()}
    remap = lambda view, raw: raw.as_strided(view.shape, view.stride(), view.storage_offset())  # noqa: E731
    views = {name: remap(v, cuda[name]) for name, v in layer.records.items()}
    record_dtype = views["x_records" if layer.kind == "mamba2" else "d_records"].dtype
    store = ReplayRecordStore(
        {7: (layer.kind, layer.geometry, record_dtype)},
        L,
        NUM_SLOTS,
        state_dtype=checkpoint.dtype,
        device="cuda",
        record_views={7: views},
    )
    gpu = store.layer(7)
    gpu.cursor.copy_(layer.cursor)
    return gpu, remap(checkpoint, cuda["checkpoint"]), cuda


def _cuda_inputs(fam, batch):
    return tuple(t.cuda() for t in fam.inputs(batch))


@pytest.mark.parametrize("kind, act, state, records", CASES, ids=IDS)
def test_kernels_on_pool_views_equal_dense_public_ops(kind, act, state, records):
    fam = Family(kind, act, torch.float32, records)
    if kind == "mamba2":
        fam.params = {k: v.cuda() for k, v in fam.params.items()}
    layer, checkpoint, backing = pooled_layer(fam, state, cursors=[0, 2, 3, 1, 0])
    layer, checkpoint, backing = _to_cuda(layer, checkpoint, backing)
    before = {n: outside(v, backing[n]) for n, v in list(layer.records.items()) + [("checkpoint", checkpoint)]}
    cache = fam.dense_cache(state, device="cuda")
    cache.checkpoint.copy_(checkpoint)
    for name, view in layer.records.items():
        getattr(cache, name).copy_(view)
    cache.cursor.copy_(layer.cursor)
    slot_ids = torch.tensor([3, -1, 0, 1], dtype=torch.int32, device="cuda")
    for step in range(3 * L + 1):
        inputs = _cuda_inputs(fam, 4)
        assert torch.equal(fam.ours(layer, checkpoint, inputs, slot_ids), fam.public_replay(cache, inputs, slot_ids)), (
            f"step {step}"
        )
    assert torch.equal(checkpoint, cache.checkpoint) and torch.equal(layer.cursor, cache.cursor)
    for name, view in layer.records.items():
        assert torch.equal(view, getattr(cache, name)), name
    for n, v in list(layer.records.items()) + [("checkpoint", checkpoint)]:
        assert torch.equal(outside(v, backing[n]), before[n]), f"{n}: wrote outside its view"


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_cuda_graph_with_padding_rows_equals_eager(kind):
    act, state = torch.bfloat16, torch.float32
    fam = Family(kind, act, torch.float32)
    if kind == "mamba2":
        fam.params = {k: v.cuda() for k, v in fam.params.items()}
    base, base_ckpt, base_backing = pooled_layer(fam, state, cursors=[0] * NUM_SLOTS)
    eager, eager_ckpt, _ = _to_cuda(base, base_ckpt, base_backing)
    graph_layer, graph_ckpt, _ = _to_cuda(base, base_ckpt, base_backing)
    indices = torch.tensor([4, 1, 4, 2], dtype=torch.int32, device="cuda")  # slot 4: padding
    padding = torch.tensor([True, False, True, False], device="cuda")
    static_inputs = _cuda_inputs(fam, 4)
    out = torch.zeros_like(static_inputs[0] if kind == "mamba2" else static_inputs[2])

    def step():
        fam.ours(graph_layer, graph_ckpt, static_inputs, replay_slot_ids(indices, padding), out=out)

    step()  # warm-up (compiles), then roll the caches back
    graph_layer.cursor.zero_()
    graph_ckpt.copy_(eager_ckpt)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph_layer.cursor.zero_()
    graph_ckpt.copy_(eager_ckpt)
    for t in range(3 * L + 1):
        inputs = _cuda_inputs(fam, 4)
        for s, new in zip(static_inputs, inputs):
            s.copy_(new)
        graph.replay()
        ref = fam.ours(eager, eager_ckpt, inputs, replay_slot_ids(indices, padding))
        assert torch.equal(out[[1, 3]], ref[[1, 3]]), f"step {t}"
    assert torch.equal(graph_ckpt, eager_ckpt) and torch.equal(graph_layer.cursor, eager.cursor)
    assert graph_layer.cursor[4] == 0
