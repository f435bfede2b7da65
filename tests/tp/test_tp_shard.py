"""Per-rank rows of weights, caches and conv states, checked against an independent slicing of
TensorRT-LLM's layout (split the whole tensor into its parts, chunk each part over the ranks)."""

import pytest
import torch

from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.models import ATTENTION, GDN, MAMBA2, AttentionGeometry, DeltaRuleGeometry, Layer, Mamba2Geometry
from trtllm_replayssm.tp import DeltaRuleShard, Mamba2Mixer, Mamba2Shard, TPGroup, layer_shard, rank_major_rows
from trtllm_replayssm.tp.layers import random_weights

M2_SPLIT = Mamba2Geometry(nheads=8, head_dim=2, d_state=3, ngroups=4, d_conv=4)
M2_REPL = Mamba2Geometry(nheads=8, head_dim=2, d_state=3, ngroups=2, d_conv=4)
GDN_G = DeltaRuleGeometry(k_heads=4, v_heads=8, head_k_dim=3, head_v_dim=2, d_conv=4)


def _mamba2_parts_for_rank(w, g, tp, r):
    """Rank r's rows of in_proj [z | x | B | C | dt], TensorRT-LLM style, by chunking each part."""
    d_inner, grouped = g.nheads * g.head_dim, g.ngroups * g.d_state
    z, x, B, C, dt = torch.split(w, [d_inner, d_inner, grouped, grouped, g.nheads])
    if tp > g.ngroups:  # replicated: the group of rank r's heads
        rep = tp // g.ngroups
        B, C = (t.view(g.ngroups, g.d_state, -1)[r // rep] for t in (B, C))
    else:
        B, C = (t.chunk(tp)[r] for t in (B, C))
    return torch.cat([z.chunk(tp)[r], x.chunk(tp)[r], B, C, dt.chunk(tp)[r]])


@pytest.mark.parametrize(
    "g, tp",
    [(M2_SPLIT, 1), (M2_SPLIT, 2), (M2_SPLIT, 4), (M2_REPL, 4), (M2_REPL, 8)],
    ids=["g4-tp1", "g4-tp2", "g4-tp4", "g2-tp4-repl", "g2-tp8-repl"],
)
def test_mamba2_shard_rows_match_trtllm_layout(g, tp):
    d_in_proj = 2 * g.nheads * g.head_dim + 2 * g.ngroups * g.d_state + g.nheads
    w = torch.randn(d_in_proj, 5)
    conv = torch.randn(g.conv_dim, 4)
    layer = Layer(0, MAMBA2, g)
    for r in range(tp):
        s = Mamba2Shard(g, tp, r)
        loc = s.local
        assert torch.equal(w[s.in_proj_rows()], _mamba2_parts_for_rank(w, g, tp, r))
        # conv rows [x | B | C]: the in_proj parts without z and dt.
        x_bc = torch.cat([torch.zeros(g.nheads * g.head_dim, 4), conv, torch.zeros(g.nheads, 4)])
        want = _mamba2_parts_for_rank(x_bc, g, tp, r)[loc.nheads * g.head_dim : -loc.nheads]
        assert torch.equal(conv[s.conv_rows()], want)
        assert s.conv_rows().numel() == loc.conv_dim  # the rank's conv state channels
    # A plain contiguous tp-way split of the rank-major permutation hands out each rank's rows.
    perm = rank_major_rows(layer, tp, "in_proj_rows")
    assert [torch.equal(c, Mamba2Shard(g, tp, r).in_proj_rows()) for r, c in enumerate(perm.chunk(tp))] == [True] * tp
    if tp <= g.ngroups:
        assert torch.equal(perm.sort().values, torch.arange(d_in_proj))  # a permutation
    else:
        assert perm.numel() == tp * Mamba2Shard(g, tp, 0).in_proj_rows().numel() > d_in_proj


def test_mamba2_shard_replication_and_norm_groups():
    s = Mamba2Shard(M2_REPL, 8, 5)
    assert (s.replication, s.first_group, s.norm_group_size, s.local.ngroups) == (4, 1, 8, 1)
    assert Mamba2Shard(M2_SPLIT, 2, 1).replication == 1 and Mamba2Shard(M2_SPLIT, 2, 1).first_group == 2


def _gdn_dense_for_rank(w, g, tp, r):
    """Grouped [q_g | k_g | v_g | z_g] per key head -> dense [Q | K | V | Z], each chunked over ranks."""
    rdv = g.v_heads // g.k_heads * g.head_v_dim
    groups = w.view(g.k_heads, 2 * g.head_k_dim + 2 * rdv, -1)
    parts = torch.split(groups, [g.head_k_dim, g.head_k_dim, rdv, rdv], dim=1)
    return torch.cat([p.reshape(-1, w.shape[-1]).chunk(tp)[r] for p in parts])


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gdn_shard_rows_match_trtllm_layout(tp):
    g = GDN_G
    key_dim, value_dim = g.k_heads * g.head_k_dim, g.v_heads * g.head_v_dim
    qkvz = torch.randn(2 * key_dim + 2 * value_dim, 3)
    ba = torch.randn(2 * g.v_heads, 3)
    conv = torch.randn(2 * key_dim + value_dim, 4)
    ratio = g.v_heads // g.k_heads
    for r in range(tp):
        s = DeltaRuleShard(g, tp, r)
        assert torch.equal(qkvz[s.gdn_in_proj_qkvz_rows()], _gdn_dense_for_rank(qkvz, g, tp, r))
        b, a = torch.split(ba.view(g.k_heads, 2 * ratio, 3), [ratio, ratio], dim=1)
        want_ba = torch.cat([b.reshape(-1, 3).chunk(tp)[r], a.reshape(-1, 3).chunk(tp)[r]])
        assert torch.equal(ba[s.gdn_in_proj_ba_rows()], want_ba)
        Q, K, V = torch.split(conv, [key_dim, key_dim, value_dim])
        assert torch.equal(conv[s.conv_rows()], torch.cat([Q.chunk(tp)[r], K.chunk(tp)[r], V.chunk(tp)[r]]))
        # TensorRT-LLM: conv_dim_per_tp = 2 * key_dim / tp + value_dim / tp
        assert s.conv_rows().numel() == 2 * key_dim // tp + value_dim // tp == s.local.conv_dim


def test_shard_cache_splits_heads_and_replicates_groups():
    tp = 4
    m = Mamba2ReplayCache.allocate(
        3, M2_REPL.nheads, 2, 3, M2_REPL.ngroups, 5, state_dtype=torch.float32, act_dtype=torch.float32
    )
    for t in (m.checkpoint, m.x_records, m.dt_records, m.B_records):
        t.normal_()
    m.cursor.copy_(torch.tensor([1, 4, 0], dtype=torch.int32))
    shards = [Mamba2Shard(M2_REPL, tp, r).shard_cache(m) for r in range(tp)]
    for name in ("checkpoint", "x_records", "dt_records"):
        assert torch.equal(torch.cat([getattr(s, name) for s in shards], dim=1), getattr(m, name))
    for r, s in enumerate(shards):
        assert torch.equal(s.B_records[:, 0], m.B_records[:, r // 2])  # replica of its group
        assert torch.equal(s.cursor, m.cursor) and s.nheads == 2 and s.ngroups == 1
    for cls in (GDNReplayCache, KDAReplayCache):
        c = cls.allocate(3, GDN_G.k_heads, GDN_G.v_heads, 3, 2, 5, state_dtype=torch.float32, record_dtype=torch.float32)
        for t in (c.checkpoint, c.d_records, c.k_records, c.g_records):
            t.normal_()
        parts = [DeltaRuleShard(GDN_G, 2, r).shard_cache(c) for r in range(2)]
        for name in ("checkpoint", "d_records", "k_records", "g_records"):
            assert torch.equal(torch.cat([getattr(p, name) for p in parts], dim=1), getattr(c, name)), (cls, name)
        assert type(parts[0]) is cls and parts[0].k_heads == 2 and parts[0].v_heads == 4


def test_shard_cache_splits_an_fp8_checkpoints_row_scales_with_its_heads():
    m = Mamba2ReplayCache.allocate(3, M2_REPL.nheads, 2, 3, M2_REPL.ngroups, 5, state_dtype=torch.float8_e4m3fn)
    m.admit(torch.arange(3), torch.randn(3, M2_REPL.nheads, 2, 3))
    shards = [Mamba2Shard(M2_REPL, 4, r).shard_cache(m) for r in range(4)]
    assert torch.equal(torch.cat([s.checkpoint_scale for s in shards], dim=1), m.checkpoint_scale)
    assert torch.equal(torch.cat([s.checkpoint.view(torch.uint8) for s in shards], dim=1), m.checkpoint.view(torch.uint8))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Mamba2Shard(M2_SPLIT, 3, 0), "nheads = 8 is not divisible by tp_size = 3"),
        (lambda: Mamba2Shard(Mamba2Geometry(12, 2, 3, 3, 4), 2, 0), "ngroups = 3 and tp_size = 2"),
        (lambda: Mamba2Shard(M2_SPLIT, 2, 2), r"rank is 2; expected an int in \[0, tp_size = 2\)"),
        (lambda: DeltaRuleShard(GDN_G, 8, 0), "k_heads = 4 is not divisible by tp_size = 8"),
        (lambda: layer_shard(Layer(3, GDN, GDN_G), 8, 0), r"layer 3 \(gdn\): .*k_heads = 4"),
        (lambda: layer_shard(Layer(1, ATTENTION, AttentionGeometry(2, 8)), 2, 0), "expected one of mamba2, gdn, kda"),
    ],
)
def test_impossible_splits_are_clear_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_mixer_rejects_a_shard_of_another_rank():
    w = random_weights(MAMBA2, M2_SPLIT, 6, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="shard is rank 1 of 2; group is rank 0 of 1"):
        Mamba2Mixer(w, Mamba2Shard(M2_SPLIT, 2, 1), TPGroup(), dtype=torch.float32, device="cpu")
    k = KDAReplayCache.allocate(3, GDN_G.k_heads, GDN_G.v_heads, 4, 2, 5, state_dtype=torch.float8_e4m3fn)
    k.admit(torch.arange(3), torch.randn(3, GDN_G.v_heads, 2, 4))
    parts = [DeltaRuleShard(GDN_G, 2, r).shard_cache(k) for r in range(2)]
    assert torch.equal(torch.cat([p.checkpoint_scale for p in parts], dim=1), k.checkpoint_scale)
