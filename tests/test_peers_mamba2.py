"""``benchmarks/peers_mamba2.py`` without a GPU: loading and skipping peers, the cursor tables,
and every peer row's arguments. The rows' calls go to stand-ins that compute what each peer
computes (from its documented semantics, with this project's reference) and assert its layout
checks; where shared/peers is present, the vLLM wrappers themselves check our arguments (their
Triton launches replaced by a recorder) and FlashInfer's signature binds them."""

import argparse
import ast
import glob
import os
import sys
import tarfile
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import peers_mamba2 as pm
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref, mamba2_replay_step_ref

PEERS_DIR = next(
    (
        p
        for p in (os.path.join(ROOT, "shared", "peers"), os.path.join(os.path.dirname(ROOT), "shared", "peers"))
        if os.path.isdir(os.path.join(p, "vllm"))
    ),
    None,
)
needs_peers = pytest.mark.skipif(PEERS_DIR is None, reason="shared/peers not present")


@pytest.fixture
def isolated_imports(monkeypatch):
    """sys.path, FLASHINFER_DISABLE_JIT and the vllm / flashinfer modules as they were, after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("FLASHINFER_DISABLE_JIT", "1")
    ours = lambda k: k.split(".")[0] in ("vllm", "flashinfer")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    yield
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)


def fake_case(L=4, state=torch.float32, batch=3, nsets=2, geometry=(4, 16, 16, 2)):
    """A CPU stand-in of mamba2_decode.Case: its tensors, slot sets and conventional step."""
    H, P, N, G = geometry
    g = torch.Generator().manual_seed(0)
    S = nsets * batch
    perm = torch.randperm(S, generator=g).to(torch.int32)
    cache = Mamba2ReplayCache.allocate(S, H, P, N, G, L, state_dtype=state, act_dtype=torch.bfloat16)
    cache.checkpoint.copy_(torch.randn(cache.checkpoint.shape, generator=g))
    cache.x_records.normal_(generator=g)
    cache.B_records.normal_(generator=g)
    cache.dt_records.uniform_(0.01, 0.05, generator=g)
    cache.cursor.copy_(torch.randint(0, L, (S,), generator=g, dtype=torch.int32))

    def r(*s):
        return torch.randn(*s, generator=g).to(torch.bfloat16)

    case = SimpleNamespace(
        nheads=H,
        head_dim=P,
        d_state=N,
        ngroups=G,
        batch=batch,
        L=L,
        state=state,
        slot_sets=[perm[i * batch : (i + 1) * batch].contiguous() for i in range(nsets)],
        num_slots=S,
        x=r(batch, H, P),
        dt=r(batch, H),
        B=r(batch, G, N),
        C=r(batch, G, N),
        A=-(torch.rand(H, generator=g) + 1),
        dt_bias=torch.rand(H, generator=g) - 4,
        D=torch.randn(H, generator=g),
        cache=cache,
        conv_state=cache.checkpoint,
    )
    case.out = torch.empty_like(case.x)
    case.conventional = lambda state, slots, out: mamba2_decode_step_ref(
        state, case.x, case.dt, case.A, case.B, case.C, slot_ids=slots, D=case.D, dt_bias=case.dt_bias, out=out
    )
    return case


def assert_tied(A, dt, D, dt_bias):
    """vLLM's TIE_HDIM: per-head values broadcast with stride 0 over head_dim (and d_state)."""
    assert A.stride() == (1, 0, 0) and D.stride() == (1, 0) and dt_bias.stride() == (1, 0)
    assert dt.stride(-1) == 0 and A.dtype == D.dtype == dt_bias.dtype == torch.float32


# ---- loading ----------------------------------------------------------------------------------


def test_missing_peers_dir_is_one_note_not_an_error(isolated_imports, tmp_path):
    before = list(sys.path)
    peers = pm.load_peers(str(tmp_path / "absent"))
    assert (peers.vllm_ssu, peers.official, peers.flashinfer) == (None, None, None)
    assert len(peers.notes) == 1 and "skipped" in peers.notes[0] and sys.path == before


def test_peers_that_fail_to_import_are_skipped_with_a_note_each(isolated_imports, tmp_path, capsys):
    for name in ("vllm", "flashinfer"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('not this {name}')\n")
    peers = pm.load_peers(str(tmp_path), extra_paths=())
    assert (peers.vllm_ssu, peers.official, peers.flashinfer) == (None, None, None)
    assert len(peers.notes) == 3 and all(n.startswith("# peers: ") and "skipped" in n for n in peers.notes)
    assert "not this vllm" in peers.notes[0] and "not this flashinfer" in peers.notes[2]
    assert sys.path[0] == str(tmp_path)
    # No peer: the per-case rows are none, silently (the notes were given once).
    assert pm.peer_rows(fake_case(), peers) == [] and capsys.readouterr().out == ""


@needs_peers
def test_the_vllm_peers_import_from_shared_peers(isolated_imports):
    peers = pm.load_peers(PEERS_DIR, extra_paths=())
    assert callable(peers.vllm_ssu) and callable(peers.official)
    assert peers.vllm_ssu.__module__.endswith("mamba_ssm")


# ---- cursor tables ----------------------------------------------------------------------------


def test_official_positions_advance_every_row_one_step_per_round():
    L, sets = 8, [torch.tensor([3, 0, 5], dtype=torch.int32), torch.tensor([1, 4, 2], dtype=torch.int32)]
    cursor = torch.tensor([7, 0, 3, 6, 1, 2], dtype=torch.int32)
    wp, fl = pm.official_positions(cursor, sets, L)
    assert wp.shape == fl.shape == (L, 2, 3) and wp.dtype == torch.int32 and fl.dtype == torch.int8
    assert wp.is_contiguous() and wp[3, 1].is_contiguous()
    assert torch.equal(wp[0, 0], cursor[[3, 0, 5]]) and torch.equal(wp[2, 1], (cursor[[1, 4, 2]] + 2) % L)
    assert torch.equal(fl.bool(), wp == L - 1)
    # Over the L rounds each row sits at every position once: one flush per row.
    assert torch.equal(wp.sort(0).values, torch.arange(L, dtype=torch.int32)[:, None, None].expand(L, 2, 3))
    assert torch.equal(fl.sum(0), torch.ones(2, 3, dtype=torch.int64))


def test_flashinfer_cursors_follow_vllms_tracker_rule():
    W = 4
    # From an empty ring: pnat 0, 1, .. W (the checkpoint), then 1 with the ring start moved by W.
    rs, pn, seq = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), []
    for _ in range(W + 3):
        seq.append((int(rs), int(pn)))
        rs, pn = pm.flashinfer_advance(rs, pn, W)
        assert rs.dtype == pn.dtype == torch.int32
    assert seq == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (4, 1), (4, 2)]
    # Steady state tables: pnat in [1, W], one checkpoint (pnat == W) per slot in W rounds.
    pnat0 = torch.tensor([1, 2, 3, 4, 4, 1], dtype=torch.int32)
    start0 = torch.tensor([0, 1, 2, 3, 4, 4], dtype=torch.int32)
    rs, pn = pm.flashinfer_cursors(pnat0, start0, W)
    assert rs.shape == pn.shape == (W, 6) and rs.is_contiguous() and pn.dtype == torch.int32
    assert torch.equal(pn.sort(0).values, torch.arange(1, W + 1, dtype=torch.int32)[:, None].expand(W, 6))
    assert int(pn.min()) >= 1 and int(rs.min()) >= 0 and int(rs.max()) <= W
    moved = rs[1:] != rs[:-1]
    assert torch.equal(moved, pn[:-1] == W)  # the ring start moves right after a checkpoint
    assert torch.equal(rs[1:][moved], ((rs[:-1] + W) % (W + 1))[moved])


# ---- the rows' arguments and what they compute --------------------------------------------------


def vllm_stand_in(
    state, x, dt, A, B, C, D, dt_bias, z=None, dt_softplus=False, state_batch_indices=None, null_block_id=0, out=None
):
    """vLLM's selective_state_update with tied A/dt/D/dt_bias, through this project's reference."""
    assert_tied(A, dt, D, dt_bias)
    assert z is None and null_block_id == -1 and state_batch_indices.dtype == torch.int32
    mamba2_decode_step_ref(
        state,
        x,
        dt[..., 0],
        A[:, 0, 0],
        B,
        C,
        slot_ids=state_batch_indices,
        D=D[:, 0],
        dt_bias=dt_bias[:, 0],
        dt_softplus=dt_softplus,
        out=out,
    )


def official_stand_in(
    state,
    x,
    dt,
    A,
    B,
    C,
    D=None,
    dt_bias=None,
    z=None,
    dt_softplus=False,
    x_cache=None,
    dt_cache=None,
    B_cache=None,
    bc_pre=None,
    write_pos=None,
    is_flush=None,
    max_cache_len=16,
    state_batch_indices=None,
    null_block_id=0,
    out=None,
):
    """The official output_only step: the records are this project's layout, write_pos per row is
    the cursor of the row's slot and is_flush marks write_pos == L - 1 (this project's replay
    reference computes exactly that)."""
    L, batch = max_cache_len, x.shape[0]
    assert_tied(A, dt, D, dt_bias)
    assert z is None and null_block_id == -1 and x_cache.shape[2] == L and dt_cache.dtype == torch.float32
    assert bc_pre.shape == (batch, B.shape[1], L) and bc_pre.dtype == torch.float32
    assert write_pos.dtype == torch.int32 and is_flush.dtype == torch.int8 and write_pos.is_contiguous()
    assert torch.equal(is_flush.bool(), write_pos == L - 1)
    cursor = torch.zeros(state.shape[0], dtype=torch.int32)
    cursor[state_batch_indices.long()] = write_pos
    mamba2_replay_step_ref(
        state,
        x_cache,
        dt_cache,
        B_cache,
        cursor,
        x,
        dt[..., 0],
        A[:, 0, 0],
        B,
        C,
        slot_ids=state_batch_indices,
        D=D[:, 0],
        dt_bias=dt_bias[:, 0],
        dt_softplus=dt_softplus,
        out=out,
    )


def fi_stand_in(
    state,
    x_cache,
    B_cache,
    dt_cache,
    ring_start,
    prev_num_accepted_tokens,
    x,
    dt,
    A,
    B,
    C,
    out,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus=False,
    state_batch_indices=None,
    pad_slot_id=-1,
    algorithm="auto",
    cb_scaled=None,
    cumAdt_vec=None,
    cb_old=None,
):
    """FlashInfer's checkpointing_ssu for one predicted token, as its docstring describes it:
    replay pnat ring records from ring_start, checkpoint them when pnat + 1 > W, write the new
    token at ring_start + pnat; plus the layout checks of its C++ entry point."""
    b, T, H, P = x.shape
    S, G, R, N = B_cache.shape
    W = R - T
    assert T == 1 and x.stride(2) == P and x.stride(3) == 1 and out.shape == x.shape and out.stride(2) == P
    assert dt.shape == x.shape and dt.stride(2) == 1 and dt.stride(3) == 0 and dt.dtype == x.dtype
    assert A.stride() == (1, 0, 0) and D.stride() == (1, 0) and dt_bias.stride() == (1, 0)
    assert B.shape == C.shape == (b, 1, G, N) and B.stride(2) == N and C.stride(2) == N
    assert x_cache.shape == (S, H, R, P) and x_cache.stride(2) == P and dt_cache.shape == (S, H, R)
    assert x_cache.dtype == B_cache.dtype == x.dtype and dt_cache.dtype == torch.float32
    assert ring_start.shape == prev_num_accepted_tokens.shape == (S,) and ring_start.is_contiguous()
    assert ring_start.dtype == prev_num_accepted_tokens.dtype == torch.int32
    assert state_batch_indices.dtype == torch.int32 and state_batch_indices.shape == (b,)
    assert state_batch_indices.is_contiguous() and pad_slot_id == -1 and z is None
    assert algorithm in ("monolith", "two-kernel") and (cb_scaled is not None) == (algorithm == "two-kernel")
    hpg = H // G
    a = A[:, 0, 0]
    dtp = F.softplus(dt[:, 0, :, 0].float() + dt_bias[:, 0])
    for row, s in enumerate(state_batch_indices.tolist()):
        p, o = int(prev_num_accepted_tokens[s]), int(ring_start[s])
        st = state[s].float()
        for i in range(p):
            q = (o + i) % R
            d = dt_cache[s, :, q]
            st = (
                torch.exp(a * d)[:, None, None] * st
                + d[:, None, None]
                * x_cache[s, :, q].float()[:, :, None]
                * B_cache[s, :, q].float().repeat_interleave(hpg, 0)[:, None, :]
            )
        if p + 1 > W:
            state[s] = st.to(state.dtype)
        d = dtp[row]
        st = (
            torch.exp(a * d)[:, None, None] * st
            + d[:, None, None] * x[row, 0].float()[:, :, None] * B[row, 0].float().repeat_interleave(hpg, 0)[:, None, :]
        )
        y = (st * C[row, 0].float().repeat_interleave(hpg, 0)[:, None, :]).sum(-1) + D * x[row, 0].float()
        out[row, 0] = y.to(out.dtype)
        q = (o + p) % R
        x_cache[s, :, q], B_cache[s, :, q], dt_cache[s, :, q] = x[row, 0], B[row, 0], d


def fi_namespace(call=fi_stand_in, prebuilt=True, seen=None):
    def allocate(batch, heads, T, W, dtype, device):
        assert T == 1 and W <= 16
        return (
            torch.empty(batch, heads, 32, 8, dtype=dtype),
            torch.empty(batch, heads, 16),
            torch.empty(batch, heads, 32, (W + 7) // 8 * 4, dtype=dtype),
        )

    def prebuilt_(*uri_args):
        if seen is not None:
            seen.append(uri_args)
        return prebuilt

    return SimpleNamespace(checkpointing_ssu=call, prebuilt=prebuilt_, allocate_checkpointing_ssu_scratch=allocate)


@pytest.mark.parametrize("state", [torch.float32, torch.bfloat16])
def test_vllm_conv_row_runs_vllms_step_on_the_conventional_pool(state):
    case = fake_case(state=state)
    (row,) = pm.vllm_conv_rows(case, vllm_stand_in)
    refs = pm.reference_outputs(case, 2 * case.L + 2)
    assert row.name == "vllm_conv" and row.route.env == {} and row.check(refs) < 1e-6
    assert len(row.route.steps) == len(case.slot_sets)
    seen = []
    (row,) = pm.vllm_conv_rows(case, lambda *a, **k: seen.append((a, k)))
    for f in row.route.steps:
        f()
    assert [a[0] is case.conv_state for a, _ in seen] == [True, True]
    assert all(k["state_batch_indices"] is s for (_, k), s in zip(seen, case.slot_sets))
    assert all(k["out"] is case.out and k["dt_softplus"] for _, k in seen)
    # A wrong call shows in the check: softplus left out.
    (row,) = pm.vllm_conv_rows(case, lambda *a, **k: vllm_stand_in(*a, **{**k, "dt_softplus": False}))
    assert row.check(refs) > 1e-2


def test_official_row_holds_L_rounds_of_advancing_cursors():
    case = fake_case(L=4)
    (row,) = pm.official_rows(case, official_stand_in)
    refs = pm.reference_outputs(case, 2 * case.L + 2)
    assert row.name == "official" and row.check(refs) < 1e-5
    seen = []
    (row,) = pm.official_rows(case, lambda *a, **k: seen.append((a, k)))
    assert len(row.route.steps) == case.L * len(case.slot_sets)
    for f in row.route.steps:
        f()
    cursor = case.cache.cursor.long()
    for i, (_, k) in enumerate(seen):
        r, s = divmod(i, len(case.slot_sets))
        slots = case.slot_sets[s]
        assert k["state_batch_indices"] is slots and k["max_cache_len"] == case.L and k["out"] is case.out
        assert torch.equal(k["write_pos"].long(), (cursor[slots.long()] + r) % case.L)
    # Its own pool and records: the case's are untouched.
    assert seen[0][1]["x_cache"] is not case.cache.x_records and seen[0][0][0] is not case.cache.checkpoint
    # The timed steps also compute the official step (cursors spread, flushes included).
    (row,) = pm.official_rows(case, official_stand_in)
    for f in row.route.steps:
        f()


@pytest.mark.parametrize("state", [torch.float32, torch.bfloat16])
def test_flashinfer_rows_replay_the_ring_with_vllms_bookkeeping(state, monkeypatch):
    monkeypatch.delenv("FLASHINFER_SSU_MAIN_CTA_PER_SM", raising=False)
    case = fake_case(L=4, state=state)
    env_seen = []

    def call(*a, **k):
        env_seen.append((k["algorithm"], os.environ.get("FLASHINFER_SSU_MAIN_CTA_PER_SM")))
        fi_stand_in(*a, **k)

    uris = []
    rows = pm.flashinfer_rows(case, fi_namespace(call, seen=uris))
    assert [r.name for r in rows] == ["fi_monolith", "fi_two_kernel", "fi_2k_s2c4"]
    H, P, N, G = 4, 16, 16, 2
    assert uris == [
        (state, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, torch.int32, None, P, N, 1, case.L, H // G, G)
    ]
    refs = pm.reference_outputs(case, 2 * case.L + 2)
    tol = 1e-5 if state == torch.float32 else 5e-2
    for r in rows:
        env_seen.clear()
        with pm.environment(r.route.env):
            assert r.check(refs) < tol
        cta = "4" if r.name == "fi_2k_s2c4" else None
        assert env_seen and all(e == (env_seen[0][0], cta) for e in env_seen)
    assert os.environ.get("FLASHINFER_SSU_MAIN_CTA_PER_SM") is None  # restored
    # The timed sequence: W rounds over the slot sets; each slot checkpoints once.
    seen = []
    rows = pm.flashinfer_rows(case, fi_namespace(lambda *a, **k: seen.append((a, k))))
    assert len(rows[0].route.steps) == case.L * len(case.slot_sets)
    for f in rows[0].route.steps:
        f()
    pnat_seen = torch.stack([a[5][k["state_batch_indices"].long()] for a, k in seen])  # [steps, batch]
    pnat_seen = pnat_seen.view(case.L, len(case.slot_sets), case.batch)
    checkpoints = (pnat_seen == case.L).sum(0)
    assert torch.equal(checkpoints, torch.ones(len(case.slot_sets), case.batch, dtype=torch.int64))
    assert int(pnat_seen.min()) == 1 and all(a[0] is not case.cache.checkpoint for a, _ in seen)
    rows = pm.flashinfer_rows(case, fi_namespace())  # the timed steps compute checkpointing steps
    for f in rows[0].route.steps + rows[1].route.steps:
        f()


def test_flashinfer_covers_only_prebuilt_windows_up_to_16(capsys):
    with pytest.raises(pm.Skip, match="> 16"):
        pm.flashinfer_rows(fake_case(L=32), fi_namespace())
    with pytest.raises(pm.Skip, match="no prebuilt module"):
        pm.flashinfer_rows(fake_case(L=4), fi_namespace(prebuilt=False))
    peers = pm.Peers(vllm_ssu=vllm_stand_in, flashinfer=fi_namespace(prebuilt=False))
    rows = pm.peer_rows(fake_case(), peers, "state=f32 L=4 batch=3")
    assert [r.name for r in rows] == ["vllm_conv"]
    assert capsys.readouterr().out.startswith("# fi (state=f32 L=4 batch=3): no prebuilt module")


def test_the_checks_catch_a_misplaced_record(monkeypatch):
    """Teeth: a ring start moved one row too far, or official cursors one position ahead, fail
    the check (every check step has its own inputs, so records differ)."""
    case = fake_case(L=4)
    refs = pm.reference_outputs(case, 2 * case.L + 2)
    good = pm.flashinfer_advance
    monkeypatch.setattr(
        pm, "flashinfer_advance", lambda rs, pn, W: (torch.where(pn + 1 > W, (rs + pn + 1) % (W + 1), rs), good(rs, pn, W)[1])
    )
    assert all(r.check(refs) > pm.REFCHECK_TOL for r in pm.flashinfer_rows(case, fi_namespace()))
    monkeypatch.undo()

    def ahead(*a, write_pos, is_flush, max_cache_len, **k):
        wp = (write_pos + 1) % max_cache_len
        official_stand_in(
            *a, write_pos=wp, is_flush=(wp == max_cache_len - 1).to(torch.int8), max_cache_len=max_cache_len, **k
        )

    (row,) = pm.official_rows(case, ahead)
    assert row.check(refs) > pm.REFCHECK_TOL


# ---- the real peers' signatures and checks --------------------------------------------------


class Launch:
    """Stands for a Triton kernel: ``kernel[grid](*args, **kw)`` records instead of launching."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *a, **k: self.calls.append((grid, a, k))


@needs_peers
@pytest.mark.parametrize("state", [torch.float32, torch.bfloat16])
def test_the_vllm_wrappers_accept_our_arguments(isolated_imports, monkeypatch, state):
    """The real Python wrappers run their shape, stride and dtype checks on our arguments; only
    the Triton launches are replaced."""
    peers = pm.load_peers(PEERS_DIR, extra_paths=())
    conv_mod, oo_mod = sys.modules[peers.vllm_ssu.__module__], sys.modules[peers.official.__module__]
    conv, pre, main = Launch(), Launch(), Launch()
    monkeypatch.setattr(conv_mod, "_selective_scan_update_kernel", conv)
    monkeypatch.setattr(oo_mod, "_replayssm_output_only_precompute_kernel", pre)
    monkeypatch.setattr(oo_mod, "_replayssm_output_only_kernel", main)
    case = fake_case(L=8, state=state)
    (vrow,) = pm.vllm_conv_rows(case, peers.vllm_ssu)
    (orow,) = pm.official_rows(case, peers.official)
    vrow.route.steps[0]()
    orow.route.steps[-1]()
    ((_, a, _),) = conv.calls
    assert a[0] is case.conv_state and a[10] is case.out and a[11].data_ptr() == case.slot_sets[0].data_ptr()
    assert a[13] == -1  # null_block_id: slot 0 is a real slot here
    ((_, a, _),) = main.calls
    assert len(pre.calls) == 1 and a[13].dtype == torch.float32 and a[17] == -1
    assert a[14].dtype == torch.int32 and a[15].dtype == torch.int8  # write_pos, is_flush
    last = case.cache.cursor.long()[case.slot_sets[-1].long()]  # the last step: round L-1, last set
    assert torch.equal(a[14].long(), (last + case.L - 1) % case.L)


@needs_peers
def test_flashinfer_signature_binds_our_call():
    """Our call binds to checkpointing_ssu's signature in the shipped FlashInfer (read from the
    archive; it does not import without CUDA and tvm-ffi)."""
    (archive,) = glob.glob(os.path.join(PEERS_DIR, "flashinfer", "flashinfer-*.tar.xz"))
    with tarfile.open(archive) as t:
        src = next(t.extractfile(m).read() for m in t if m.name.endswith("flashinfer/mamba/checkpointing_ssu.py"))
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "checkpointing_ssu")
    fn.decorator_list, fn.returns, fn.body = [], None, [ast.Pass()]
    for arg in fn.args.args + fn.args.kwonlyargs:
        arg.annotation = None
    fn.args.defaults = [ast.Constant(None) for _ in fn.args.defaults]
    ns = {}
    exec(compile(ast.fix_missing_locations(ast.Module([fn], [])), "checkpointing_ssu", "exec"), ns)
    import inspect

    sig = inspect.signature(ns["checkpointing_ssu"])
    seen = []
    for row in pm.flashinfer_rows(fake_case(L=8), fi_namespace(lambda *a, **k: seen.append((a, k)))):
        row.route.steps[0]()
    for a, k in seen:
        bound = sig.bind(*a, **k).arguments
        assert bound["state"] is a[0] and bound["x_cache"].shape[2] == 9 and bound["out"].shape[1] == 1
        assert bound["prev_num_accepted_tokens"].dtype == torch.int32 and bound["dt_softplus"] is True


# ---- timing and the table's bookkeeping ------------------------------------------------------------------


def test_time_interleaved_samples_every_graph_in_turn(monkeypatch):
    import triton.testing

    order = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **k: (order.append(fn), 2.0)[1])
    graphs = {"a": SimpleNamespace(replay="A"), "b": SimpleNamespace(replay="B")}
    times = pm.time_interleaved(graphs, {"a": 4, "b": 1}, reps=3)
    assert order == ["A", "B"] * 3
    assert times == {"a": (pytest.approx(0.5e-3), [0.5] * 3), "b": (pytest.approx(2e-3), [2.0] * 3)}


def test_run_table_ratios_notes_and_rows(monkeypatch, capsys):
    """run_table with stand-in timings: speedups against both conventional steps, peers without
    GB/s, a peer's failed eager steps skipped with a note (time_group with capture and timing
    replaced; the rest needs a GPU)."""
    case = fake_case(L=4)
    case.refcheck = lambda: 1e-6
    case.bytes_per_step = lambda route: 1e6
    case.step = lambda route, slots, config=None: None

    def broken(*a, **k):
        raise RuntimeError("no kernel for this")

    peers = pm.Peers(vllm_ssu=vllm_stand_in, official=broken)
    monkeypatch.setattr(pm, "capture", lambda route: route)
    us = dict(decode_step=10.0, replay_step=5.0, replay_triton=6.0, vllm_conv=11.0)
    monkeypatch.setattr(
        pm, "time_interleaved", lambda graphs, steps, reps=5: {n: (us[n] * 1e-6, [us[n] * 1e-3]) for n in graphs}
    )
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    args = argparse.Namespace(state=["f32"], L=[4], batch=[3], act="bf16")
    rows = pm.run_table(lambda batch, L, state: case, args, 2e12, peers)
    by = {r["route"]: r for r in rows}
    assert list(by) == ["decode_step", "replay_step", "replay_triton", "vllm_conv"]
    assert by["replay_step"]["speedup"] == pytest.approx(2.0)
    assert by["replay_step"]["speedup_vs_vllm"] == pytest.approx(2.2)
    assert by["vllm_conv"]["peer"] and by["vllm_conv"]["gbps"] is None and by["vllm_conv"]["refcheck"] < 1e-6
    assert by["decode_step"]["gbps"] == pytest.approx(100.0) and not by["decode_step"]["peer"]
    out = capsys.readouterr().out
    assert "# official (state=f32 act=bf16 L=4 batch=3): eager steps failed (RuntimeError: no kernel" in out
    assert "vllm_conv" in out.splitlines()[-1] and "      -" in out.splitlines()[-1]
