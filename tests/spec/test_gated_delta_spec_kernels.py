"""GDN / KDA speculative Triton kernels (verify, snapshot baseline) against the float64 serial
oracle: under TRITON_INTERPRET=1 on the CPU (small odd shapes, GQA), natively on a GPU (the Triton
verify forced: on sm_90 the op routes GDN to the CUDA verify)."""

import pytest
import torch

from triton_mode import INTERPRET
from op_checks import assert_fp8_flush_matches
from gated_delta_cases import ACT_TOL, STATE_TOL, DeltaFamily, DeltaGeometry
from mamba2_cases import DTYPES
from replay_driver import rel_err
from spec_cases import (
    commit_with_launcher,
    delta_args,
    delta_snapshot_verify_with_launcher,
    delta_verify_with_launcher as verify_with_launcher,
    drive_baseline,
    drive_spec,
    make_window,
    snapshot_commit_with_launcher,
)
from trtllm_replayssm.kernels.common import VERIFY_FLUSHED as KERNEL_FLAG, LaunchConfig
from trtllm_replayssm.kernels.gated_delta_verify import (
    gated_delta_verify_flush_launch_config,
    gated_delta_verify_history_product,
    gated_delta_verify_launch_config,
)
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len
from trtllm_replayssm.reference.spec import VERIFY_FLUSHED as F

pytestmark = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()), reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FAMILY_IDS = {False: "gdn", True: "kda"}
# Long runs: GQA (two value heads per key head). Launch configurations: two key heads, so that
# the records launch writes the k̂ records of several key heads. The interpreter pays
# per program: one pair of dtypes per family there, every pair on a GPU.
G_RUN = DeltaGeometry(1, 2, 12, 20) if INTERPRET else DeltaGeometry(2, 6, 80, 96)
G_CFG = DeltaGeometry(2, 2, 12, 20) if INTERPRET else G_RUN
CONFIG = LaunchConfig(32, 1) if INTERPRET else None


def delta_verify_with_launcher(*args, **kw):
    """The Triton verify kernels, whatever the op's route (on an sm_90 GPU GDN takes the CUDA
    verify, tested in tests/gpu/test_delta_verify_cuda_gpu.py)."""
    return verify_with_launcher(*args, kernel="triton", **kw)


CASES = (
    [(False, ("f32", "f32")), (True, ("f32", "bf16")), (False, ("fp8", "f32")), (True, ("fp8", "f32"))]
    if INTERPRET
    else [(pc, (s, a)) for pc in (False, True) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")]
    + [(pc, ("fp8", "bf16")) for pc in (False, True)]
)
ROWS = ["all", "bonus", "short", "mixed"]


def test_kernels_flag_a_flushed_cursor_as_the_reference_does():
    """The kernels' flush flag is the reference's: a commit resolves either's cursor alike."""
    assert KERNEL_FLAG.value == F and F > 1 << 16  # far above any record count


def _long_run(per_channel: bool, s: str, a: str, history_product=None):
    """Verify + commit steps against the float64 serial oracle (rows of every acceptance
    policy, flushes included); ``history_product`` as the launcher takes it."""

    def verify(cache, win, p, slot_ids, num_tokens, out):
        return delta_verify_with_launcher(
            cache, win, p, slot_ids, num_tokens, out, config=CONFIG, flush_config=CONFIG, history_product=history_product
        )

    B, T = (4, 3) if INTERPRET else (16, 4)
    worst = drive_spec(
        DeltaFamily(G_RUN, per_channel=per_channel),
        verify,
        commit_with_launcher,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=DTYPES[s],
        act_dtype=DTYPES[a],
        device=DEVICE,
        steps=6 if INTERPRET else 40,
        policies=ROWS,
        num_slots=7,
    )
    assert sum(worst["flushes"].values()) >= 3, worst
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s] + ACT_TOL[a], worst


@pytest.mark.parametrize(
    "per_channel, dtypes", CASES, ids=lambda c: FAMILY_IDS[c] if isinstance(c, bool) else f"s{c[0]}-a{c[1]}"
)
def test_gated_delta_replay_verify_kernel_matches_serial(per_channel, dtypes):
    _long_run(per_channel, *dtypes)


def test_gdn_replay_verify_kernel_history_loop_matches_serial():
    """GDN's non-flush history weights a record at a time (the form past one wave of programs;
    small launches here take the tile products): the long run against the float64 oracle."""
    _long_run(False, "f32", "f32", history_product=False)


@pytest.mark.parametrize("L", [7, 20, 40])
def test_gdn_replay_verify_history_product_equals_loop(L):
    """The history weights as tile products of 16-record chunks and a record at a time: the
    same outputs and caches (fp32 reordering; 3xTF32 on a GPU), for buffers of one, two and
    three chunks and cursors from empty to a full history, padding rows untouched."""
    fam = DeltaFamily(G_CFG, per_channel=False)
    p = fam.make_params(DEVICE)
    T = 3
    cursors = [0, L - 1 - T, 1, min(17, L - 1 - T), 0, L // 2]
    caches = [_random_cache(fam, L, cursors, seed=2) for _ in range(2)]
    slots = torch.tensor([1, -1, 3, 5, 2], dtype=torch.int32, device=DEVICE)
    n = torch.tensor([3, 3, 2, 1, 3], dtype=torch.int32, device=DEVICE)
    win = make_window(fam, 5, T, torch.float32, DEVICE)
    ys = [
        delta_verify_with_launcher(c, win, p, slots, n, torch.full_like(win["v"], 42.0), history_product=hp)
        for c, hp in zip(caches, (True, False))
    ]
    assert torch.all(ys[0][1] == 42.0) and torch.all(ys[0][3, 1:] == 42.0)
    assert rel_err(ys[0], ys[1]) < 1e-5
    for name in ("g_records", "cursor", "pending"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name
    for name in ("checkpoint", "d_records", "k_records"):
        assert rel_err(getattr(caches[0], name), getattr(caches[1], name)) < 1e-5, name


def test_gated_delta_verify_history_product_rule():
    """Tile products for GDN at T <= 4 where the non-flush launch fits two waves of 8 programs
    a multiprocessor (Qwen3.5-122B, 64 value heads, on 132: batch <= 33); never for KDA, whose
    launcher refuses to be asked."""
    rule = gated_delta_verify_history_product
    in_two_waves = [rule(b * 64, 4, multiprocessors=132, per_channel=False) for b in (1, 8, 16, 32, 33, 34, 64, 256)]
    assert in_two_waves == [True, True, True, True, True, False, False, False]
    assert rule(16 * 64, 2, multiprocessors=132, per_channel=False)
    assert not rule(16 * 64, 8, multiprocessors=132, per_channel=False)
    assert not rule(16 * 32, 4, multiprocessors=132, per_channel=True)
    fam = DeltaFamily(G_CFG, per_channel=True)
    cache = _random_cache(fam, 7, [0, 1], seed=3)
    before = {k: v.clone() for k, v in vars(cache).items() if isinstance(v, torch.Tensor)}
    assert {"checkpoint", "d_records", "cursor"} <= set(before)
    win = make_window(fam, 2, 3, torch.float32, DEVICE)
    slots = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="history_product is True for KDA"):
        delta_verify_with_launcher(
            cache, win, fam.make_params(DEVICE), slots, None, torch.zeros_like(win["v"]), history_product=True
        )
    for k, v in before.items():
        assert torch.equal(getattr(cache, k), v), k


def _random_cache(fam, L: int, cursors: list, seed: int):
    """An fp32 replay cache of len(cursors) slots, buffer L: random checkpoint and records
    (gates in [-0.3, -0.01]) from ``seed``, the given cursors."""
    torch.manual_seed(seed)
    c = fam.allocate(len(cursors), L, torch.float32, torch.float32, DEVICE)
    c.checkpoint.normal_()
    c.d_records.normal_()
    c.k_records.normal_()
    c.g_records.uniform_(-0.3, -0.01)
    c.cursor.copy_(torch.tensor(cursors, dtype=torch.int32))
    return c


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_verify_kernel_launch_config_invisible(per_channel):
    """Several programs per head (the flush row's cursor reset by its last program)
    and one program looping over the head: same outputs and caches (fp32 reordering)."""
    fam = DeltaFamily(G_CFG, per_channel=per_channel)
    p = fam.make_params(DEVICE)
    T, L = 3, 7
    cfgs = [LaunchConfig(16, 1), LaunchConfig(16, 2, chunks=2, num_stages=2)]
    caches = [_random_cache(fam, L, [0, 5, 2, 4, 0, 6], seed=1) for _ in cfgs]
    slots = torch.tensor([1, -1, 3, 5], dtype=torch.int32, device=DEVICE)
    n = torch.tensor([3, 3, 2, 1], dtype=torch.int32, device=DEVICE)
    win = make_window(fam, 4, T, torch.float32, DEVICE)
    ys = [
        delta_verify_with_launcher(c, win, p, slots, n, torch.full_like(win["v"], 42.0), config=cfg, flush_config=cfg)
        for c, cfg in zip(caches, cfgs)
    ]
    for y in ys[1:]:
        assert torch.all(y[1] == 42.0) and torch.all(y[3, 1:] == 42.0)
        assert rel_err(y, ys[0]) < 1e-6
    assert caches[0].cursor.tolist() == [0, 5 + F, 2, 4, 0, 6 + F]  # slots 1 and 5 flush (flagged)
    for c in caches[1:]:
        for name in ("g_records", "cursor", "arrivals", "pending"):
            assert torch.equal(getattr(c, name), getattr(caches[0], name)), name
        for name in ("checkpoint", "d_records", "k_records"):
            assert rel_err(getattr(c, name), getattr(caches[0], name)) < 1e-6, name


def test_gated_delta_verify_flush_launch_splits_tiles_while_the_gpu_is_not_full():
    """Kimi Linear (32 value heads, head_v_dim 128) on 132 multiprocessors: at batch 16 a flush
    program takes one 16-row tile where a non-flush one takes four; from batch 256 both walk all
    eight tiles of their head. Qwen3.5-122B GDN (64 value heads): at batch 16 one tile a flush
    program would exceed a wave (256 flush heads x 8 tiles > 1,056), so it walks two; at batch 8
    and for KDA it does not.
    Every flush program is one warp."""

    def chunks(rule, batch, v_heads=32, **kw):
        return rule(128, 128, batch * v_heads, torch.float32, multiprocessors=132, **kw).chunks

    kda = dict(per_channel=True)
    gdn = dict(v_heads=64, per_channel=False)
    flush = gated_delta_verify_flush_launch_config
    assert (chunks(gated_delta_verify_launch_config, 16), chunks(flush, 16, **kda)) == (4, 1)
    assert chunks(flush, 64, **kda) == 2
    assert chunks(gated_delta_verify_launch_config, 256) == chunks(flush, 256, **kda) == 8
    assert [chunks(flush, b, **gdn) for b in (8, 16, 32, 64, 256, 512)] == [1, 2, 2, 4, 8, 8]
    assert flush(128, 128, 16 * 64, torch.float32, multiprocessors=132, per_channel=False).num_warps == 1
    assert chunks(flush, 16, v_heads=64, per_channel=True) == 1


@pytest.mark.parametrize(
    "heads, multiprocessors, spans",
    [(32, 132, 8), (128, 132, 8), (256, 132, 4), (512, 132, 2), (1024, 132, 1), (4096, 132, 1), (512, 78, 1), (512, 264, 4)],
)
def test_gated_delta_verify_launch_splits_heads_within_one_wave(heads, multiprocessors, spans):
    """The non-flush launch splits a head's eight tiles over the largest power of two of programs
    that keeps the launch within one wave of 8 programs a multiprocessor (Kimi Linear at batch
    16 on an H200: 512 heads, 1056 programs a wave, 2 spans; the standard replay rule rounds up
    to 4), one program a head past one wave, one tile a program at most."""
    cfg = gated_delta_verify_launch_config(128, 128, heads, torch.float32, multiprocessors=multiprocessors)
    assert (cfg.chunks, cfg.block_head_dim, cfg.num_warps) == (8 // spans, 16, 1)
    assert cfg.num_stages == (2 if spans < 8 else 1)


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_verify_kernel_flush_launch_tiles_on_its_own(per_channel):
    """The flush launch's tiling is its own: one tile a program for the flush rows while the
    non-flush rows walk their head in a loop, against both launches looping; same outputs and
    caches (fp32 reordering)."""
    fam = DeltaFamily(G_CFG, per_channel=per_channel)
    p = fam.make_params(DEVICE)
    looped = LaunchConfig(16, 1, chunks=2, num_stages=2)
    runs = []
    for flush_config in (looped, LaunchConfig(16, 1)):
        c = _random_cache(fam, 7, [5, 2, 6, 1], seed=3)
        slots = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device=DEVICE)
        win = make_window(fam, 4, 3, torch.float32, DEVICE)
        y = delta_verify_with_launcher(
            c, win, p, slots, None, torch.empty_like(win["v"]), config=looped, flush_config=flush_config
        )
        runs.append((y, c))
    (y0, c0), (y1, c1) = runs
    for c in (c0, c1):  # slots 0 and 2 flush; each launch's last program of a row counts its own grid
        assert c.cursor.tolist() == [5 + F, 2, 6 + F, 1] and not c.arrivals.any()
    assert rel_err(y1, y0) < 1e-6
    for name in ("checkpoint", "d_records", "k_records", "g_records"):
        assert rel_err(getattr(c1, name), getattr(c0, name)) < 1e-6, name


@pytest.mark.parametrize("record", ["f32", "bf16"])
@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_verify_kernel_folds_long_history(per_channel, record):
    """Flush rows with up to 38 committed records: the fold's products run over several chunks
    of 16 records (decays carried from chunk to chunk), fp32 and 16-bit records (split or not
    into TF32 parts). One step against the float64 reference on the same cache: outputs,
    checkpoint, records, cursors; padding and non-flush rows alongside."""
    from trtllm_replayssm.reference.spec import gated_delta_replay_verify_ref

    fam = DeltaFamily(G_CFG, per_channel=per_channel, record_dtype=DTYPES[record])
    p = fam.make_params(DEVICE)
    T, L = 3, 40
    torch.manual_seed(3)
    c = fam.allocate(6, L, torch.float32, torch.float32, DEVICE)
    c.checkpoint.normal_()
    c.d_records.normal_()
    c.k_records.normal_()
    c.k_records /= c.k_records.norm(dim=-1, keepdim=True)  # stored k̂ are unit vectors
    c.g_records.uniform_(-0.2, -0.01)
    c.cursor.copy_(torch.tensor([38, 5, 37, 17, 33, 16], dtype=torch.int32))
    ref = {name: getattr(c, name).to(torch.float64) for name in ("checkpoint", "d_records", "k_records", "g_records")}
    ref_cursor, ref_pending = c.cursor.clone(), c.pending.clone()
    slots = torch.tensor([0, -1, 2, 3, 4, 5], dtype=torch.int32, device=DEVICE)
    n = torch.tensor([2, 3, 3, 3, 3, 3], dtype=torch.int32, device=DEVICE)
    win = make_window(fam, 6, T, torch.float32, DEVICE)
    y = delta_verify_with_launcher(c, win, p, slots, n, torch.full_like(win["v"], 42.0))
    win64 = {k: None if v is None else v.to(torch.float64) for k, v in win.items()}
    y_ref = gated_delta_replay_verify_ref(
        ref["checkpoint"],
        ref["d_records"],
        ref["k_records"],
        ref["g_records"],
        ref_cursor,
        ref_pending,
        *delta_args(win64),
        slot_ids=slots,
        num_tokens=n,
        out=torch.full_like(win64["v"], 42.0),
        **p,
    )
    assert c.cursor.tolist() == ref_cursor.tolist() == [38 + F, 5, 37 + F, 17, 33, 16]  # slots 0 and 2 flush
    live = [0, 2, 3, 4, 5]
    assert torch.all(y[1] == 42.0) and torch.all(y[0, 2:] == 42.0)
    assert rel_err(y[live], y_ref[live]) < 1e-5
    assert rel_err(c.checkpoint, ref["checkpoint"]) < 1e-5
    assert rel_err(c.d_records, ref["d_records"]) < ACT_TOL[record]


def test_gated_delta_replay_verify_kernel_rejects_tiles_under_16_rows():
    """The tiles are tensor-core operands: 8-row tiles are refused before anything is launched."""
    fam = DeltaFamily(G_CFG, per_channel=False)
    c = fam.allocate(2, 7, torch.float32, torch.float32, DEVICE)
    before = c.checkpoint.clone(), c.cursor.clone()
    win = make_window(fam, 1, 2, torch.float32, DEVICE)
    slots = torch.tensor([0], dtype=torch.int32, device=DEVICE)
    for which in ("config", "flush_config"):
        with pytest.raises(ValueError, match="block_head_dim is 8; expected >= 16"):
            delta_verify_with_launcher(
                c, win, fam.make_params(DEVICE), slots, None, torch.empty_like(win["v"]), **{which: LaunchConfig(8, 1)}
            )
    assert torch.equal(c.checkpoint, before[0]) and torch.equal(c.cursor, before[1])


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_snapshot_kernels_match_serial(per_channel):
    T = 3
    holder = SnapshotCache.allocate(6, (G_RUN.v_heads, G_RUN.head_v_dim, G_RUN.head_k_dim), T, device=DEVICE)
    worst = drive_baseline(
        DeltaFamily(G_RUN, per_channel=per_channel),
        holder,
        delta_snapshot_verify_with_launcher,
        snapshot_commit_with_launcher,
        T=T,
        act_dtype=torch.bfloat16,
        device=DEVICE,
        steps=2 if INTERPRET else 20,
        policies=ROWS,
    )
    assert worst < ACT_TOL["bf16"] + 4 * STATE_TOL["f32"], worst


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_fp8_verify_flush_equals_the_reference_and_rounding_seed_replays(per_channel):
    """An fp8 checkpoint through the Triton verify kernels: a flushing row's codes and scales
    equal the reference's as values (a -0 code may meet a +0; on a GPU within a spacing:
    ``op_checks.assert_fp8_flush_matches``), non-flushing rows keep theirs; with a rounding seed,
    the same seed stores the same bits, another seed other bits."""
    from trtllm_replayssm.reference.spec import gated_delta_replay_verify_ref

    fam = DeltaFamily(G_RUN, per_channel=per_channel)
    p = fam.make_params(DEVICE)
    T = 2
    L = spec_buffer_len(3, T)
    cache = fam.allocate(4, L, torch.float8_e4m3fn, torch.float32, DEVICE)
    cache.admit(torch.arange(4, device=DEVICE), 3 * torch.randn(4, *cache.checkpoint.shape[1:], device=DEVICE))
    cache.d_records.normal_(), cache.k_records.normal_(), cache.g_records.uniform_(-0.4, -0.01)
    cache.cursor.copy_(torch.tensor([L - 2, 1, L - 1, 0], dtype=torch.int32))  # slots 0 and 2 flush
    win = make_window(fam, 3, T, torch.float32, DEVICE)
    slots = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    ref = cache.clone()
    q, k, v, g, beta = (win[n] for n in ("q", "k", "v", "g", "beta"))
    gated_delta_replay_verify_ref(
        ref.checkpoint, ref.d_records, ref.k_records, ref.g_records, ref.cursor, ref.pending, q, k, v, g, beta,
        slot_ids=slots, out=torch.zeros_like(v), checkpoint_scale=ref.checkpoint_scale, **p,
    )  # fmt: skip
    runs = {}
    for name, seed in (("nearest", None), ("a", 7), ("a again", 7), ("b", 8)):
        c = cache.clone()
        delta_verify_with_launcher(c, win, p, slots, None, torch.zeros_like(v), config=CONFIG, flush_config=CONFIG,
                                   rounding_seed=seed)  # fmt: skip
        runs[name] = c
    near = runs["nearest"]
    assert_fp8_flush_matches(near.checkpoint, near.checkpoint_scale, ref.checkpoint, ref.checkpoint_scale,
                             exact=INTERPRET, signed_zeros=False)  # fmt: skip
    assert torch.equal(near.checkpoint[[1, 3]].view(torch.uint8), cache.checkpoint[[1, 3]].view(torch.uint8))
    bits = {k: runs[k].checkpoint.view(torch.uint8) for k in ("a", "a again", "b")}
    assert torch.equal(bits["a"], bits["a again"]) and not torch.equal(bits["a"], bits["b"])
