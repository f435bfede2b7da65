"""The CUDA C++ gated delta-rule (GDN, KDA) replay step (kernels/cuda/gated_delta_replay_step.cu) on
an sm_90 GPU: long runs
against the float64 oracle (flushes, padding rows, poisoned unused slots and record positions),
CUDA graphs bit for bit, agreement with the Triton kernel, refusals."""

import dataclasses

from functools import partial

import pytest
import torch

from gated_delta_cases import (
    ACT_TOL,
    STATE_TOL,
    DeltaFamily,
    DeltaGeometry,
    fill_randomly,
    make_step,
    replay_with_launcher,
)
from op_checks import assert_fp8_flush_matches, bits
from replay_driver import drive_replay

pytestmark = pytest.mark.gpu


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the CUDA step is built for sm_90")

STATES = {"bf16": torch.bfloat16, "f32": torch.float32, "fp8": torch.float8_e4m3fn}
SHAPES = [
    pytest.param(DeltaGeometry(16, 64, 128, 128), 16, id="qwen3.5-122b-L16"),
    pytest.param(DeltaGeometry(16, 32, 128, 128), 8, id="qwen3.5-4b-L8"),
    pytest.param(DeltaGeometry(16, 32, 128, 128), 32, id="qwen3.5-4b-L32"),
    pytest.param(DeltaGeometry(2, 6, 64, 96), 5, id="dk64-dv96-L5"),  # 96-row units, 6 consumer warps
    pytest.param(DeltaGeometry(3, 3, 256, 48), 1, id="dk256-dv48-L1"),  # every step a flush
    pytest.param(DeltaGeometry(1, 32, 128, 16), 17, id="vpk32-dv16-L17"),  # 32 warps a coefficient CTA
]


def replay_cuda(cache, inp, p, slot_ids, out, config=None):
    return replay_with_launcher(cache, inp, p, slot_ids, out, config=config, kernel="cuda")


# The two launches as the table takes them at batch 256 (64-row units, or what tiles head_v_dim) and
# with 128-row units; GDN's one-launch form; one launch with four coefficient warps and three
# stages; both with the S0 products on tensor cores (bf16 checkpoints); the small kernel with 16
# and 32 rows a CTA. KDA: the forms of its one launch. Both: the flush's fold on tensor cores (GDN
# bf16 at batch 12-64 runs cw-fmma). ``-cr``: the record copies coalesced (128-row units: d too);
# ``-dc``: the cursor reads' count deferred (one launch); ``-ff``: each block's flushing units first
# (one launch); ``-rw``: GDN's coefficient warps (or consumers) splitting the records (one launch);
# ``-cs``: KDA's consumers summing the coefficient warps' partials (``atN-cs``: the table's build at
# batch N with it). ``at24`` / ``at48`` / ``at64``: the table's build at that batch (fp32: 64-row
# units at four stages with coefficient warps below GDN_F32_WIDE_UNITS_MIN_BATCH, 128-row units with
# flushing units first from it).
FORMS = ["table", "r128", "one", "cw", "table-mma", "one-mma", "cw-mma", "table-fmma", "one-fmma", "cw-fmma"]
FORMS += ["small16", "small32", "table-cr", "r128-cr", "one-cr", "cw-cr", "one-dc", "cw-cr-dc", "one-ff"]
FORMS += ["cw-cr-dc-ff", "one-rw", "cw-cr-dc-ff-rw", "at24", "at48", "at64"]
FORMS += ["one-du", "cw-cr-du-rw", "at64-du", "cw-cr-ds-rw", "at48-ds"]
FORMS += ["one-cl", "cw-cr-cl-rw", "at64-cl", "at256-cl"]
KDA_FORMS = ["table", "r128", "cw", "table-mma", "cw-mma", "table-fmma", "cw-fmma", "table-cr", "r128-cr", "cw-cr"]
KDA_FORMS += ["table-dc", "table-cr-dc", "cw-cr-dc", "table-ff", "table-cr-dc-ff", "cw-ff"]
KDA_FORMS += ["cw-cs", "cw-cr-dc-ff-cs", "at1-cs", "at64-cs", "at256-cs"]
KDA_FORMS += ["table-du", "cw-cr-du", "at64-du", "at256-du", "at256-ds"]
KDA_FORMS += ["table-cl", "cw-cr-cl", "at64-cl", "at256-cl"]


KDA_SHAPES = [
    pytest.param(DeltaGeometry(32, 32, 128, 128), 16, id="kimi-linear-L16"),
    pytest.param(DeltaGeometry(2, 4, 64, 96), 5, id="kda-vpk2-dk64-dv96-L5"),
    pytest.param(DeltaGeometry(3, 3, 256, 48), 1, id="kda-dk256-dv48-L1"),
    pytest.param(DeltaGeometry(4, 4, 128, 64), 32, id="kda-L32"),
    pytest.param(DeltaGeometry(32, 32, 128, 128), 32, id="kimi-linear-L32"),  # fp32: 128-row units, coefficient warps
]


def config(g, L, state, form, per_channel=False):
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import (
        DeltaCudaConfig,
        _resident_ctas,
        delta_ctas_that_fit,
        delta_cuda_config,
        s0_hfma2_fits,
        s0_qgmma_fits,
        unit_rows,
    )

    # fp8 S0 products: KDA's as fp8 wgmma products (-qg), KDA's and GDN's as f16x2 FMAs (-h2)
    for suffix, field, fits in (("-qg", "s0_qgmma", s0_qgmma_fits), ("-h2", "s0_hfma2", s0_hfma2_fits)):
        if form.endswith(suffix):
            # the table's own f16x2 products give way to the form asked for
            base = dataclasses.replace(config(g, L, state, form[: -len(suffix)], per_channel), s0_hfma2=False)
            cfg = dataclasses.replace(base, **{field: True})
            if not fits(cfg, STATES[state].itemsize, per_channel):
                pytest.skip(f"{field} does not fit this fp8 build")
            return cfg
    if form[-3:] in ("-du", "-ds", "-cl"):  # dealt units (-ds: their flush units spread), claimed units
        base = config(g, L, state, form[:-3], per_channel)
        if base.small or not (base.one_launch or per_channel):
            pytest.skip("dealt and claimed units: the step kernel in one launch")
        return dataclasses.replace(
            base,
            dealt_units=form[-3:] != "-cl",
            dealt_spread=form.endswith("-ds"),
            claimed_units=form.endswith("-cl"),
            flush_first=False,
            defer_count=False,
        )
    if form.endswith("-cs"):  # KDA's consumers summing the coefficient warps' partials
        cfg = dataclasses.replace(config(g, L, state, form[: -len("-cs")], per_channel), consumer_sums=True, s0_hfma2=False)
        if not cfg.coef_warps or cfg.s0_mma:
            pytest.skip("consumer sums take KDA's coefficient warps and exact S0 products")
        return cfg
    if form.startswith("at"):  # the table's own configuration at that batch, every flag as routed
        return delta_cuda_config(g.head_k_dim, g.head_v_dim, L, int(form[2:]), STATES[state].itemsize, per_channel)
    # KDA: the table's at batch 256; GDN: its two launches (the table's with an fp8 checkpoint
    # above batch 16): units of 64 rows (128 with a bf16 checkpoint), two stages, as
    # many CTAs as the table's rule allows; the flush's fold on FMAs and the records copied one at
    # a time and the units in the fixed order unless the form says otherwise (the table's own: GDN
    # table-cr, KDA table-cr-dc; at batch 12-63 with a 16- or 32-bit checkpoint one launch takes
    # -ff too; GDN's one launch -rw; KDA's dealt and claimed units at 256: the -du / -ds / -cl forms)
    nbytes = STATES[state].itemsize
    if per_channel:
        table = delta_cuda_config(g.head_k_dim, g.head_v_dim, L, 256, nbytes, per_channel)
    else:
        table = DeltaCudaConfig(rows=unit_rows(g.head_v_dim, wide=nbytes == 2), stages=2, min_ctas=1)
        table = dataclasses.replace(table, min_ctas=max(1, _resident_ctas(table, g.head_k_dim, L, nbytes, False)))
    cfg = dataclasses.replace(
        table,
        flush_mma=False,
        coalesce_recs=False,
        defer_count=False,
        flush_first=False,
        dealt_units=False,
        dealt_spread=False,
        claimed_units=False,
        rec_warps=False,
        consumer_sums=False,
        s0_hfma2=False,
    )
    if form.endswith("-rw"):  # GDN's coefficient warps splitting the records
        return dataclasses.replace(config(g, L, state, form[: -len("-rw")], per_channel), rec_warps=True)
    if form.endswith("-ff"):  # each block of 32 units taken with its flushing units first
        return dataclasses.replace(config(g, L, state, form[: -len("-ff")], per_channel), flush_first=True)
    if form.endswith("-dc"):  # the cursor reads counted after the first stages' units
        return dataclasses.replace(config(g, L, state, form[: -len("-dc")], per_channel), defer_count=True)
    if form.endswith("-cr"):  # a unit's records in one bulk copy each
        return dataclasses.replace(config(g, L, state, form[: -len("-cr")], per_channel), coalesce_recs=True)
    if form.endswith("-fmma"):  # the flush's fold on tensor cores
        return dataclasses.replace(config(g, L, state, form[: -len("-fmma")], per_channel), flush_mma=True)
    if form.endswith("-mma"):
        if STATES[state].itemsize != 2:
            pytest.skip("the tensor-core S0 products take bf16 checkpoints")
        cfg = dataclasses.replace(config(g, L, state, form[:-4], per_channel), s0_mma=True)
        # a larger stage: as many of the form's CTAs as still fit
        return dataclasses.replace(cfg, min_ctas=min(cfg.min_ctas, delta_ctas_that_fit(cfg, g.head_k_dim, L, 2, per_channel)))
    if form == "table":
        return cfg
    if form == "one":
        return dataclasses.replace(cfg, one_launch=True)
    if form == "cw":  # three stages where they fit a multiprocessor, else two
        forms = [dataclasses.replace(cfg, one_launch=True, coef_warps=4, stages=s, min_ctas=1) for s in (3, 2)]
        return next(f for f in forms if delta_ctas_that_fit(f, g.head_k_dim, L, STATES[state].itemsize, per_channel) >= 1)
    if form.startswith("small"):
        rows = int(form[5:])
        if g.head_v_dim % rows:
            pytest.skip(f"{rows} rows do not tile head_v_dim {g.head_v_dim}")
        return dataclasses.replace(cfg, small=True, small_rows=rows, min_ctas=1)
    if g.head_v_dim % 128:
        pytest.skip(f"128 rows do not tile head_v_dim {g.head_v_dim}")
    return dataclasses.replace(cfg, rows=128, min_ctas=1)


def check_against_oracle(g, L, state, form, per_channel=False, l2norm=True, steps=None, batch=5, num_slots=11, min_flushes=5):
    """``steps`` CUDA steps (default max(3L + 3, 40)) of ``batch`` rows and 2 padding rows against
    the float64 oracle, within the tolerances of the checkpoint dtype and bf16 activations, with
    at least ``min_flushes`` flushes."""
    worst = drive_replay(
        DeltaFamily(g, per_channel=per_channel, use_qk_l2norm=l2norm),
        partial(replay_cuda, config=config(g, L, state, form, per_channel)),
        L,
        STATES[state],
        torch.bfloat16,
        "cuda",
        steps=steps or max(3 * L + 3, 40),
        batch=batch,
        num_slots=num_slots,
        n_padding=2,
    )
    assert worst["flushes"] >= min_flushes
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[state], worst
    assert worst["ckpt"] < STATE_TOL[state] + ACT_TOL["bf16"], worst


@needs_sm90
@pytest.mark.parametrize("g,L", SHAPES)
@pytest.mark.parametrize("state", ["bf16", "f32"])
@pytest.mark.parametrize("form", FORMS)
def test_cuda_gdn_step_long_run_against_oracle(g, L, state, form):
    check_against_oracle(g, L, state, form)


@needs_sm90
@pytest.mark.parametrize("g,L", KDA_SHAPES)
@pytest.mark.parametrize("state", ["bf16", "f32"])
@pytest.mark.parametrize("form", KDA_FORMS)
def test_cuda_kda_step_long_run_against_oracle(g, L, state, form):
    check_against_oracle(g, L, state, form, per_channel=True)


@needs_sm90
@pytest.mark.parametrize("form", FORMS)
def test_cuda_gdn_step_raw_qk_short_run(form):
    """q and k not normalised in the kernel: a short run at head_k_dim 64 (unnormalised keys,
    |k|² ~ head_k_dim, grow the delta rule's state; over long runs the fp64 oracle and any fp32
    kernel part ways, the Triton kernel's too)."""
    check_against_oracle(DeltaGeometry(2, 6, 64, 96), 4, "f32", form, l2norm=False, steps=14)


@needs_sm90
@pytest.mark.parametrize("state", ["bf16", "f32"])
@pytest.mark.parametrize(
    "per_channel,form", [(False, f) for f in FORMS] + [(True, f) for f in KDA_FORMS], ids=lambda v: str(v)
)
def test_cuda_delta_step_many_units_per_cta(state, per_channel, form):
    """Batch 64 at the 122B (GDN) or Kimi Linear (KDA) geometry: thousands of units, tens per CTA
    (the ring wraps many times)."""
    g = DeltaGeometry(32, 32, 128, 128) if per_channel else DeltaGeometry(16, 64, 128, 128)
    check_against_oracle(g, 16, state, form, per_channel, steps=40, batch=64, num_slots=70, min_flushes=64)


@needs_sm90
@pytest.mark.parametrize(
    "per_channel, state", [(False, "f32"), (False, "bf16"), (True, "bf16")], ids=["gdn-f32", "gdn-bf16", "kda-bf16"]
)
def test_cuda_delta_table_at_batch_128(per_channel, state):
    """The table's own build at batch 128, many units a CTA: GDN in one launch with coefficient
    warps and 128-row units (fp32: two stages, GDN_F32_WIDE_UNITS_MIN_BATCH; bf16: four stages,
    as at every batch from GDN_COEF_WARPS_MIN_BATCH), KDA bf16 at three stages and one CTA
    (KDA_THREE_STAGE_BATCHES)."""
    g = DeltaGeometry(32, 32, 128, 128) if per_channel else DeltaGeometry(16, 64, 128, 128)
    cfg = config(g, 16, state, "at128", per_channel)
    stages = 3 if per_channel else {"f32": 2, "bf16": 4}[state]
    assert (cfg.rows, cfg.stages, cfg.min_ctas, cfg.coef_warps) == (128, stages, 1, 4)
    assert cfg.one_launch or per_channel
    check_against_oracle(g, 16, state, "at128", per_channel, steps=40, batch=64, num_slots=70, min_flushes=64)


@needs_sm90
@pytest.mark.parametrize("g,L", [KDA_SHAPES[0], KDA_SHAPES[3]])
@pytest.mark.parametrize("batch", [1, 16, 64, 256])
def test_cuda_kda_fp8_consumer_sums_long_run_against_oracle(g, L, batch):
    """KDA's consumers summing the coefficient warps' partials with an fp8 checkpoint, at the
    table's build for ``batch`` (narrow units at 1, the rings from 64)."""
    check_against_oracle(g, L, "fp8", f"at{batch}-cs", per_channel=True)


@needs_sm90
@pytest.mark.parametrize("g,L", [KDA_SHAPES[0], KDA_SHAPES[3], KDA_SHAPES[4]])
@pytest.mark.parametrize("form", ["at1", "at16", "at64", "at256", "table", "table-fmma", "table-ff", "at64-du", "at64-cl"])
@pytest.mark.parametrize("s0", ["qg", "h2"])
def test_cuda_kda_fp8_s0_forms_long_run_against_oracle(g, L, form, s0):
    """KDA's S0 products as fp8 wgmma products (``s0_qgmma``, 64- and 128-row units) or f16x2 FMAs
    (``s0_hfma2``) with an fp8 checkpoint: the table's builds at 1 / 16 / 64 / 256, and with the
    flush on tensor cores, flushing units first, dealt or claimed units, over many steps and flushes
    against the float64 oracle."""
    check_against_oracle(g, L, "fp8", f"{form}-{s0}", per_channel=True)


@needs_sm90
@pytest.mark.parametrize(
    "g,L,per_channel,state",
    [
        (DeltaGeometry(2, 4, 128, 64), 5, True, "fp8"),
        (DeltaGeometry(2, 4, 64, 96), 5, True, "bf16"),
        (DeltaGeometry(2, 6, 64, 96), 4, False, "f32"),
    ],
    ids=["kda-fp8", "kda-bf16", "gdn-f32"],
)
@pytest.mark.parametrize("units", ["du", "cl"])
def test_cuda_delta_dealt_units_over_many_rows(g, L, per_channel, state, units):
    """``dealt_units`` (``claimed_units``) at batch 300 (more than the 256 rows one round of the
    launch's last count reads, so two rounds; dealt units: 10 words of flushing bits), with padding
    rows and unused slots (drive_replay), over many steps and flushes against the float64 oracle."""
    check_against_oracle(
        g, L, state, f"at300-{units}", per_channel, steps=3 * L + 3, batch=300, num_slots=310, min_flushes=300
    )


@needs_sm90
def test_cuda_delta_dealt_units_refuse_more_rows_than_their_order_holds():
    """Batch 1025 with ``dealt_units``: a ValueError naming the limit, the cache untouched."""
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import DEALT_UNITS_MAX_BATCH, delta_cuda_config

    g, L = DeltaGeometry(1, 2, 64, 32), 4
    fam = DeltaFamily(g, per_channel=True)
    p = fam.make_params("cuda")
    cache = fam.allocate(DEALT_UNITS_MAX_BATCH + 2, L, torch.bfloat16, torch.bfloat16, "cuda")
    fill_randomly(cache)
    saved = {k: v.clone() for k, v in vars(cache).items() if isinstance(v, torch.Tensor)}
    batch = DEALT_UNITS_MAX_BATCH + 1
    cfg = dataclasses.replace(
        delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch, 2, True),
        dealt_units=True,
        claimed_units=False,
        flush_first=False,
        defer_count=False,
    )
    slot_ids = torch.arange(batch, dtype=torch.int32, device="cuda")
    inp = make_step(g, batch, torch.bfloat16, "cuda", per_channel=True)
    with pytest.raises(ValueError, match=f"dealt_units orders at most {DEALT_UNITS_MAX_BATCH} batch rows; got batch {batch}"):
        replay_with_launcher(cache, inp, p, slot_ids, torch.zeros_like(inp["v"]), kernel="cuda", config=cfg)
    torch.cuda.synchronize()
    for k, v in saved.items():
        assert torch.equal(getattr(cache, k), v), k


@needs_sm90
@pytest.mark.parametrize("s0", ["qg", "h2"])
def test_cuda_kda_fp8_s0_forms_many_units_per_cta(s0):
    """Batch 64 at Kimi Linear with ``s0_qgmma`` or ``s0_hfma2``: thousands of units, the ring
    wrapping many times (each unit's B tile or f16 vectors rewritten in the stage it reuses)."""
    check_against_oracle(
        DeltaGeometry(32, 32, 128, 128), 16, "fp8", f"at64-{s0}", True, steps=40, batch=64, num_slots=70, min_flushes=64
    )


GDN_FP8_SHAPES = [
    pytest.param(DeltaGeometry(16, 64, 128, 128), 16, id="qwen3.5-122b-L16"),
    pytest.param(DeltaGeometry(16, 32, 128, 128), 32, id="qwen3.5-4b-L32"),
    pytest.param(DeltaGeometry(1, 32, 128, 16), 5, id="vpk32-dv16-L5"),
]


@needs_sm90
@pytest.mark.parametrize("g,L", GDN_FP8_SHAPES)
@pytest.mark.parametrize("form", ["at24", "at64", "at256", "table", "table-fmma"])
def test_cuda_gdn_fp8_f16x2_s0_long_run_against_oracle(g, L, form):
    """GDN's S0 products as f16x2 FMAs (``s0_hfma2``) in its two launches with an fp8 checkpoint:
    the table's builds at 24 / 64 / 256 and the plain two launches with the flush's fold in fp32
    FMAs or on tensor cores, over many steps and flushes against the float64 oracle (raw q and k:
    test_cuda_delta_fp8_takes_q_k_of_any_magnitude; over many steps they grow without bound)."""
    check_against_oracle(g, L, "fp8", f"{form}-h2")


FP8_SHAPES = [
    pytest.param(DeltaGeometry(16, 64, 128, 128), 16, False, id="qwen3.5-122b-L16"),
    pytest.param(DeltaGeometry(16, 32, 128, 128), 32, False, id="qwen3.5-4b-L32"),
    pytest.param(DeltaGeometry(1, 32, 128, 16), 5, False, id="vpk32-dv16-L5"),
    pytest.param(DeltaGeometry(32, 32, 128, 128), 16, True, id="kimi-linear-L16"),
    pytest.param(DeltaGeometry(4, 4, 128, 64), 32, True, id="kda-L32"),
]


@needs_sm90
@pytest.mark.parametrize("g,L,per_channel", FP8_SHAPES)
@pytest.mark.parametrize("batch", [2, 4, 8, 16, 24, 256])
@pytest.mark.parametrize("flush_mma", [False, True], ids=["fma", "fmma"])
@pytest.mark.parametrize("flush_first", [False, True], ids=["", "ff"])
def test_cuda_delta_fp8_long_run_against_oracle(g, L, per_channel, batch, flush_mma, flush_first):
    """An fp8 checkpoint through the kernels at the table's configuration for ``batch`` (GDN: the
    small kernel at 2, one launch at 4, 8 and 16, the two launches at 24 and 256 with their rings;
    KDA: its one launch), the flush folded in exact fp32 (``fma``) or, in the step kernel, on
    tensor cores (``fmma``; KDA's is not routed, session 45 prepared its timing), in one launch
    also with flushing units first (``ff``, not routed for fp8): codes and row scales against the
    float64 oracle over many flushes, padding rows and unused slots untouched (drive_replay)."""
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import delta_cuda_config, step_kernel_in_one_launch

    cfg = delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch, 1, per_channel)
    if flush_mma and cfg.small:
        pytest.skip("the fp8 flush on tensor cores: the step kernel's")
    if flush_first and not step_kernel_in_one_launch(cfg, per_channel):
        pytest.skip("flushing units first: the step kernel in one launch")
    if flush_first:  # in place of the table's dealt or claimed units (KDA 32-4096), with the deferred count
        cfg = dataclasses.replace(cfg, dealt_units=False, claimed_units=False, defer_count=True)
    cfg = dataclasses.replace(cfg, flush_mma=flush_mma, flush_first=flush_first)
    worst = drive_replay(
        DeltaFamily(g, per_channel=per_channel),
        partial(replay_cuda, config=cfg),
        L,
        torch.float8_e4m3fn,
        torch.bfloat16,
        "cuda",
        steps=max(3 * L + 3, 40),
        batch=5,
        num_slots=11,
        n_padding=2,
    )
    assert worst["flushes"] >= 5
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL["fp8"], worst
    assert worst["ckpt"] < STATE_TOL["fp8"] + ACT_TOL["bf16"], worst


@needs_sm90
@pytest.mark.parametrize("batch", [16, 64])  # GDN: one launch, the two launches
def test_cuda_gdn_fp8_flush_on_tensor_cores_matches_the_fma_fold(batch):
    """Every row flushing, once with the fold on tensor cores and once in fp32 FMAs (Qwen3.5-122B,
    L = 16): the same outputs to bf16 rounding (formed before the fold, by two builds), the same
    row scales to fp32 rounding and codes within one e4m3 spacing of the FMA fold's, few of them
    other (two bf16 parts of e_j d_j carry 16 bits: a code moves only next to a rounding
    boundary)."""
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import delta_cuda_config

    g, L = DeltaGeometry(16, 64, 128, 128), 16
    fam = DeltaFamily(g, per_channel=False)
    p = fam.make_params("cuda")
    cache = fam.allocate(batch + 3, L, torch.float8_e4m3fn, torch.bfloat16, "cuda")
    fill_randomly(cache)
    cache.cursor.fill_(L - 1)
    slot_ids = torch.arange(batch, dtype=torch.int32, device="cuda")
    inp = fam.make_step(batch, torch.bfloat16, "cuda")
    table = delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch, 1)
    runs = {}
    for flush_mma in (False, True):
        c = cache.clone()
        out = replay_with_launcher(c, inp, p, slot_ids, torch.zeros_like(inp["v"]), kernel="cuda",
                                   config=dataclasses.replace(table, flush_mma=flush_mma))  # fmt: skip
        runs[flush_mma] = (out, c)
    torch.cuda.synchronize()
    (out_fma, fma), (out_mma, mma) = runs[False], runs[True]
    torch.testing.assert_close(out_mma.float(), out_fma.float(), rtol=2**-7, atol=0.0)
    assert torch.equal(mma.cursor, fma.cursor) and not torch.equal(bits(mma.checkpoint), bits(cache.checkpoint))
    assert_fp8_flush_matches(mma.checkpoint, mma.checkpoint_scale, fma.checkpoint, fma.checkpoint_scale, exact=False)


@needs_sm90
@pytest.mark.parametrize("use_qk_l2norm", [True, False], ids=["l2norm", "raw"])
@pytest.mark.parametrize("form", ["gdn-two", "gdn-two-h2", "gdn-one", "kda"])
def test_cuda_delta_fp8_takes_q_k_of_any_magnitude(use_qk_l2norm, form):
    """With an fp8 checkpoint, GDN's two launches form S0 q̂ and S0 k̂ on tensor cores (or in f16x2
    FMAs, ``gdn-two-h2``) from q and k as f16 times a power of two per (row, key head), the one
    launch (GDN, KDA) in exact fp32: q and k far above f16's range (2^24 x) and far below it
    (2^-24 x) give the Triton step's outputs (fp32 products) to bf16 rounding, with and without the
    L2 norm (unscaled f16 q, k would overflow at 2^24 and vanish at 2^-24)."""
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import DeltaCudaConfig

    per_channel = form == "kda"
    g = DeltaGeometry(32, 32, 128, 128) if per_channel else DeltaGeometry(16, 64, 128, 128)
    L, batch = 16, 32
    fam = DeltaFamily(g, per_channel=per_channel, use_qk_l2norm=use_qk_l2norm)
    p = fam.make_params("cuda")
    cache = fam.allocate(batch, L, torch.float8_e4m3fn, torch.bfloat16, "cuda")
    fill_randomly(cache)
    cache.cursor.copy_(torch.arange(batch, dtype=torch.int32) % (L - 1))  # no flush
    slot_ids = torch.arange(batch, dtype=torch.int32, device="cuda")
    inp = make_step(g, batch, torch.bfloat16, "cuda", per_channel=per_channel)
    cuda_config = DeltaCudaConfig(rows=64, stages=2, min_ctas=1, one_launch=form == "gdn-one", s0_hfma2=form == "gdn-two-h2")
    for factor in (2.0**24, 2.0**-24):
        scaled = dict(inp, q=inp["q"] * factor, k=inp["k"] * factor)  # powers of two: exact in bf16
        outs = {}
        for kernel, cfg in (("cuda", cuda_config), ("triton", None)):
            outs[kernel] = replay_with_launcher(cache.clone(), scaled, p, slot_ids, torch.zeros_like(inp["v"]), kernel=kernel,
                                                config=cfg).float()  # fmt: skip
        err = float((outs["cuda"] - outs["triton"]).abs().max() / outs["triton"].abs().max())
        assert err < 2e-2, (factor, err)


@needs_sm90
@pytest.mark.parametrize(
    "g,L",
    [
        pytest.param(DeltaGeometry(16, 64, 128, 128), 16, id="qwen3.5-122b-L16"),
        pytest.param(DeltaGeometry(1, 32, 128, 16), 5, id="vpk32-dv16-L5"),
    ],
)
@pytest.mark.parametrize("form", ["small16", "small32"])
def test_cuda_gdn_small_fp8_long_run_against_oracle(g, L, form):
    """GDN's small kernel with an fp8 checkpoint, 16 and 32 rows a CTA (where they tile)."""
    check_against_oracle(g, L, "fp8", form)


@needs_sm90
@pytest.mark.parametrize("state", ["bf16", "f32", "fp8"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
# GDN at the table's launch: one launch at 6, the small kernel at 2; "6-two": its two launches
# forced at batch 6 (the table's with an fp8 checkpoint above 16; bf16 and fp32 take one launch
# from batch 3, so their two launches as the oracle tests build them); "6-du" / "6-cl": the table's
# one launch with dealt / claimed units (GDN fp8: one launch up to 16).
@pytest.mark.parametrize(
    "batch,two_launches,units",
    [(6, False, None), (2, False, None), (6, True, None), (6, False, "du"), (6, False, "cl")],
    ids=["6", "2", "6-two", "6-du", "6-cl"],
)
def test_cuda_delta_graph_equals_eager_and_tracks_triton(state, per_channel, batch, two_launches, units):
    """One captured step replayed 2L + 3 times equals as many eager steps bit for bit; both stay
    within fp32 rounding of the Triton kernel (outputs, checkpoints; cursors equal)."""
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import (
        FP8_ONE_LAUNCH_MAX_BATCH,
        delta_cuda_config,
        runs_one_launch,
    )

    g, L, slots = DeltaGeometry(16, 64, 128, 128), 8, 9
    cuda = {}
    if two_launches:
        if per_channel:
            pytest.skip("KDA runs one launch")
        if state != "fp8":
            cuda["config"] = config(g, L, state, "table-cr")
        else:
            batch_two = FP8_ONE_LAUNCH_MAX_BATCH + 1  # the table's two launches with an fp8 checkpoint
            cuda["config"] = delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch_two, STATES[state].itemsize)
        assert not runs_one_launch(cuda["config"], False)
    if units:
        table = delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch, STATES[state].itemsize, per_channel)
        assert runs_one_launch(table, per_channel) and not table.small
        cuda["config"] = dataclasses.replace(
            table,
            dealt_units=units == "du",
            claimed_units=units == "cl",
            dealt_spread=False,
            flush_first=False,
            defer_count=False,
        )
    fam = DeltaFamily(g, per_channel=per_channel)
    p = fam.make_params("cuda")
    cache = fam.allocate(slots, L, STATES[state], torch.bfloat16, "cuda")
    fill_randomly(cache)
    cache.cursor.copy_(torch.randint(0, L, (slots,), dtype=torch.int32))
    slot_ids = torch.tensor([3, -1, 0, 7, 5, 1][:batch], dtype=torch.int32, device="cuda")
    inp = make_step(g, batch, torch.bfloat16, "cuda", per_channel=per_channel)
    saved = {k: v.clone() for k, v in vars(cache).items() if isinstance(v, torch.Tensor)}

    def restore():
        for k, v in saved.items():
            getattr(cache, k).copy_(v)

    def run(kernel, steps, graph=False):
        restore()
        out = torch.zeros_like(inp["v"])
        outs = []
        launch = dict(kernel=kernel, **(cuda if kernel == "cuda" else {}))
        call = lambda: replay_with_launcher(cache, inp, p, slot_ids, out, **launch)  # noqa: E731
        if graph:
            call()  # compile and load outside the capture
            restore()
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg):
                call()
            restore()
            step = cg.replay
        else:
            step = call
        for _ in range(steps):
            step()
            outs.append(out.clone())
        torch.cuda.synchronize()
        scales = cache.checkpoint_scale.clone() if cache.checkpoint_scale is not None else cache.cursor.clone()
        return outs, cache.checkpoint.clone(), cache.cursor.clone(), cache.d_records.clone(), scales

    steps = 2 * L + 3
    eager, graphed, triton = run("cuda", steps), run("cuda", steps, graph=True), run("triton", steps)
    for a, b in zip(eager[0], graphed[0]):
        assert torch.equal(a, b)
    for i in range(1, 5):
        assert torch.equal(bits(eager[i]), bits(graphed[i])), i
    assert torch.equal(eager[2], triton[2])
    rel = lambda a, b: float((a.float() - b.float()).abs().max() / b.float().abs().max())  # noqa: E731
    # KDA's table with an fp8 checkpoint takes its S0 products in f16x2 FMAs (s0_hfma2): their sums
    # are off by up to ~1e-3 of sum |S0 X|, and this test repeats one input, so that d = beta (v - S
    # k̂) becomes a small difference of large terms: outputs ~1-2.5% off the exact products' and a
    # few codes of the flushed rows two e4m3 steps (64 / 448), row scales ~1e-4 (bit-faithful CPU
    # emulation, kernel notes "Session 66"; with fresh inputs each step its error against float64
    # is the exact form's).
    h2 = (
        state == "fp8"
        and (cuda.get("config") or delta_cuda_config(g.head_k_dim, g.head_v_dim, L, batch, 1, per_channel)).s0_hfma2
    )
    tol = 1e-2 if state == "f32" else (4e-2 if h2 else 2e-2)  # outputs in bf16: a rounding step apart at most, compounded
    y_err = max(rel(a, b) for a, b in zip(eager[0], triton[0]))
    assert y_err < tol, (y_err, h2)
    # fp8: codes one e4m3 step apart at most where the two folds' fp32 sums round a tie the other
    # way (32 / 448 in the top binade; two with s0_hfma2), the row scales to fp32 rounding
    ckpt_err = rel(eager[1], triton[1])
    assert ckpt_err < (0.15 if h2 else 0.08 if state == "fp8" else tol), (ckpt_err, h2)
    if state == "fp8":
        scale_err = rel(eager[4], triton[4])
        assert scale_err < (2e-3 if h2 else 1e-5), (scale_err, h2)


@needs_sm90
def test_cuda_delta_refuses_fp32_activations():
    from trtllm_replayssm.kernels.gated_delta_replay_cuda import delta_cuda_unsupported

    g = DeltaGeometry(2, 4, 128, 128)
    for per_channel, act, expect in ((True, torch.float32, "bf16"), (False, torch.float32, "bf16")):
        fam = DeltaFamily(g, per_channel=per_channel)
        c = fam.allocate(3, 4, torch.float32, act, "cuda")
        inp = make_step(g, 2, act, "cuda", per_channel=per_channel)
        reason = delta_cuda_unsupported(
            c.checkpoint, c.d_records, c.k_records, c.g_records, inp["q"], inp["k"], inp["v"], inp["g"]
        )
        assert reason is not None and expect in reason, reason
