"""``benchmarks/peers_gated_delta.py`` without a GPU: loading and skipping the GDN peers, their
inputs (packed q/k/v, raw gates, padded pools and slot ids), the write-position tables, every
peer row's arguments and checks, the table's bookkeeping and the ``--peers`` wiring of
``gated_delta_decode.py``.

The rows' calls go to stand-ins that compute what each peer computes (from its documented
semantics, with this project's reference) and assert its layout checks. Where shared/peers is
present, the real peers run too: their Python wrappers check our arguments (Triton launches
replaced by a recorder), and, without a GPU, their Triton kernels run under the Triton
interpreter (conftest.py sets TRITON_INTERPRET=1) on fp32 activations (the interpreter's
bf16 tl.dot is not usable) and are compared with this project's reference."""

import argparse
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import peers_gated_delta as pgd
import peers_mamba2 as pm
from trtllm_replayssm.bench import GatedDeltaDecodeCase
from trtllm_replayssm.bench.timing import torch_dtype
from trtllm_replayssm.reference.gated_delta import (
    delta_rule_gate,
    gated_delta_decode_step_ref,
    gated_delta_replay_step_ref,
)

PEERS_DIR = next(
    (
        p
        for p in (os.path.join(ROOT, "shared", "peers"), os.path.join(os.path.dirname(ROOT), "shared", "peers"))
        if os.path.isdir(os.path.join(p, "vllm"))
    ),
    None,
)
needs_peers = pytest.mark.skipif(PEERS_DIR is None, reason="shared/peers not present")
interpreted = pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="runs the peers' Triton kernels on CPU tensors under the Triton interpreter (no GPU)",
)
GEOM = (2, 4, 32, 16)  # k_heads, v_heads, head_k_dim, head_v_dim: GQA 2, K >= 32 (the peer's 2 K tiles of >= 16)


@pytest.fixture
def isolated_imports(monkeypatch):
    """sys.path and the vllm modules as they were, after (each test imports the peers afresh)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    ours = lambda k: k.split(".")[0] == "vllm"  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    yield
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)


def gdn_case(L=4, state="f32", act="bf16", batch=3, nsets=2, family="gdn", geom=GEOM):
    """The benchmark's GatedDeltaDecodeCase on the CPU (a pool of ``nsets`` slot sets) with this
    project's reference as its conventional step."""
    HK, HV, K, V = geom
    row_bytes = HV * V * K * torch_dtype(state).itemsize
    case = GatedDeltaDecodeCase(family, geom, batch, L, state, act, device="cpu", pool_bytes=nsets * batch * row_bytes)
    assert len(case.slot_sets) == nsets

    def conventional(st, slots, out):
        gated_delta_decode_step_ref(
            st, case.q, case.k, case.v, case.g, case.beta, slot_ids=slots, scale=case.kw["scale"], use_qk_l2norm=True, out=out
        )

    case.conventional = conventional
    return case


def with_slot_zero_first(case):
    """The case with the slot set holding slot 0 first (the one the checks run on)."""
    i = next(i for i, s in enumerate(case.slot_sets) if bool((s == 0).any()))
    case.slot_sets.insert(0, case.slot_sets.pop(i))
    return case


def unpack(mixed_qkv, HK, HV, K, V):
    """q, k [batch, HK, K] and v [batch, HV, V] from vLLM's packed projection."""
    B = mixed_qkv.shape[0]
    q, k, v = mixed_qkv.split([HK * K, HK * K, HV * V], dim=1)
    return q.reshape(B, HK, K), k.reshape(B, HK, K), v.reshape(B, HV, V)


def common_checks(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices):
    """The layout checks both peer wrappers make on the shared arguments (and ours: fp32 gates)."""
    B = mixed_qkv.shape[0]
    S, HV, V, K = initial_state.shape
    assert mixed_qkv.dim() == 2 and mixed_qkv.stride(-1) == 1 and (mixed_qkv.shape[1] - HV * V) % (2 * K) == 0
    assert a.shape == b.shape == (B, HV) and a.is_contiguous() and b.is_contiguous()
    assert a.dtype == b.dtype == A_log.dtype == dt_bias.dtype == torch.float32
    assert A_log.shape == dt_bias.shape == (HV,) and initial_state.stride(-1) == 1
    assert ssm_state_indices.shape == (B,) and ssm_state_indices.dtype == torch.int32
    return (mixed_qkv.shape[1] - HV * V) // (2 * K), HV, K, V


def official_stand_in(
    mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache, g_cache, out, ssm_state_indices, write_pos,
    use_qk_l2norm_in_kernel=False, block_v=None, num_warps=None, num_stages=None, nk=None,
):  # fmt: skip
    """The official GDN replay step by its semantics, through this project's replay reference:
    g, beta from the raw gates, write_pos per row as the cursor of the row's slot (records
    [0, write_pos) held, a flush at L - 1), a slot index <= 0 a padding row with zero output."""
    HK, HV, K, V = common_checks(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices)
    S, L = initial_state.shape[0], d_cache.shape[2]
    assert d_cache.shape == (S, HV, L, V) and k_cache.shape == (S, HK, L, K) and g_cache.shape == (S, HV, L)
    assert g_cache.dtype == torch.float32 and out.is_contiguous() and out.shape == (mixed_qkv.shape[0], HV, V)
    assert write_pos.dtype == torch.int32 and write_pos.dim() == 1 and int(write_pos.max()) < L
    q, k, v = unpack(mixed_qkv, HK, HV, K, V)
    g, beta = delta_rule_gate(a, b, A_log, dt_bias)
    live = ssm_state_indices > 0
    out[~live] = 0
    slots = torch.where(live, ssm_state_indices, -1)
    cursor = torch.zeros(S, dtype=torch.int32)
    cursor[slots[live].long()] = write_pos[live]
    gated_delta_replay_step_ref(
        initial_state, d_cache, k_cache, g_cache, cursor, q, k, v, g, beta,
        slot_ids=slots, scale=scale, use_qk_l2norm=use_qk_l2norm_in_kernel, out=out,
    )  # fmt: skip


def conventional_stand_in(
    mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices, use_qk_l2norm_in_kernel=False
):
    """vLLM's packed GDN decode step by its semantics, through this project's reference (slot
    index <= 0: padding, zero output)."""
    HK, HV, K, V = common_checks(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices)
    assert out.shape == (mixed_qkv.shape[0], 1, HV, V) and out.is_contiguous()
    q, k, v = unpack(mixed_qkv, HK, HV, K, V)
    g, beta = delta_rule_gate(a, b, A_log, dt_bias)
    live = ssm_state_indices > 0
    out[~live] = 0
    slots = torch.where(live, ssm_state_indices, -1)
    gated_delta_decode_step_ref(
        initial_state, q, k, v, g, beta, slot_ids=slots, scale=scale, use_qk_l2norm=use_qk_l2norm_in_kernel, out=out[:, 0]
    )


def worst(errs):
    return pgd._worst(errs)


# ---- loading ----------------------------------------------------------------------------------


def test_missing_peers_dir_is_one_note_not_an_error(isolated_imports, tmp_path):
    before = list(sys.path)
    peers = pgd.load_peers(str(tmp_path / "absent"))
    assert (peers.conventional, peers.official) == (None, None)
    assert len(peers.notes) == 1 and "absent is not a folder" in peers.notes[0] and "skipped" in peers.notes[0]
    assert sys.path == before


def test_peers_that_fail_to_import_are_skipped_with_a_note_each(isolated_imports, tmp_path, capsys):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('not this vllm')\n")
    peers = pgd.load_peers(str(tmp_path))
    assert (peers.conventional, peers.official) == (None, None) and sys.path[0] == str(tmp_path)
    assert len(peers.notes) == 2 and all(n.startswith("# peers: ") and "not this vllm" in n for n in peers.notes)
    assert "packed_decode" in peers.notes[0] and "replayssm" in peers.notes[1]
    # No peer: the per-case rows are none, silently (the notes were given once).
    assert pgd.peer_rows(gdn_case(), peers) == [] and capsys.readouterr().out == ""


@needs_peers
def test_the_gdn_peers_import_from_shared_peers(isolated_imports):
    peers = pgd.load_peers(PEERS_DIR)
    assert peers.notes == []
    assert peers.conventional.__name__ == "fused_recurrent_gated_delta_rule_packed_decode"
    assert peers.official.__name__ == "fused_recurrent_gated_delta_rule_replayssm"


# ---- the peers' inputs ------------------------------------------------------------------------


def test_pack_qkv_puts_q_k_v_side_by_side_head_by_head():
    B, HK, HV, K, V = 2, 2, 4, 3, 5
    q, k, v = (torch.randn(B, h, d).bfloat16() for h, d in ((HK, K), (HK, K), (HV, V)))
    m = pgd.pack_qkv(q, k, v)
    assert m.shape == (B, 2 * HK * K + HV * V) and m.dtype == torch.bfloat16 and m.is_contiguous()
    # The kernels' offsets: q head h at h*K, k head h at HK*K + h*K, v head h at 2*HK*K + h*V.
    assert torch.equal(m[1, 1 * K : 2 * K], q[1, 1]) and torch.equal(m[0, HK * K + K : HK * K + 2 * K], k[0, 1])
    assert torch.equal(m[1, 2 * HK * K + 3 * V : 2 * HK * K + 4 * V], v[1, 3])
    with pytest.raises(ValueError, match="pack_qkv: q"):
        pgd.pack_qkv(q, k[:, :1], v)


def test_raw_gates_give_back_g_and_beta_through_the_peers_gate():
    g = torch.cat([-(torch.rand(5, 6) * 0.1 + 0.001), torch.full((1, 6), -30.0), torch.full((1, 6), -1e-6)])
    beta = torch.cat([torch.rand(5, 6), torch.zeros(1, 6), torch.ones(1, 6)])
    A_log, dt_bias = pgd.gate_params(6)
    assert len(set(A_log.tolist())) == 6 and len(set(dt_bias.tolist())) == 6 and not bool((A_log == 0).any())
    a, b = pgd.raw_gates(g, beta, A_log, dt_bias)
    assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape == g.shape and a.is_contiguous()
    g2, beta2 = delta_rule_gate(a, b, A_log, dt_bias)
    assert torch.allclose(g2, g, rtol=1e-5, atol=0) and torch.allclose(beta2, beta, rtol=0, atol=2e-6)
    # The parameters matter: swapped or left out, the gate is a different one.
    assert not torch.allclose(delta_rule_gate(a, b, dt_bias, A_log)[0], g, rtol=1e-2)
    assert not torch.allclose(delta_rule_gate(a, b, torch.zeros(6))[0], g, rtol=1e-2)
    with pytest.raises(ValueError, match="g must be < 0"):
        pgd.raw_gates(torch.zeros(2, 6), beta[:2], A_log, dt_bias)
    with pytest.raises(ValueError, match="GDN"):
        pgd.raw_gates(g[:, :, None].expand(-1, -1, 4), beta, A_log, dt_bias)


def test_padded_pools_and_slot_ids_keep_slot_zero_for_the_null_block():
    t = torch.arange(3 * 2 * 4, dtype=torch.float32).view(3, 2, 4).bfloat16()
    p = pgd.padded(t)
    assert p.shape == (4, 2, 4) and p.dtype == t.dtype and p.is_contiguous() and p.data_ptr() != t.data_ptr()
    assert torch.equal(p[1:], t) and not bool(p[0].any())
    slots = torch.tensor([2, 0, 1], dtype=torch.int64)
    ps = pgd.peer_slots(slots)
    assert ps.dtype == torch.int32 and ps.is_contiguous() and ps.tolist() == [3, 1, 2]
    assert torch.equal(p[ps.long()], t[slots])  # the peers' slot i is our slot i - 1
    assert pgd.peer_slots(torch.tensor([-1, -2], dtype=torch.int32)).tolist() == [0, -1]  # padding stays padding


def test_peer_inputs_follow_the_case_and_reload_in_place():
    case = gdn_case()
    inp = pgd.PeerInputs.of(case)
    ptrs = [t.data_ptr() for t in (inp.mixed_qkv, inp.a, inp.b)]
    g, beta = delta_rule_gate(inp.a, inp.b, inp.A_log, inp.dt_bias)
    assert torch.allclose(g, case.g, rtol=1e-5) and torch.allclose(beta, case.beta, atol=2e-6)
    assert torch.equal(inp.mixed_qkv, pgd.pack_qkv(case.q, case.k, case.v))
    with pgd.step_inputs(case) as set_step:
        set_step(3)
        assert bool((case.g < 0).all()) and bool(((case.beta >= 0) & (case.beta < 1)).all())
        inp.load(case)
        assert [t.data_ptr() for t in (inp.mixed_qkv, inp.a, inp.b)] == ptrs  # graphs keep their buffers
        assert torch.allclose(delta_rule_gate(inp.a, inp.b, inp.A_log, inp.dt_bias)[0], case.g, rtol=1e-5)
        assert torch.equal(inp.mixed_qkv[:, : case.k_heads * case.head_k_dim], case.q.flatten(1))
    assert not torch.equal(inp.mixed_qkv, pgd.pack_qkv(case.q, case.k, case.v))  # the case's own came back


# ---- the rows' arguments and what they compute --------------------------------------------------


@pytest.mark.parametrize("state", ["f32", "bf16"])
def test_official_row_holds_L_rounds_of_advancing_write_positions(state):
    case = gdn_case(L=4, state=state)
    saved = {k: v.clone() for k, v in case.cache.tensors().items()}
    (row,) = pgd.official_rows(case, official_stand_in)
    assert row.name == "official_replay_L4" and row.route.env == {}
    refs = pgd.reference_outputs(case, 2 * case.L + 2)
    errs = row.check(refs)
    assert len(errs) == 2 * case.L + 2 and worst(errs) < (2e-2 if state == "f32" else 5e-2)
    seen = []
    (row,) = pgd.official_rows(case, lambda **k: seen.append(k))
    assert len(row.route.steps) == case.L * len(case.slot_sets)
    for f in row.route.steps:
        f()
    cursor = case.cache.cursor.long()
    for i, k in enumerate(seen):
        r, s = divmod(i, len(case.slot_sets))
        slots = case.slot_sets[s]
        assert torch.equal(k["ssm_state_indices"].long(), slots.long() + 1) and k["out"] is case.out
        assert torch.equal(k["write_pos"].long(), (cursor[slots.long()] + r) % case.L)
        assert k["write_pos"].dtype == torch.int32 and k["write_pos"].is_contiguous()
        assert k["scale"] == case.head_k_dim**-0.5 and k["use_qk_l2norm_in_kernel"] is True
    # Over the L rounds each row sits at every position once: one flush per slot.
    wp = torch.stack([k["write_pos"] for k in seen]).view(case.L, len(case.slot_sets), case.batch)
    assert torch.equal((wp == case.L - 1).sum(0), torch.ones(len(case.slot_sets), case.batch, dtype=torch.int64))
    # Its own pools, padded: the case's are untouched by the check and the steps.
    k0 = seen[0]
    assert k0["initial_state"].shape[0] == case.num_slots + 1 and k0["d_cache"].shape[0] == case.num_slots + 1
    assert all(torch.equal(v, saved[n]) for n, v in case.cache.tensors().items())
    (row,) = pgd.official_rows(case, official_stand_in)  # the timed steps compute replay steps
    for f in row.route.steps:
        f()


def test_official_row_replays_the_case_records_in_place_of_ours():
    """The timed sequence's write positions are this project's cursors advancing: step by step,
    the outputs equal our replay step's on a copy of the case's cache, and after the L rounds
    our cursors are back where the tables started."""
    case = gdn_case(L=4, act="f32")
    ours = {k: v.clone() for k, v in case.cache.tensors().items()}
    outs = []
    (row,) = pgd.official_rows(case, lambda **k: (official_stand_in(**k), outs.append(k["out"].clone())))
    for f in row.route.steps:
        f()
    for i, ref_out in enumerate(outs):
        slots = case.slot_sets[i % len(case.slot_sets)]
        y = torch.empty_like(case.out)
        gated_delta_replay_step_ref(
            ours["checkpoint"], ours["d_records"], ours["k_records"], ours["g_records"], ours["cursor"],
            case.q, case.k, case.v, case.g, case.beta, slot_ids=slots, scale=case.kw["scale"], use_qk_l2norm=True, out=y,
        )  # fmt: skip
        assert torch.allclose(ref_out, y, rtol=1e-4, atol=1e-5)
    assert torch.equal(ours["cursor"], case.cache.cursor)  # L steps per slot: back where they started


@pytest.mark.parametrize("state", ["f32", "bf16"])
def test_conventional_row_runs_vllms_step_on_its_own_padded_pool(state):
    case = gdn_case(state=state)
    (row,) = pgd.conventional_rows(case, conventional_stand_in)
    refs = pgd.reference_outputs(case, 2 * case.L + 2)
    assert row.name == "vllm_conv" and worst(row.check(refs)) < 1e-5
    assert len(row.route.steps) == len(case.slot_sets)
    seen = []
    (row,) = pgd.conventional_rows(case, lambda **k: seen.append(k))
    for f in row.route.steps:
        f()
    assert [torch.equal(k["ssm_state_indices"], pgd.peer_slots(s)) for k, s in zip(seen, case.slot_sets)] == [True] * 2
    assert all(k["out"].shape == (case.batch, 1, case.v_heads, case.head_v_dim) for k in seen)
    assert all(k["out"].data_ptr() == case.out.data_ptr() for k in seen)
    assert seen[0]["initial_state"].shape[0] == case.num_slots + 1 and seen[0]["initial_state"] is seen[1]["initial_state"]
    # A wrong call shows in the check: no q/k normalisation.
    (row,) = pgd.conventional_rows(case, lambda **k: conventional_stand_in(**{**k, "use_qk_l2norm_in_kernel": False}))
    assert worst(row.check(refs)) > pm.REFCHECK_TOL


def test_the_checks_catch_misplaced_positions_slots_and_gates(monkeypatch):
    """Teeth: write positions one ahead, slot ids not shifted past the null block (slot 0 in the
    checked set), or the gates' parameters dropped each fail the check."""
    case = with_slot_zero_first(gdn_case(L=4))
    refs = pgd.reference_outputs(case, 2 * case.L + 2)

    def ahead(write_pos, d_cache, **k):
        official_stand_in(write_pos=(write_pos + 1) % d_cache.shape[2], d_cache=d_cache, **k)

    assert worst(pgd.official_rows(case, ahead)[0].check(refs)) > pm.REFCHECK_TOL

    def no_bias(dt_bias, **k):
        official_stand_in(dt_bias=torch.zeros_like(dt_bias), **k)

    assert worst(pgd.official_rows(case, no_bias)[0].check(refs)) > pm.REFCHECK_TOL
    monkeypatch.setattr(pgd, "PAD_SLOTS", 0)
    for build, fn in ((pgd.official_rows, official_stand_in), (pgd.conventional_rows, conventional_stand_in)):
        assert worst(build(case, fn)[0].check(refs)) > pm.REFCHECK_TOL


def test_kda_cases_are_skipped_with_a_note(capsys):
    peers = pgd.GDNPeers(conventional=conventional_stand_in, official=official_stand_in)
    assert pgd.peer_rows(gdn_case(family="kda"), peers, "state=f32 L=4 batch=3") == []
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "# vllm_conv (state=f32 L=4 batch=3): GDN only (family kda: no peer kernel for it here); skipped",
        "# official_replay (state=f32 L=4 batch=3): GDN only (family kda: no peer kernel for it here); skipped",
    ]
    assert [r.name for r in pgd.peer_rows(gdn_case(), peers)] == ["vllm_conv", "official_replay_L4"]


# ---- the real peers ---------------------------------------------------------------------------


class Launch:
    """Stands for a Triton kernel: ``kernel[grid](*args, **kw)`` records instead of launching."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *a, **k: self.calls.append((grid, a, k))


@needs_peers
@pytest.mark.parametrize("state", ["f32", "bf16"])
@pytest.mark.parametrize("L", [8, 16, 32])
def test_the_peer_wrappers_accept_our_arguments(isolated_imports, monkeypatch, state, L):
    """The real Python wrappers run their shape, stride and dtype checks on our arguments (bf16
    activations, as timed); only the Triton launches are replaced."""
    peers = pgd.load_peers(PEERS_DIR)
    conv_mod, off_mod = sys.modules[peers.conventional.__module__], sys.modules[peers.official.__module__]
    conv, off = Launch(), Launch()
    monkeypatch.setattr(conv_mod, "fused_recurrent_gated_delta_rule_packed_decode_kernel", conv)
    monkeypatch.setattr(off_mod, "fused_recurrent_gated_delta_rule_replayssm_kernel", off)
    case = gdn_case(L=L, state=state)
    (crow,) = pgd.conventional_rows(case, peers.conventional)
    (orow,) = pgd.official_rows(case, peers.official)
    crow.route.steps[0]()
    orow.route.steps[-1]()
    ((grid, _, k),) = conv.calls
    assert grid == (1, case.batch * case.v_heads) and k["o"].data_ptr() == case.out.data_ptr()
    assert k["h0"].shape[0] == case.num_slots + 1 and int(k["ssm_state_indices"].min()) >= 1
    ((grid, _, k),) = off.calls
    HK, HV, K, V = GEOM
    assert grid == (1, case.batch, HV) and k["MAX_CACHE_LEN"] == L and (k["H"], k["HV"], k["K"], k["V"]) == GEOM
    assert k["o"] is case.out and k["h0"] is k["ht"] and k["h0"].dtype == torch_dtype(state)
    assert k["USE_QK_L2NORM_IN_KERNEL"] is True and k["scale"] == K**-0.5
    assert torch.equal(k["ssm_state_indices"], pgd.peer_slots(case.slot_sets[-1]))
    last = case.cache.cursor.long()[case.slot_sets[-1].long()]  # the last step: round L-1, last set
    assert torch.equal(k["write_pos"].long(), (last + L - 1) % L)


@needs_peers
@interpreted
@pytest.mark.parametrize("state", ["f32", "bf16"])
def test_the_official_kernel_matches_ours_under_the_interpreter(isolated_imports, state):
    """The official GDN kernel itself (Triton interpreter, fp32 activations) through our row: its
    2L+2 checked steps (two flushes) match our conventional step. (The interpreter rounds fp32 to
    bf16 toward zero, a GPU to nearest: a bf16 checkpoint drifts by an ulp a flush here.)"""
    peers = pgd.load_peers(PEERS_DIR)
    case = with_slot_zero_first(gdn_case(L=4, state=state, act="f32"))
    refs = pgd.reference_outputs(case, 2 * case.L + 2)
    (row,) = pgd.official_rows(case, peers.official)
    errs = row.check(refs)
    assert worst(errs) < (1e-4 if state == "f32" else 2e-2), errs


@needs_peers
@interpreted
def test_the_official_kernel_replays_the_case_cache_as_ours_does(isolated_imports):
    """The official GDN kernel itself (Triton interpreter, fp32) on the timed sequence from the
    case's spread cursors: every step's output equals our replay reference's on a copy of the
    case's cache, and afterwards the padded pools equal that cache (checkpoints, and the records
    still held)."""
    peers = pgd.load_peers(PEERS_DIR)
    case = with_slot_zero_first(gdn_case(L=4, act="f32"))
    ours = {k: v.clone() for k, v in case.cache.tensors().items()}
    seen = []
    (row,) = pgd.official_rows(case, lambda **k: (peers.official(**k), seen.append(k)))
    for i, f in enumerate(row.route.steps):
        f()
        y = torch.empty_like(case.out)
        gated_delta_replay_step_ref(
            ours["checkpoint"], ours["d_records"], ours["k_records"], ours["g_records"], ours["cursor"],
            case.q, case.k, case.v, case.g, case.beta, slot_ids=case.slot_sets[i % len(case.slot_sets)],
            scale=case.kw["scale"], use_qk_l2norm=True, out=y,
        )  # fmt: skip
        assert torch.allclose(case.out, y, rtol=1e-4, atol=1e-5), i
    k = seen[-1]
    assert torch.allclose(k["initial_state"][1:], ours["checkpoint"], rtol=1e-4, atol=1e-5)
    assert not bool(k["initial_state"][0].any()) and not bool(k["d_cache"][0].any())  # the null block untouched
    held = torch.arange(case.L)[None, :] < ours["cursor"].long()[:, None]  # [slot, L]: positions still read
    for name in ("d_records", "k_records", "g_records"):
        cache = k[name[0] + "_cache"][1:]
        mask = held[:, None, :, None] if cache.dim() == 4 else held[:, None, :]
        assert bool(mask.any()) and torch.allclose(
            torch.where(mask, cache, 0), torch.where(mask, ours[name], 0), rtol=1e-4, atol=1e-5
        ), name


@needs_peers
@interpreted
def test_vllms_conventional_kernel_matches_ours_under_the_interpreter(isolated_imports, monkeypatch):
    """vLLM's packed GDN decode kernel itself (Triton interpreter, fp32) through our row. Its
    ``exp`` is a module-level alias of tl.exp, which the interpreter does not patch: bound here to
    a call of tl.exp that it does."""
    peers = pgd.load_peers(PEERS_DIR)
    import triton.language as tl

    monkeypatch.setattr(sys.modules[peers.conventional.__module__], "exp", lambda x: tl.exp(x))
    case = with_slot_zero_first(gdn_case(L=4, act="f32"))
    refs = pgd.reference_outputs(case, 2 * case.L + 2)
    (row,) = pgd.conventional_rows(case, peers.conventional)
    assert worst(row.check(refs)) < 1e-5


# ---- timing and the table's bookkeeping -------------------------------------------------------


def test_run_table_ratios_notes_and_rows(monkeypatch, capsys):
    """run_table with stand-in timings: speedups against both conventional steps, peers without
    GB/s, their differences printed, a peer's failed eager steps skipped with a note (capture
    and timing replaced; the rest needs a GPU)."""
    case = gdn_case(L=4)
    case.refcheck = lambda: 1e-6
    case.bytes_per_step = lambda route: 1e6
    case.step = lambda route, slots, config=None: None

    def broken(**k):
        raise RuntimeError("no kernel for this")

    peers = pgd.GDNPeers(conventional=conventional_stand_in, official=broken)
    monkeypatch.setattr(pgd, "capture", lambda route: route)
    us = dict(decode_step=10.0, replay_step=5.0, replay_triton=6.0, vllm_conv=11.0, official_replay_L4=5.5)
    monkeypatch.setattr(
        pgd, "time_interleaved", lambda graphs, steps, reps=5: {n: (us[n] * 1e-6, [us[n] * 1e-3]) for n in graphs}
    )
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    args = argparse.Namespace(state=["f32"], L=[4], batch=[3], act="bf16")
    rows = pgd.run_table(lambda batch, L, state: case, args, 2e12, peers)
    by = {r["route"]: r for r in rows}
    assert list(by) == ["decode_step", "replay_step", "replay_triton", "vllm_conv"]
    assert by["replay_step"]["speedup"] == pytest.approx(2.0)
    assert by["replay_step"]["speedup_vs_vllm"] == pytest.approx(2.2)
    assert by["vllm_conv"]["peer"] and by["vllm_conv"]["gbps"] is None and by["vllm_conv"]["refcheck"] < 1e-5
    assert by["decode_step"]["gbps"] == pytest.approx(100.0) and not by["decode_step"]["peer"]
    out = capsys.readouterr().out
    where = "state=f32 act=bf16 L=4 batch=3"
    assert f"# official_replay_L4 ({where}): eager steps failed (RuntimeError: no kernel" in out
    assert f"# vllm_conv ({where}): max relative difference to our conventional step" in out and "over 10 steps" in out
    assert "vllm_conv" in out.splitlines()[-1] and "      -" in out.splitlines()[-1]
    # The official row when it runs: timed, with its difference in the table.
    peers = pgd.GDNPeers(official=official_stand_in)
    rows = pgd.run_table(lambda batch, L, state: case, args, 2e12, peers)
    by = {r["route"]: r for r in rows}
    assert by["official_replay_L4"]["peer"] and by["official_replay_L4"]["refcheck"] < 5e-2
    assert (
        by["official_replay_L4"]["speedup"] == pytest.approx(10 / 5.5) and by["official_replay_L4"]["speedup_vs_vllm"] is None
    )


def test_gated_delta_decode_wires_peers_in_for_gdn_only(monkeypatch, tmp_path, capsys):
    """--peers: the peers' table and a ``_peers`` results file for GDN; a note and the plain table
    for KDA or --sweep; without it, the plain table and results file as before."""
    import gated_delta_decode as gdd

    calls = []
    monkeypatch.setattr(gdd.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gdd, "copy_bandwidth", lambda: 1e12)
    monkeypatch.setattr(gdd, "header", lambda name, bw: f"# bench {name}")
    monkeypatch.setattr(gdd, "results_stem", lambda out_dir, name: str(tmp_path / name))
    monkeypatch.setattr(gdd, "write_json", lambda stem, bw, rows, **meta: calls.append(("json", stem, meta)))
    monkeypatch.setattr(gdd, "plot_speedups", lambda *a, **k: None)
    monkeypatch.setattr(gdd, "run_sweep", lambda make_case, args: calls.append(("sweep",)))
    monkeypatch.setattr(gdd, "run_table", lambda make_case, args, bw: calls.append(("plain",)) or [])
    monkeypatch.setattr(
        pgd, "run_table", lambda make_case, args, bw, peers: calls.append(("peers", peers)) or [{"route": "vllm_conv"}]
    )
    loaded = pgd.GDNPeers(conventional=conventional_stand_in, notes=[])
    monkeypatch.setattr(pgd, "load_peers", lambda d: loaded if d == "DIR" else pytest.fail(d))
    common = ["--geometry", "2,4,32,16", "--batch", "1", "--L", "4", "--state", "f32", "--out-dir", str(tmp_path)]

    gdd.main(["--family", "gdn", "--peers", "DIR", *common])
    assert calls == [
        ("peers", loaded),
        ("json", str(tmp_path / "gdn_decode_peers"), {"family": "gdn", "peers": "DIR", "peer_notes": []}),
    ]
    assert "# peers: loaded from DIR" in capsys.readouterr().out
    calls.clear()
    gdd.main(["--family", "kda", "--peers", "DIR", *common])
    assert calls == [("plain",), ("json", str(tmp_path / "kda_decode"), {"family": "kda"})]
    assert "# peers: GDN only" in capsys.readouterr().out
    calls.clear()
    gdd.main(["--family", "gdn", "--peers", "DIR", "--sweep", *common])
    assert calls == [("sweep",)] and "# peers: not timed with --sweep" in capsys.readouterr().out
    calls.clear()
    gdd.main(["--family", "gdn", *common])
    assert calls == [("plain",), ("json", str(tmp_path / "gdn_decode"), {"family": "gdn"})]
    assert "# peers" not in capsys.readouterr().out
