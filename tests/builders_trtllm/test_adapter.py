"""The adapter against a behavioural stand-in of the pinned TensorRT-LLM surfaces (CPU, float64):
what gets patched, records injected into and counted by the V2 manager, the KV-budget estimator,
padding rows, replay decode == conventional decode for Mamba-2 / GDN (mixed batches included) /
KDA, speculative managers left to TensorRT-LLM, and uninstall restoring every name."""

import types

import pytest
import torch

import fake_trtllm as ft
from standins import importer
from trtllm_replayssm.models import PRESETS
from trtllm_replayssm_builders.trtllm import adapter
from trtllm_replayssm_builders.trtllm.config import ReplaySSMConfig
from trtllm_replayssm_builders.trtllm.layout import bytes_per_slot, replay_bytes_per_rank
from trtllm_replayssm_builders.trtllm.steps import flush_delta_rule_records

L = 3
MAPPING = types.SimpleNamespace(tp_size=1, pp_size=1, cp_size=1, enable_attention_dp=False)
KV = types.SimpleNamespace(enable_block_reuse=False)


@pytest.fixture
def trt():
    """Hooks installed on fresh stand-in modules; removed afterwards."""
    modules = ft.modules()
    originals = {
        (cls, name): cls.__dict__[name]
        for cls, name in [
            (ft.MambaHybridCacheManagerV2, "__init__"),
            (ft.Mamba2Metadata, "prepare"),
            (ft.Mamba2Mixer, "__init__"),
            (ft.Mamba2Mixer, "forward"),
            (ft.Qwen3NextGatedDeltaNet, "forward_core"),
            (ft.KimiKDALinearAttention, "forward_decode"),
        ]
    }
    status = adapter.install(ReplaySSMConfig(buffer_len=L), importer(modules))
    yield status
    assert adapter.uninstall()
    for (cls, name), fn in originals.items():
        assert cls.__dict__[name] is fn, f"{cls.__name__}.{name} not restored"
    assert ft.ESTIMATORS["replayssm_records"](None, None, MAPPING, spec_config=None, use_separate_draft_kv_cache=False) == 0


def manager(
    mask,
    *,
    nheads,
    head_dim,
    d_state,
    n_groups,
    layout="x_b_c",
    spec=None,
    state_dtype=torch.float64,
    act_dtype=torch.float64,
    **kw,
):
    return ft.MambaHybridCacheManagerV2(
        d_state,
        4,
        nheads,
        n_groups,
        head_dim,
        sum(mask),
        mask,
        act_dtype,
        state_dtype,
        kw.pop("kv", KV),
        None,
        max_batch_size=4,
        mapping=MAPPING,
        spec_config=spec,
        conv_state_layout=layout,
        **kw,
    )


def test_install_patches_and_is_idempotent(trt):
    assert trt.trtllm_version == "1.3.0rc26"
    assert any(p.endswith("MambaHybridCacheManagerV2.__init__") for p in trt.patched)
    assert adapter.install(ReplaySSMConfig(buffer_len=L)) is trt
    with pytest.raises(ValueError, match="already enabled"):
        adapter.install(ReplaySSMConfig(buffer_len=L + 1))


def _mamba2_setup(spec=None):
    mixers = {i: ft.Mamba2Mixer(nheads=4, head_dim=8, d_state=16, n_groups=2, layer_idx=i) for i in (0, 2)}
    mgr = manager([True, False, True], nheads=4, head_dim=8, d_state=16, n_groups=2, spec=spec)
    return mixers, mgr, ft.Mamba2Metadata(max_batch_size=4)


def test_mamba2_records_injected_counted_and_decode_equals_conventional(trt):
    mixers, mgr, meta = _mamba2_setup()
    assert trt.layers == {0: "mamba2", 2: "mamba2"}
    ext = mgr.get_aux_cache_extension("replayssm_records")
    assert type(ext).__name__ == "ReplaySSMCacheExtension"
    ours = bytes_per_slot("mamba2", ext.store.layer(0).geometry, L, record_dtype=torch.float64, state_dtype=torch.float64)
    state_bytes = 4 * 8 * 16 * 8 + (4 * 8 + 2 * 2 * 16) * 3 * 8
    assert mgr.page_bytes == 2 * (state_bytes + ours)  # the manager counts them
    # Two requests, prefilled states written by TensorRT-LLM; slot 4 is the padding slot.
    reference = {}
    mgr.schedule({101: 1, 102: 3}, {})
    mgr._request_slots[ft.DUMMY_REQUEST_ID] = 4
    for i in (0, 2):
        states = mgr.mamba_layer_cache(i).temporal
        states.copy_(torch.randn(states.shape, dtype=torch.float64))
        reference[i] = states.clone()
    padding_before = {i: mgr.mamba_layer_cache(i).temporal[4].clone() for i in (0, 2)}
    ids = [101, 102, ft.DUMMY_REQUEST_ID, ft.DUMMY_REQUEST_ID]
    for _ in range(2 * L + 1):
        attn = ft.attn_metadata_for(mgr, ids)
        meta.prepare(attn)
        for i, mixer in mixers.items():
            inputs = (
                torch.randn(4, 4, 8, dtype=torch.float64),
                torch.randn(4, 4, dtype=torch.float64),
                torch.randn(4, 2, 16, dtype=torch.float64),
                torch.randn(4, 2, 16, dtype=torch.float64),
            )
            y = mixer(inputs, attn, meta)
            from trtllm_replayssm.ops import mamba2_decode_step

            ref = mamba2_decode_step(
                reference[i],
                inputs[0][:2],
                inputs[1][:2],
                mixer.A,
                inputs[2][:2],
                inputs[3][:2],
                slot_ids=torch.tensor([1, 3], dtype=torch.int32),
                D=mixer.D,
                dt_bias=mixer.dt_bias,
            )
            torch.testing.assert_close(y[:2], ref, rtol=0, atol=1e-12)
            assert mixer.original_ssu_calls == 0
    for i in (0, 2):
        assert torch.equal(mgr.mamba_layer_cache(i).temporal[4], padding_before[i])
    assert ext.store.counters[:, :, 4].eq(0).all()
    # A new request in slot 1 (context): its cursor restarts.
    assert ext.store.layer(0).cursor[1] == (2 * L + 1) % L
    mgr.free(101)
    mgr.schedule({103: 1}, {})
    assert ext.store.layer(0).cursor[1] == 0 and ext.store.layer(2).cursor[1] == 0


def test_speculative_manager_keeps_trtllm_path(trt):
    mixers, mgr, meta = _mamba2_setup(spec=object())
    assert mgr.get_aux_cache_extension("replayssm_records") is None
    mgr.schedule({}, {7: 0})
    attn = ft.attn_metadata_for(mgr, [7])
    meta.prepare(attn)
    inputs = (
        torch.randn(1, 4, 8, dtype=torch.float64),
        torch.randn(1, 4, dtype=torch.float64),
        torch.randn(1, 2, 16, dtype=torch.float64),
        torch.randn(1, 2, 16, dtype=torch.float64),
    )
    mixers[0](inputs, attn, meta)
    assert mixers[0].original_ssu_calls == 1


def test_v1_style_manager_without_records_refuses_at_decode(trt):
    mixers, _, meta = _mamba2_setup()
    bare = types.SimpleNamespace(
        is_speculative=lambda: False,
        get_aux_cache_extension=lambda key: None,
        get_state_indices=lambda ids, pad: [0] * len(ids),
    )
    attn = ft.attn_metadata_for(bare, [7])
    meta.prepare(attn)
    with pytest.raises(RuntimeError, match="holds no ReplaySSM records.*use_kv_cache_manager_v2=True"):
        mixers[0](None, attn, meta)


def test_block_reuse_refused_at_manager_construction(trt):
    _mamba2_setup()
    with pytest.raises(ValueError, match="enable_block_reuse=True is not supported"):
        manager([True], nheads=4, head_dim=8, d_state=16, n_groups=2, kv=types.SimpleNamespace(enable_block_reuse=True))


def test_estimator_counts_hooked_models(trt):
    estimator = ft.ESTIMATORS["replayssm_records"]
    config = PRESETS["nemotron-3-super-120b"]
    model_config = types.SimpleNamespace(
        pretrained_config=types.SimpleNamespace(to_dict=lambda: {**config, "torch_dtype": "bfloat16"})
    )
    mapping = types.SimpleNamespace(tp_size=4, enable_attention_dp=False)
    assert (
        estimator(model_config, None, mapping, spec_config=None, use_separate_draft_kv_cache=False) == 0
    )  # no hooked layer built yet
    _mamba2_setup()
    got = estimator(model_config, None, mapping, spec_config=None, use_separate_draft_kv_cache=False)
    assert (
        got
        == replay_bytes_per_rank(config, ("mamba2",), L, tp_size=4, activation_dtype=torch.bfloat16)
        == 40 * (303_104 // 16 * L // 4 + 12)
    )
    assert estimator(model_config, None, mapping, spec_config=object(), use_separate_draft_kv_cache=False) == 0


def test_gdn_decode_and_mixed_batch_flush_equal_conventional(trt):
    mixer = ft.Qwen3NextGatedDeltaNet(None, None, layer_idx=1)
    mixer.conv1d.weight.data.normal_()
    mgr = manager([False, True], nheads=4, head_dim=8, d_state=8, n_groups=2, layout="q_k_v")
    meta = ft.Mamba2Metadata(max_batch_size=4)
    ext = mgr.get_aux_cache_extension("replayssm_records")
    mgr.schedule({201: 0, 202: 2}, {})
    cache = mgr.mamba_layer_cache(1)
    cache.temporal.copy_(torch.randn(cache.temporal.shape, dtype=torch.float64))
    cache.conv.copy_(torch.randn(cache.conv.shape, dtype=torch.float64))
    ref_state, ref_conv = cache.temporal.clone(), cache.conv.clone()
    twin = ft.Qwen3NextGatedDeltaNet(None, None, layer_idx=1)  # conventional twin, same weights
    twin.load_state_dict(mixer.state_dict())
    # A speculative manager: the hooks leave the twin on TensorRT-LLM's (conventional) path.
    ref_mgr = types.SimpleNamespace(
        mamba_layer_cache=lambda i: ft.LayerCache(ref_conv, ref_state), is_speculative=lambda: True
    )
    for step in range(2 * L + 2):
        mixed_step = step == L + 1  # a prefill joins: decode rows run on the full state
        ids = ([301] if mixed_step else []) + [201, 202]
        mgr._request_slots[301] = 3
        attn = ft.attn_metadata_for(mgr, ids, num_contexts=int(mixed_step))
        meta.prepare(attn)
        n = 2
        mixed = torch.randn(n, mixer.conv1d.weight.shape[0], dtype=torch.float64)
        a, b = torch.randn(n, 4, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
        if mixed_step:  # the stand-in models no prefill tokens: only the decode rows are passed
            cursors = ext.store.layer(1).cursor[[0, 2]].clone()
            assert cursors.ne(0).all()
        o = mixer.forward_core(mixed, a, b, attn, meta)
        ref_attn = types.SimpleNamespace(seq_lens=torch.ones(2), num_contexts=0, kv_cache_manager=ref_mgr)
        ref_meta = types.SimpleNamespace(state_indices=torch.tensor([0, 2], dtype=torch.int32))
        ref = twin.forward_core(mixed, a, b, ref_attn, ref_meta)
        torch.testing.assert_close(o, ref, rtol=0, atol=1e-12, msg=lambda m, step=step: f"step {step}: {m}")
        if mixed_step:
            assert ext.store.layer(1).cursor[[0, 2]].eq(0).all()
            torch.testing.assert_close(cache.temporal[[0, 2]], ref_state[[0, 2]], rtol=0, atol=1e-12)
    assert mixer.decode_calls["conventional"] == 1  # only the mixed step ran conventionally


def test_kda_decode_equals_conventional(trt):
    mixer = ft.KimiKDALinearAttention(None, layer_idx=0)
    twin = ft.KimiKDALinearAttention(None, layer_idx=0)
    twin.load_state_dict(mixer.state_dict())
    mgr = manager([True], nheads=2, head_dim=8, d_state=8, n_groups=2, layout="q_k_v")
    meta = ft.Mamba2Metadata(max_batch_size=4)
    mgr.schedule({401: 1, 402: 0}, {})
    mgr._request_slots[ft.DUMMY_REQUEST_ID] = 4
    cache = mgr.mamba_layer_cache(0)
    cache.temporal.copy_(torch.randn(cache.temporal.shape, dtype=torch.float64))
    cache.conv.copy_(torch.randn(cache.conv.shape, dtype=torch.float64))
    ref_state, ref_conv = cache.temporal[[1, 0]].clone(), cache.conv[[1, 0]].clone()
    for step in range(2 * L + 1):
        attn = ft.attn_metadata_for(mgr, [401, 402, ft.DUMMY_REQUEST_ID])
        attn.mamba_metadata = meta
        meta.prepare(attn)
        x = torch.randn(3, 16, dtype=torch.float64)
        out = mixer._forward_impl(x, attn)
        # TensorRT-LLM's own (unhooked) forward_decode on the twin's dense copies
        ref = type(twin).forward_decode.__wrapped__(twin, x[:2], ref_conv, ref_state, torch.tensor([0, 1], dtype=torch.int32))
        torch.testing.assert_close(out[:2], ref, rtol=0, atol=1e-12, msg=lambda m, step=step: f"step {step}: {m}")
    torch.testing.assert_close(cache.conv[[1, 0]], ref_conv, rtol=0, atol=1e-12)
    ext = mgr.get_aux_cache_extension("replayssm_records")
    assert ext.store.counters[:, :, 4].eq(0).all()


def test_flush_helper_is_what_mixed_batches_use():
    # guard: the adapter calls the tested plain function, not a copy of it
    assert adapter.flush_delta_rule_records is flush_delta_rule_records
