"""Replay steps on TensorRT-LLM-style strided SSM states: equal to the public ops on dense caches
bit for bit, to the float64 recurrence to 1e-12, padding rows untouched, errors before writes."""

import pytest
import torch
import torch.nn.functional as F

from pooled import GDN_GEOMETRY, KDA_GEOMETRY, MAMBA2_GEOMETRY, outside, pool_view, state_shape
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.ops import (
    gdn_decode_step,
    gdn_replay_step,
    kda_decode_step,
    kda_replay_step,
    mamba2_decode_step,
    mamba2_replay_step,
)
from trtllm_replayssm_builders.trtllm.layout import record_fields
from trtllm_replayssm_builders.trtllm.steps import (
    PaddingRowBuffer,
    causal_conv_step,
    flush_delta_rule_records,
    gated_delta_step,
    mamba2_step,
    padding_rows,
    replay_cache,
    replay_slot_ids,
)
from trtllm_replayssm_builders.trtllm.store import ReplayRecordStore

GEOMETRIES = {"mamba2": MAMBA2_GEOMETRY, "gdn": GDN_GEOMETRY, "kda": KDA_GEOMETRY}
CACHES = {"mamba2": Mamba2ReplayCache, "gdn": GDNReplayCache, "kda": KDAReplayCache}
L, NUM_SLOTS = 4, 5


class Family:
    """Inputs and calls of one layer family, for both our steps and the public ops."""

    def __init__(self, kind, act_dtype, gate_dtype, record_dtype=None):
        self.kind, self.g, self.act, self.gate = kind, GEOMETRIES[kind], act_dtype, gate_dtype
        self.records = record_dtype or act_dtype
        g = self.g
        if kind == "mamba2":
            self.params = dict(
                A=-(torch.rand(g.nheads, dtype=gate_dtype) + 0.5),
                D=torch.randn(g.nheads, dtype=gate_dtype),
                dt_bias=0.5 * torch.randn(g.nheads, dtype=gate_dtype),
            )

    def inputs(self, batch):
        g, a = self.g, self.act
        if self.kind == "mamba2":
            return (
                torch.randn(batch, g.nheads, g.head_dim, dtype=a),
                torch.randn(batch, g.nheads, dtype=self.gate),
                torch.randn(batch, g.ngroups, g.d_state, dtype=a),
                torch.randn(batch, g.ngroups, g.d_state, dtype=a),
            )
        gate_shape = (batch, g.v_heads) + ((g.head_k_dim,) if self.kind == "kda" else ())
        return (
            torch.randn(batch, g.k_heads, g.head_k_dim, dtype=a),
            torch.randn(batch, g.k_heads, g.head_k_dim, dtype=a),
            torch.randn(batch, g.v_heads, g.head_v_dim, dtype=a),
            -0.5 * F.softplus(torch.randn(gate_shape, dtype=self.gate)),
            torch.sigmoid(torch.randn(batch, g.v_heads, dtype=self.gate)),
        )

    def ours(self, layer, checkpoint, inputs, slot_ids, out=None):
        if self.kind == "mamba2":
            x, dt, B, C = inputs
            p = self.params
            return mamba2_step(
                layer, checkpoint, x, dt, p["A"], B, C, slot_ids=slot_ids, D=p["D"], dt_bias=p["dt_bias"], out=out
            )
        return gated_delta_step(layer, checkpoint, *inputs, slot_ids=slot_ids, out=out)

    def public_replay(self, cache, inputs, slot_ids):
        if self.kind == "mamba2":
            x, dt, B, C = inputs
            p = self.params
            return mamba2_replay_step(cache, x, dt, p["A"], B, C, slot_ids=slot_ids, D=p["D"], dt_bias=p["dt_bias"])
        step = gdn_replay_step if self.kind == "gdn" else kda_replay_step
        return step(cache, *inputs, slot_ids=slot_ids)

    def public_decode(self, state, inputs, slot_ids):
        if self.kind == "mamba2":
            x, dt, B, C = inputs
            p = self.params
            return mamba2_decode_step(state, x, dt, p["A"], B, C, slot_ids=slot_ids, D=p["D"], dt_bias=p["dt_bias"])
        step = gdn_decode_step if self.kind == "gdn" else kda_decode_step
        return step(state, *inputs, slot_ids=slot_ids)

    def dense_cache(self, state_dtype, device=None):
        g = self.g
        if self.kind == "mamba2":
            dims, kw = (g.nheads, g.head_dim, g.d_state, g.ngroups), dict(act_dtype=self.act)
        else:
            dims, kw = (g.k_heads, g.v_heads, g.head_k_dim, g.head_v_dim), dict(record_dtype=self.records)
        return CACHES[self.kind].allocate(NUM_SLOTS, *dims, L, state_dtype=state_dtype, device=device, **kw)


def pooled_layer(fam, state_dtype, cursors=None):
    """(store layer with pool-view records, checkpoint pool view, backing buffers) with random
    checkpoints and records, and ``cursors``."""
    backing = {}
    views = {}
    for f in record_fields(fam.kind, fam.g, L, record_dtype=fam.records, state_dtype=state_dtype):
        views[f.name], backing[f.name] = pool_view(NUM_SLOTS, f.shape, f.dtype, scale=2, position=1)
        views[f.name].copy_(torch.randn(views[f.name].shape, dtype=torch.float64))
    store = ReplayRecordStore(
        {7: (fam.kind, fam.g, fam.records)}, L, NUM_SLOTS, state_dtype=state_dtype, record_views={7: views}
    )
    checkpoint, backing["checkpoint"] = pool_view(NUM_SLOTS, state_shape(fam.kind, fam.g), state_dtype, scale=3, position=2)
    checkpoint.copy_(torch.randn(checkpoint.shape, dtype=torch.float64))
    layer = store.layer(7)
    if cursors is not None:
        layer.cursor.copy_(torch.tensor(cursors, dtype=torch.int32))
    return layer, checkpoint, backing


FAMILIES = [
    ("mamba2", torch.bfloat16, None),
    ("gdn", torch.bfloat16, None),
    ("kda", torch.float16, None),
    ("mamba2", torch.float32, None),
    ("gdn", torch.bfloat16, torch.float32),
    ("kda", torch.bfloat16, torch.float32),
]


@pytest.mark.parametrize(
    "kind, act, records", FAMILIES, ids=[f"{k}-{str(a)[6:]}-rec{str(r or a)[6:]}" for k, a, r in FAMILIES]
)
def test_step_on_pool_views_equals_public_op_on_dense_cache(kind, act, records):
    fam = Family(kind, act, torch.float32, records)
    layer, checkpoint, backing = pooled_layer(fam, torch.float32, cursors=[0, 2, 3, 1, 0])
    before = {name: outside(view, backing[name]) for name, view in list(layer.records.items()) + [("checkpoint", checkpoint)]}
    cache = fam.dense_cache(torch.float32)
    cache.checkpoint.copy_(checkpoint)
    for name, view in layer.records.items():
        getattr(cache, name).copy_(view)
    cache.cursor.copy_(layer.cursor)
    slot_ids = torch.tensor([3, -1, 0, 1], dtype=torch.int32)
    for step in range(2 * L + 1):
        inputs = fam.inputs(4)
        ours = fam.ours(layer, checkpoint, inputs, slot_ids)
        ref = fam.public_replay(cache, inputs, slot_ids)
        assert torch.equal(ours, ref), f"step {step}: outputs differ"
    assert torch.equal(checkpoint, cache.checkpoint)
    for name, view in layer.records.items():
        assert torch.equal(view, getattr(cache, name)), name
    assert torch.equal(layer.cursor, cache.cursor) and layer.cursor.tolist() != [0, 2, 3, 1, 0]
    for name, view in list(layer.records.items()) + [("checkpoint", checkpoint)]:
        assert torch.equal(outside(view, backing[name]), before[name]), f"{name}: wrote outside its view"


def _custom_op_step(fam, layer, checkpoint, inputs, slot_ids):
    """The route the steps took before they called the public ops: ``torch.ops.replayssm.*``
    straight on the pool views (inputs already valid)."""
    r = layer.records
    if fam.kind == "mamba2":
        x, dt, B, C = inputs
        p, out = fam.params, torch.zeros_like(x)
        torch.ops.replayssm.mamba2_replay_step(
            checkpoint, r["x_records"], r["dt_records"], r["B_records"], layer.cursor, layer.arrivals,
            x, dt, p["A"], B, C, slot_ids, p["D"], None, p["dt_bias"], True, out,
        )  # fmt: skip
        return out
    out = torch.zeros_like(inputs[2])
    torch.ops.replayssm.gated_delta_replay_step(
        checkpoint, r["d_records"], r["k_records"], r["g_records"], layer.cursor, layer.arrivals,
        *inputs, slot_ids, fam.g.head_k_dim**-0.5, True, out,
    )  # fmt: skip
    return out


@pytest.mark.parametrize(
    "kind, act, records", FAMILIES, ids=[f"{k}-{str(a)[6:]}-rec{str(r or a)[6:]}" for k, a, r in FAMILIES]
)
def test_public_ops_on_pool_views_bit_identical_to_custom_ops(kind, act, records):
    """The public ops on a cache of pool views give, bit for bit, what the custom ops gave on
    the same views: outputs, checkpoints, records and counters, across flushes."""
    fam = Family(kind, act, torch.float32, records)
    cursors = [0, 2, 3, 1, 0]
    torch.manual_seed(1)
    layer, checkpoint, backing = pooled_layer(fam, torch.float32, cursors=cursors)
    torch.manual_seed(1)
    old_layer, old_checkpoint, old_backing = pooled_layer(fam, torch.float32, cursors=cursors)
    slot_ids = torch.tensor([3, -1, 0, 1], dtype=torch.int32)
    for step in range(2 * L + 1):
        inputs = fam.inputs(4)
        ours = fam.ours(layer, checkpoint, inputs, slot_ids)
        old = _custom_op_step(fam, old_layer, old_checkpoint, inputs, slot_ids)
        assert torch.equal(ours, old), f"step {step}: outputs differ"
    for name, raw in backing.items():
        assert torch.equal(raw, old_backing[name]), name
    assert torch.equal(layer.cursor, old_layer.cursor) and torch.equal(layer.arrivals, old_layer.arrivals)


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_step_float64_matches_recurrence_and_padding_untouched(kind):
    fam = Family(kind, torch.float64, torch.float64)
    layer, checkpoint, _ = pooled_layer(fam, torch.float64, cursors=[0] * NUM_SLOTS)
    state = checkpoint.clone()  # the conventional recurrence's state, dense
    padding_slot = 4
    pad_before = checkpoint[padding_slot].clone()
    indices = torch.tensor([2, padding_slot, 0, padding_slot], dtype=torch.int32)
    padding = torch.tensor([False, True, False, True])
    slot_ids = replay_slot_ids(indices, padding)
    assert slot_ids.tolist() == [2, -1, 0, -1]
    for step in range(3 * L + 2):
        inputs = fam.inputs(4)
        out = torch.full_like(inputs[0] if kind == "mamba2" else inputs[2], float("nan"))
        ours = fam.ours(layer, checkpoint, inputs, slot_ids, out=out)
        ref = fam.public_decode(state, inputs, torch.tensor([2, -1, 0, -1], dtype=torch.int32))
        torch.testing.assert_close(
            ours[[0, 2]], ref[[0, 2]], rtol=0, atol=1e-12, msg=lambda m, step=step: f"{kind} step {step}: {m}"
        )
        assert torch.isnan(ours[[1, 3]]).all(), "padding rows' out must be left as it was"
    assert torch.equal(checkpoint[padding_slot], pad_before)
    assert layer.cursor[padding_slot] == 0 and layer.arrivals.eq(0).all()


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_flush_delta_rule_records_gives_current_state(kind):
    fam = Family(kind, torch.float64, torch.float64)
    layer, checkpoint, _ = pooled_layer(fam, torch.float64, cursors=[0] * NUM_SLOTS)
    state = checkpoint.clone()
    slots = torch.tensor([1, 3], dtype=torch.int32)
    for _ in range(L + 2):  # one flush in, then cursor 2 (records held)
        inputs = fam.inputs(2)
        fam.ours(layer, checkpoint, inputs, slots)
        fam.public_decode(state, inputs, slots)
    assert layer.cursor[[1, 3]].tolist() == [2, 2]
    untouched = checkpoint[[0, 2, 4]].clone()
    flush_delta_rule_records(layer, checkpoint, torch.tensor([3, -1, 1, 3], dtype=torch.int32))
    torch.testing.assert_close(checkpoint[[1, 3]], state[[1, 3]], rtol=0, atol=1e-12)
    assert layer.cursor.eq(0).all()
    assert torch.equal(checkpoint[[0, 2, 4]], untouched)
    # cursor-0 rows keep their checkpoint bit for bit
    again = checkpoint.clone()
    flush_delta_rule_records(layer, checkpoint, slots)
    assert torch.equal(checkpoint, again)


def test_flush_teeth_corrupt_record_changes_state():
    fam = Family("gdn", torch.float64, torch.float64)
    layer, checkpoint, _ = pooled_layer(fam, torch.float64, cursors=[0] * NUM_SLOTS)
    state = checkpoint.clone()
    slots = torch.tensor([2], dtype=torch.int32)
    for _ in range(3):
        inputs = fam.inputs(1)
        fam.ours(layer, checkpoint, inputs, slots)
        fam.public_decode(state, inputs, slots)
    layer.records["d_records"][2, :, 1] += 1.0  # a held record (position 1 < cursor 3)
    flush_delta_rule_records(layer, checkpoint, slots)
    assert (checkpoint[2] - state[2]).abs().max() > 1e-3


def test_flush_rejects_mamba2_layer_and_out_of_range_slot():
    fam = Family("gdn", torch.float32, torch.float32)
    layer, checkpoint, _ = pooled_layer(fam, torch.float32)
    with pytest.raises(ValueError, match="slot_ids holds 9; expected ids < num_slots = 5"):
        flush_delta_rule_records(layer, checkpoint, torch.tensor([9], dtype=torch.int32))
    m = Family("mamba2", torch.float32, torch.float32)
    mlayer, mcheckpoint, _ = pooled_layer(m, torch.float32)
    with pytest.raises(ValueError, match="layer holds mamba2 records; expected gdn or kda"):
        flush_delta_rule_records(mlayer, mcheckpoint, torch.tensor([0], dtype=torch.int32))


def _snapshot(layer, checkpoint):
    return [checkpoint.clone(), layer.cursor.clone()] + [v.clone() for v in layer.records.values()]


@pytest.mark.parametrize(
    "case, error, match",
    [
        ("kind", ValueError, "layer holds gdn records; expected mamba2"),
        ("shape", ValueError, "checkpoint has shape \\(4, 4, 8, 16\\); expected \\[num_slots, ...\\] = \\(5, 4, 8, 16\\)"),
        ("stride", ValueError, "expected stride 1 in its last dimension"),
        ("dtype", TypeError, "checkpoint is torch.int32"),
        ("x_dtype", TypeError, "x is torch.float16; expected bfloat16"),
        ("slot", ValueError, "slot_ids holds 5; expected ids < num_slots = 5"),
    ],
)
def test_mamba2_step_errors_leave_buffers_unchanged(case, error, match):
    fam = Family("mamba2", torch.bfloat16, torch.float32)
    layer, checkpoint, _ = pooled_layer(fam, torch.float32, cursors=[1, 0, 2, 0, 0])
    x, dt, B, C = fam.inputs(2)
    slot_ids = torch.tensor([0, 2], dtype=torch.int32)
    before = _snapshot(layer, checkpoint)
    ckpt = checkpoint
    if case == "kind":
        layer = pooled_layer(Family("gdn", torch.bfloat16, torch.float32), torch.float32)[0]
    elif case == "shape":
        ckpt = checkpoint[:4]
    elif case == "stride":
        ckpt = checkpoint.transpose(2, 3).contiguous().transpose(2, 3)
    elif case == "dtype":
        ckpt = torch.zeros(checkpoint.shape, dtype=torch.int32)
    elif case == "x_dtype":
        x = x.half()
    elif case == "slot":
        slot_ids = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(error, match=match):
        mamba2_step(layer, ckpt, x, dt, fam.params["A"], B, C, slot_ids=slot_ids)
    if case != "kind":
        after = _snapshot(layer, checkpoint)
        assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_gated_delta_step_rejects_wrong_gate_rank():
    fam = Family("kda", torch.bfloat16, torch.float32)
    layer, checkpoint, _ = pooled_layer(fam, torch.float32)
    q, k, v, g, beta = fam.inputs(2)
    with pytest.raises(ValueError, match="g has shape \\(2, 3\\); expected \\[batch, v_heads, head_k_dim\\]"):
        gated_delta_step(layer, checkpoint, q, k, v, g[..., 0], beta, slot_ids=torch.tensor([0, 1], dtype=torch.int32))


def test_padding_rows_and_buffer():
    dummy = 10_000
    assert padding_rows([5, dummy, 7, dummy], 4, dummy_request_id=dummy) == [False, True, False, True]
    assert padding_rows([dummy - 2, dummy - 3], 2, dummy_request_id=dummy, max_draft_len=2) == [True, False]
    assert padding_rows(None, 3, dummy_request_id=dummy) == [False] * 3
    with pytest.raises(ValueError, match="2 request ids for a batch of 3"):
        padding_rows([1, 2], 3, dummy_request_id=dummy)
    buf = PaddingRowBuffer(6, "cpu")
    flags = buf.update([True, False, True])
    assert flags.tolist() == [True, False, True, False, False, False]
    assert buf.update([False]) is flags and flags.tolist() == [False] * 6  # same storage
    with pytest.raises(ValueError, match="7 rows; the buffer holds 6"):
        buf.update([False] * 7)


def test_replay_slot_ids_shape_mismatch():
    with pytest.raises(ValueError, match="expected equal \\[batch\\]"):
        replay_slot_ids(torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_causal_conv_step_matches_conv1d(dtype):
    batch, dim, width, steps = 3, 6, 4, 5
    weight, bias = torch.randn(dim, width, dtype=torch.float64), torch.randn(dim, dtype=torch.float64)
    xs = torch.randn(steps, batch, dim, dtype=torch.float64)
    history = torch.randn(batch, dim, width - 1, dtype=torch.float64)
    rows = history.to(dtype)
    seq = torch.cat([history, xs.permute(1, 2, 0)], dim=2)  # [batch, dim, width-1+steps]
    ref = F.silu(F.conv1d(seq, weight[:, None, :], bias, groups=dim))  # [batch, dim, steps]
    for t in range(steps):
        y, rows = causal_conv_step(rows, xs[t].to(dtype), weight, bias)
        tol = 0 if dtype == torch.float64 else 3e-2
        torch.testing.assert_close(y.double(), ref[:, :, t], rtol=tol, atol=tol or 1e-12)
    torch.testing.assert_close(rows.double(), seq[:, :, -(width - 1) :].to(dtype).double())
    with pytest.raises(ValueError, match="weight has shape \\(6, 3\\); expected \\[dim, width\\]"):
        causal_conv_step(rows, xs[0].to(dtype), weight[:, :3])


def test_replay_cache_checks_a_view_layout_once():
    """The cache over a checkpoint view is built (and its layout checked) once per layout: a
    new view object of the same memory reuses it; another layout builds (and checks) anew."""
    fam = Family("gdn", torch.float32, torch.float32)
    layer, checkpoint, backing = pooled_layer(fam, torch.float32)
    first = replay_cache("op", layer, checkpoint)
    again = checkpoint.as_strided(checkpoint.shape, checkpoint.stride(), checkpoint.storage_offset())
    assert again is not checkpoint and replay_cache("op", layer, again) is first
    dense = checkpoint.contiguous()
    assert replay_cache("op", layer, dense).checkpoint is dense
    with pytest.raises(ValueError, match="^op: GDNReplayCache: checkpoint has strides"):
        replay_cache("op", layer, dense.transpose(2, 3).contiguous().transpose(2, 3))
