"""ReplayRecordStore: records and counters by slot; view checks, reset, relocate."""

import pytest
import torch

from pooled import GDN_GEOMETRY, MAMBA2_GEOMETRY, pool_view
from trtllm_replayssm_builders.trtllm.layout import record_fields
from trtllm_replayssm_builders.trtllm.store import ReplayRecordStore

LAYERS = {3: ("mamba2", MAMBA2_GEOMETRY, torch.bfloat16), 5: ("gdn", GDN_GEOMETRY, torch.float32)}
KW = dict(state_dtype=torch.float32)


def _views(change=None):
    """Pool views of every record field; ``change`` = ((layer, field), tensor) replaces one."""
    views = {}
    for layer, (kind, g, dtype) in LAYERS.items():
        views[layer] = {f.name: pool_view(6, f.shape, f.dtype)[0] for f in record_fields(kind, g, 4, record_dtype=dtype, **KW)}
    if change is not None:
        (layer, name), value = change
        views[layer][name] = value
    return views


def test_store_owns_dense_zeroed_records_and_counters():
    store = ReplayRecordStore(LAYERS, 4, 6, **KW)
    layer = store.layer(3)
    assert layer.kind == "mamba2" and layer.num_slots == 6 and layer.L == 4
    assert layer.records["x_records"].shape == (6, 4, 4, 8) and layer.records["x_records"].is_contiguous()
    assert layer.records["x_records"].dtype == torch.bfloat16
    assert store.layer(5).records["d_records"].dtype == torch.float32
    assert layer.cursor.is_contiguous() and layer.cursor.dtype == torch.int32
    assert store.layer(4) is None and store.layer_ids == [3, 5]
    assert store.counters.shape == (2, 3, 6) and not store.counters.any()


def test_store_accepts_pool_views():
    views = _views()
    store = ReplayRecordStore(LAYERS, 4, 6, record_views=views, **KW)
    assert store.layer(5).records["g_records"] is views[5]["g_records"]
    assert not store.owns_records


@pytest.mark.parametrize(
    "change, error, match",
    [
        (
            ((3, "x_records"), torch.zeros(6, 4, 4, 9, dtype=torch.bfloat16)),
            ValueError,
            "layer 3 x_records has shape \\(6, 4, 4, 9\\); expected \\[num_slots, ...\\] = \\(6, 4, 4, 8\\)",
        ),
        (
            ((3, "dt_records"), torch.zeros(6, 4, 4, dtype=torch.bfloat16)),
            TypeError,
            "layer 3 dt_records is torch.bfloat16; expected torch.float32",
        ),
        (
            ((5, "k_records"), torch.zeros(6, 2, 16, 4, dtype=torch.float32).transpose(2, 3)),
            ValueError,
            "layer 5 k_records has strides .*; expected each slot dense",
        ),
    ],
)
def test_store_rejects_bad_views(change, error, match):
    with pytest.raises(error, match=match):
        ReplayRecordStore(LAYERS, 4, 6, record_views=_views(change), **KW)


def test_store_rejects_missing_layer_and_empty():
    views = _views()
    del views[5]
    with pytest.raises(ValueError, match="record_views has no entry for layer 5"):
        ReplayRecordStore(LAYERS, 4, 6, record_views=views, **KW)
    with pytest.raises(ValueError, match="layers is empty"):
        ReplayRecordStore({}, 4, 6, **KW)


def test_reset_zeroes_only_given_slots():
    store = ReplayRecordStore(LAYERS, 4, 6, **KW)
    store.counters.copy_(torch.arange(36, dtype=torch.int32).view(2, 3, 6) + 1)
    store.reset([1, 4])
    assert store.counters[:, :, [1, 4]].eq(0).all()
    assert store.counters[:, :, [0, 2, 3, 5]].ne(0).all()
    store.reset(torch.tensor([], dtype=torch.int64))
    with pytest.raises(ValueError, match="slots \\[6\\] out of range; expected ids in \\[0, 6\\)"):
        store.reset([6])


def test_relocate_swap_and_chain_read_sources_first():
    store = ReplayRecordStore(LAYERS, 4, 6, **KW)
    store.counters.copy_(torch.arange(36, dtype=torch.int32).view(2, 3, 6))
    x = store.layer(3).records["x_records"]
    x.copy_(torch.arange(6, dtype=torch.bfloat16)[:, None, None, None].expand_as(x))
    before = store.counters.clone()
    # swap 0 <-> 1, chain 2 -> 3 -> 4, fresh sequence (-1 -> 5) moves nothing
    store.relocate([0, 1, 2, 3, -1], [1, 0, 3, 4, 5])
    for old, new in [(0, 1), (1, 0), (2, 3), (3, 4)]:
        assert torch.equal(store.counters[:, :, new], before[:, :, old])
        assert x[new].eq(old).all()
    assert torch.equal(store.counters[:, :, 5], before[:, :, 5])
    assert torch.equal(store.counters[:, :, 2], before[:, :, 2])  # a source keeps its values


def test_relocate_pool_views_moves_counters_only_and_rejects_bad_pairs():
    views = _views()
    store = ReplayRecordStore(LAYERS, 4, 6, record_views=views, **KW)
    x = views[3]["x_records"]
    x[0] = 1.0
    store.counters[:, 0, 0] = 3
    store.relocate([0], [2])
    assert store.counters[:, 0, 2].eq(3).all() and x[2].eq(0).all()  # the pool moves records
    with pytest.raises(ValueError, match="2 old slots and 1 new slots"):
        store.relocate([0, 1], [2])
    with pytest.raises(ValueError, match="repeat; expected distinct destinations"):
        store.relocate([0, 1], [2, 2])
