"""The CUDA C++ GDN replay step on the CPU: NVRTC compiles every supported shape without local
memory, the shared memory the launcher allocates equals what the kernel indexes, the launcher
packs exactly the kernels' PTX parameters, and the route's refusals name their reason. (Running
it needs an sm_90 GPU: tests/gpu/test_delta_cuda_gpu.py.)"""

import dataclasses
import re

import pytest
import torch

from ptx_params import FP8_PTX, param_lines, params_ored_before_trap, ptx_entry, ptx_params
from trtllm_replayssm.kernels import gated_delta_replay_cuda as gc
from trtllm_replayssm.kernels.nvrtc import SMEM_PER_SM, SMEM_RESERVED_PER_CTA

SHAPES = [  # (k_heads, v_heads, head_k_dim, head_v_dim, L)
    (16, 64, 128, 128, 16),  # Qwen3.5-122B-A10B, TP=1
    (16, 32, 128, 128, 8),  # Qwen3.5-4B
    (16, 32, 128, 128, 32),
    (2, 6, 64, 96, 5),
    (3, 3, 256, 48, 1),
    (1, 32, 128, 16, 17),
]


def _ptx(
    shape,
    state_bytes,
    l2norm=True,
    per_channel=False,
    batch=256,
    one_launch=False,
    coef_warps=None,
    s0_mma=False,
    flush_mma=None,
):
    """The table's configuration (``coef_warps``: that many coefficient warps instead of the table's;
    ``s0_mma``: the S0 products on tensor cores; ``flush_mma``: the flush's fold on them or not,
    instead of the table's)."""
    k_heads, v_heads, dk, dv, L = shape
    cfg = gc.delta_cuda_config(dk, dv, L, batch, state_bytes, per_channel, one_launch)
    if coef_warps is not None:
        cfg = dataclasses.replace(cfg, coef_warps=coef_warps)
    if s0_mma:  # a larger stage: as many of the table's CTAs as still fit
        cfg = dataclasses.replace(cfg, s0_mma=True)
        cfg = dataclasses.replace(
            cfg, min_ctas=min(cfg.min_ctas, gc.delta_ctas_that_fit(cfg, dk, L, state_bytes, per_channel))
        )
    if flush_mma is not None:
        cfg = dataclasses.replace(cfg, flush_mma=flush_mma)
    return cfg, gc.compile_delta_ptx(k_heads, v_heads, dk, dv, L, cfg, state_bytes, l2norm, per_channel)


@pytest.mark.parametrize(
    "family",
    ["gdn", "gdn-one", "kda", "gdn-cw", "kda-cw", "gdn-mma", "gdn-one-mma", "kda-mma"]
    + ["gdn-fmma", "gdn-one-fmma", "kda-fmma", "kda-cw-fmma"],
)
@pytest.mark.parametrize("batch", [16, 256])
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_every_shape_compiles_and_shared_memory_matches(shape, state_bytes, batch, family):
    _, _, dk, dv, L = shape
    per_channel = family.startswith("kda")
    coef_warps = 4 if "-cw" in family else None
    s0_mma = family.endswith("-mma")
    flush_mma = family.endswith("-fmma")
    if s0_mma and state_bytes != 2:
        pytest.skip("the tensor-core S0 products take bf16 checkpoints")
    cfg, ptx = _ptx(
        shape,
        state_bytes,
        per_channel=per_channel,
        batch=batch,
        one_launch=family not in ("gdn", "gdn-mma", "gdn-fmma"),
        coef_warps=coef_warps,
        s0_mma=s0_mma,
        flush_mma=flush_mma,
    )
    one_launch = cfg.one_launch  # the table's: KDA, and GDN up to one_launch_max_batch
    bf16_warps = state_bytes == 2 and batch >= gc.GDN_COEF_WARPS_MIN_BATCH
    gdn_warps = bf16_warps or (state_bytes == 4 and batch >= gc.GDN_F32_COEF_WARPS_MIN_BATCH)
    assert one_launch == (
        family not in ("gdn", "gdn-mma", "gdn-fmma") or batch <= gc.one_launch_max_batch(state_bytes) or gdn_warps
    )
    if coef_warps is None:  # the table's: KDA with a bf16 checkpoint, or with 128-row units (fp32, L > 16),
        # GDN with a bf16 checkpoint from batch 12 and with an fp32 one from batch 5
        wide = per_channel and state_bytes == 4 and cfg.rows == 128 and shape[4] > 16
        gdn = not per_channel and gdn_warps
        assert cfg.coef_warps == (gc.COEF_WARPS if (state_bytes == 2 or wide) and per_channel or gdn else 0)
    assert ".entry delta_replay_step(" in ptx
    # Two launches only: the coefficient launch (one launch forms the coefficients in the step);
    # GDN only: the small kernel
    assert (".entry delta_replay_coefficients(" in ptx) != one_launch
    assert (".entry delta_replay_small(" in ptx) != per_channel
    assert ".local" not in ptx  # no arrays indexed at run time
    compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == gc.config_shared_bytes(cfg, dk, L, state_bytes, per_channel)
    assert ("mma.sync.aligned.m16n8k16" in ptx) == (s0_mma or flush_mma)
    assert (compiled + SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= SMEM_PER_SM


@pytest.mark.parametrize(
    "per_channel, state_bytes, L, batch, expected",
    [
        # (rows, stages, min_ctas, coef_warps, flush_mma); Qwen3.5-122B / Kimi Linear heads
        (False, 2, 16, 4, (64, 2, 3, 0, True)),
        (False, 2, 16, 8, (64, 2, 3, 0, True)),
        (False, 2, 16, 16, (128, 4, 1, 4, True)),  # GDN bf16 from 12: one launch, coefficient warps
        (False, 2, 16, 64, (128, 4, 1, 4, True)),
        (False, 2, 16, 65, (128, 4, 1, 4, True)),  # above DEEP_RING_MAX_BATCH too: one CTA, four stages
        (False, 2, 16, 256, (128, 4, 1, 4, True)),
        (False, 2, 32, 512, (128, 4, 1, 4, True)),
        # GDN fp32: from GDN_F32_COEF_WARPS_MIN_BATCH one launch with coefficient warps, 64-row
        # units at four stages below GDN_F32_WIDE_UNITS_MIN_BATCH, 128-row units at two from it
        (False, 4, 16, 4, (64, 2, 2, 0, False)),
        (False, 4, 16, 5, (64, 4, 1, 4, False)),
        (False, 4, 16, 32, (64, 4, 1, 4, False)),
        (False, 4, 16, 33, (128, 2, 1, 4, False)),
        (False, 4, 16, 64, (128, 2, 1, 4, False)),
        (False, 4, 16, 96, (128, 2, 1, 4, False)),
        (False, 4, 16, 128, (128, 2, 1, 4, False)),
        (False, 4, 16, 256, (128, 2, 1, 4, False)),
        (True, 2, 16, 1, (32, 2, 1, 4, False)),  # KDA_NARROW_MAX_BATCH
        (True, 2, 16, 2, (32, 2, 1, 4, False)),
        (True, 2, 16, 3, (128, 4, 1, 4, False)),
        (True, 2, 16, 48, (128, 4, 1, 4, False)),
        (True, 2, 16, 64, (128, 3, 1, 4, False)),  # KDA_THREE_STAGE_BATCHES
        (True, 2, 16, 255, (128, 3, 1, 4, False)),
        (True, 2, 16, 256, (128, 2, 2, 4, False)),
        (True, 2, 32, 256, (128, 3, 1, 4, False)),  # one CTA of two stages: the deep ring
        (True, 4, 16, 256, (64, 2, 2, 0, False)),
        # KDA fp32 where one CTA of 64-row units fits (L > 16): 128-row units with coefficient
        # warps from batch 2
        (True, 4, 32, 1, (32, 2, 1, 4, False)),
        (True, 4, 32, 3, (128, 2, 1, 4, False)),
        (True, 4, 16, 3, (64, 2, 2, 0, False)),
        (True, 4, 24, 16, (128, 2, 1, 4, False)),
        (True, 4, 32, 512, (128, 2, 1, 4, False)),
        (False, 4, 32, 512, (128, 2, 1, 4, False)),
        # fp8 checkpoints (sessions 43, 44): GDN's flush on tensor cores from batch 5, one launch
        # up to 12, then two launches with 64-row units at 3 stages, 3 CTAs, but 4 stages, 2 CTAs
        # at batch 32-64; KDA as bf16 below batch 64, from it three stages at as many CTAs as fit
        (False, 1, 16, 4, (64, 2, 3, 0, False)),
        (False, 1, 16, 5, (64, 2, 3, 0, True)),
        (False, 1, 16, 16, (64, 2, 3, 0, True)),
        (False, 1, 16, 17, (64, 3, 3, 0, True)),
        (False, 1, 16, 32, (64, 4, 2, 0, True)),
        (False, 1, 16, 64, (64, 4, 2, 0, True)),
        (False, 1, 16, 256, (64, 3, 3, 0, True)),
        (True, 1, 16, 32, (128, 4, 1, 4, False)),
        (True, 1, 16, 64, (128, 3, 2, 4, False)),
        (True, 1, 16, 256, (128, 3, 2, 4, False)),
        (True, 1, 32, 256, (128, 3, 1, 4, False)),  # one CTA fits
    ],
)
def test_launch_table_at_measured_points(per_channel, state_bytes, L, batch, expected):
    cfg = gc.delta_cuda_config(128, 128, L, batch, state_bytes, per_channel)
    assert (cfg.rows, cfg.stages, cfg.min_ctas, cfg.coef_warps, cfg.flush_mma) == expected


@pytest.mark.parametrize(
    "units, resident, even, expected",
    [
        (4096, 132, False, 132),
        (4096, 132, True, 128),  # 32 rounds either way: 128 CTAs of 32 units, not 4 CTAs with a 32nd
        (2048, 132, True, 128),
        (8192, 264, True, 256),
        (16384, 264, True, 261),  # 63 rounds: 16384 / 63 rounded up
        (3960, 132, True, 132),  # whole rounds already
        (100, 132, True, 100),  # fewer units than CTAs: a unit a CTA
        (100, 132, False, 100),
        (1, 132, True, 1),
    ],
)
def test_step_grid_keeps_the_rounds_and_balances_the_units(units, resident, even, expected):
    grid = gc.step_grid(units, resident, even)
    assert grid == expected
    rounds = -(-units // min(units, resident))
    assert -(-units // grid) == rounds  # never a round more
    if even:  # every CTA within one unit of the others, and no CTA idle
        assert units - (rounds - 1) * grid >= 1 and grid <= resident
    label = dataclasses.replace(gc.delta_cuda_config(128, 128, 16, 64, 2), even_grid=even).label()
    assert label.endswith(",eg") == even


FP8_SHAPES = [s for s in SHAPES if s[2] == 128]


@pytest.mark.parametrize("batch", [1, 4, 8, 16, 64, 256])
@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_fp8_checkpoints_compile_with_their_scales(shape, per_channel, batch):
    """An fp8 checkpoint's kernels at the table's configuration: the bf16 table's (the small kernel,
    units, stages and CTAs) except KDA's deeper rings from :data:`KDA_FP8_RING_MIN_BATCH` and GDN's
    two launches (above :data:`FP8_ONE_LAUNCH_MAX_BATCH`), which take the standard units (not
    the wide ones) at the stages and CTAs of :func:`fp8_mma_rings`, and GDN's flush fold, in
    exact fp32 below :data:`FP8_FLUSH_MMA_MIN_BATCH` (batch 1 and 4) and on tensor cores from it
    (its products' PTX: test_fp8_flush_on_tensor_cores_compiles); shared memory as the launcher
    allocates it (the row scales in each stage), codes read exactly (e4m3 pairs to f16 pairs),
    the flush's codes rounded to nearest even with saturation, its scales from exact divisions
    and its quotients from a correctly rounded reciprocal (rcp.rn, Markstein's correction), in
    the step and the small kernel; S0 q̂ and S0 k̂ as f16 tensor-core products in GDN's two
    launches (the coefficient launch writes q and k as f16), no tensor-core product elsewhere."""
    _, _, dk, dv, L = shape
    cfg, ptx = _ptx(shape, 1, per_channel=per_channel, batch=batch)
    bf16 = gc.delta_cuda_config(dk, dv, L, batch, 2, per_channel)
    fmma = not (per_channel or bf16.small) and batch >= gc.FP8_FLUSH_MMA_MIN_BATCH
    bf16_route = bf16.small or per_channel or (bf16.one_launch and batch <= gc.FP8_ONE_LAUNCH_MAX_BATCH)
    # KDA fp8's own claimed and dealt units (the bf16 table's GDN rows are not KDA's; its dealt
    # units spread, at other batches)
    claimed = per_channel and batch in gc.CLAIMED_UNITS_ROUTES[(True, 1)]
    dealt = per_channel and batch in gc.KDA_FP8_DEALT_BATCHES and not claimed
    if per_channel:
        bf16 = dataclasses.replace(
            bf16, defer_count=not (dealt or claimed), dealt_units=dealt, dealt_spread=False, claimed_units=claimed
        )
    if per_channel and batch >= gc.KDA_FP8_RING_MIN_BATCH:  # a deeper ring at as many CTAs as fit
        assert (
            cfg
            == dataclasses.replace(
                bf16, stages=gc.KDA_FP8_STAGES, min_ctas=cfg.min_ctas, flush_first=False, consumer_sums=False, s0_hfma2=True
            )
            and cfg.min_ctas >= 1
        )
        assert gc.delta_ctas_that_fit(cfg, dk, L, 1, True) >= cfg.min_ctas
    elif bf16_route:  # the bf16 table's, without its flushing units first, GDN's one launch with rec_warps
        rw = not per_channel and gc.step_kernel_in_one_launch(cfg, per_channel)
        if bf16.coef_warps and not per_channel:  # GDN's coefficient-warp builds: the standard units, two stages
            bf16 = dataclasses.replace(bf16, rows=gc.unit_rows(dv), stages=2, coef_warps=0, min_ctas=cfg.min_ctas)
            assert gc.delta_ctas_that_fit(cfg, dk, L, 1, False) >= cfg.min_ctas >= 1
        assert cfg == dataclasses.replace(
            bf16,
            flush_mma=fmma,
            flush_first=False,
            rec_warps=rw,
            consumer_sums=False,
            s0_hfma2=per_channel,
            defer_count=bf16.defer_count and not dealt,
            dealt_units=dealt,
        )
    else:  # GDN's two launches: the standard units, not the wide ones
        ring = gc.fp8_mma_rings(batch)[0]
        assert (cfg.rows, cfg.stages, cfg.min_ctas) == (gc.unit_rows(dv), *ring) and not cfg.one_launch
    assert cfg.flush_mma == fmma
    two_launches = not gc.runs_one_launch(cfg, per_channel)  # the step kernel's build (also beside the small one)
    step = ptx_entry(ptx, "delta_replay_step")
    assert ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in step) == two_launches
    assert ("bf16.bf16" in step) == fmma and "mma.sync" not in ptx.replace(step, "")
    if two_launches:
        assert "cvt.rn.f16.f32" in ptx_entry(ptx, "delta_replay_coefficients")
    entries = ["delta_replay_step"] + ([] if per_channel else ["delta_replay_small"])
    for body in (ptx_entry(ptx, e) for e in entries):
        assert all(op in body for op in FP8_PTX), [op for op in FP8_PTX if op not in body]
    if cfg.small:
        return  # the small kernel's shared memory is static (no stages)
    compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", ptx).group(1))
    one_launch = gc.runs_one_launch(cfg, per_channel)
    assert compiled == gc.delta_step_shared_bytes(
        dk, cfg.rows, L, cfg.stages, 1, per_channel, one_launch, cfg.coef_warps, dealt_units=cfg.dealt_units
    )
    assert (compiled + SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= SMEM_PER_SM


@pytest.mark.parametrize("batch", [16, 256])  # GDN: one launch, the two launches
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_fp8_flush_on_tensor_cores_compiles(shape, batch):
    """GDN's fp8 flush folded on tensor cores (``flush_mma``) at the table's configuration
    otherwise: bf16 products in the step kernel beside its f16 S0 products (two launches), the
    codes' and scales' conversions, the shared memory the launcher allocates."""
    _, _, dk, dv, L = shape
    cfg, ptx = _ptx(shape, 1, batch=batch, flush_mma=True)
    step = ptx_entry(ptx, "delta_replay_step")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in step
    assert ("f32.f16.f16.f32" in step) == (not gc.runs_one_launch(cfg, False))
    assert all(op in step for op in FP8_PTX), [op for op in FP8_PTX if op not in step]
    compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == gc.delta_step_shared_bytes(dk, cfg.rows, L, cfg.stages, 1, False, gc.runs_one_launch(cfg, False))


def test_fp8_refusals_name_their_reason():
    c, q, v, g = _cpu_case(state=torch.float8_e4m3fn)
    unsupported = gc.delta_shape_unsupported
    assert unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g, c.checkpoint_scale) is None
    assert "fp8 checkpoint without checkpoint_scale" in unsupported(
        c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g
    )
    spread = torch.zeros(6, 64, 129)[..., 1:]
    reason = unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g, spread)
    assert "fp8 checkpoint_scale strides" in reason
    c64, q64, v64, g64 = _cpu_case(dk=64, state=torch.float8_e4m3fn)
    reason = unsupported(c64.checkpoint, c64.d_records, c64.k_records, c64.g_records, q64, q64, v64, g64, c64.checkpoint_scale)
    assert "head_k_dim 64 with an fp8 checkpoint" in reason
    cfg = gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=1, s0_mma=True)
    with pytest.raises(ValueError, match="s0_mma needs a bf16 checkpoint and the step kernel; got 1-byte"):
        gc.delta_step_defines(16, 64, 128, 128, 16, cfg, 1, True, torch.float32, torch.float32)


def test_coefficient_warps_need_one_launch():
    two = gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=1, coef_warps=4)

    def defines(cfg, per_channel):
        return dict(gc.delta_step_defines(16, 64, 128, 128, 16, cfg, 4, True, torch.float32, torch.float32, per_channel))

    with pytest.raises(ValueError, match="coef_warps 4 needs the step kernel in one launch"):
        defines(two, per_channel=False)
    with pytest.raises(ValueError, match="coef_warps 9; expected 0 to 8"):
        defines(dataclasses.replace(two, coef_warps=9), per_channel=True)
    assert defines(two, per_channel=True)["COEF_WARPS"] == 4
    assert defines(dataclasses.replace(two, one_launch=True), per_channel=False)["COEF_WARPS"] == 4


def test_tensor_core_s0_needs_bf16_checkpoint_and_the_step_kernel():
    two = gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=1, s0_mma=True)

    def defines(cfg, state_bytes):
        return dict(gc.delta_step_defines(16, 64, 128, 128, 16, cfg, state_bytes, True, torch.float32, torch.float32))

    with pytest.raises(ValueError, match="s0_mma needs a bf16 checkpoint and the step kernel; got 4-byte"):
        defines(two, 4)
    with pytest.raises(ValueError, match="small=True"):
        defines(dataclasses.replace(two, small=True), 2)
    assert defines(two, 2)["S0_MMA"] == 1 and defines(dataclasses.replace(two, s0_mma=False), 2)["S0_MMA"] == 0
    assert gc.delta_coefficient_floats(16, s0_mma=True) == gc.delta_coefficient_floats(16) + 4


@pytest.mark.parametrize(
    "field, define, token", [("flush_mma", "FLUSH_MMA", ",fmma"), ("coalesce_recs", "COALESCE_RECS", ",cr")]
)
def test_step_kernel_forms_need_the_step_kernel(field, define, token):
    """The flush's fold on tensor cores and the coalesced record copies: the step kernel only (one
    launch and two; the small kernel has neither), each its define and label token."""
    cfg = gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=1, **{field: True})

    def defines(cfg, per_channel=False):
        return dict(gc.delta_step_defines(16, 64, 128, 128, 16, cfg, 4, True, torch.float32, torch.float32, per_channel))

    with pytest.raises(ValueError, match=f"{field} needs the step kernel; got small=True"):
        defines(dataclasses.replace(cfg, small=True))
    assert defines(cfg)[define] == 1 and defines(cfg, per_channel=True)[define] == 1
    assert defines(dataclasses.replace(cfg, **{field: False}))[define] == 0
    assert cfg.label().endswith(token)


@pytest.mark.parametrize("state_bytes", [2, 4, 1], ids=["bf16", "fp32", "fp8"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_small_kernel_compiles_without_local_memory(shape, state_bytes):
    k_heads, v_heads, dk, dv, L = shape
    if state_bytes == 1 and dk != 128:
        pytest.skip("fp8 rows of 128 codes only")
    rows = 32 if dv % 32 == 0 else 16
    cfg = dataclasses.replace(gc.delta_cuda_config(dk, dv, L, 1, state_bytes), small=True, small_rows=rows, min_ctas=1)
    ptx = gc.compile_delta_ptx(k_heads, v_heads, dk, dv, L, cfg, state_bytes)
    assert ".entry delta_replay_small(" in ptx and ".local" not in ptx


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_raw_qk_compiles(per_channel):
    ptx = _ptx(SHAPES[0], 4, l2norm=False, per_channel=per_channel)[1]
    assert ".entry delta_replay_step(" in ptx and ".local" not in ptx


def _cpu_case(
    k_heads=16, v_heads=64, dk=128, dv=128, L=16, batch=4, slots=6, per_channel=False, act=torch.bfloat16, state=torch.float32
):
    from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache

    cls = KDAReplayCache if per_channel else GDNReplayCache
    c = cls.allocate(slots, k_heads, v_heads, dk, dv, L, state_dtype=state, record_dtype=act, device="cpu")
    q = torch.zeros(batch, k_heads, dk, dtype=act)
    v = torch.zeros(batch, v_heads, dv, dtype=act)
    g = torch.zeros((batch, v_heads, dk) if per_channel else (batch, v_heads))
    return c, q, v, g


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_launcher_packs_the_kernels_ptx_parameters(per_channel):
    """Same count and widths, in order: a missing, extra or swapped-width argument fails."""
    c, q, v, g = _cpu_case(per_channel=per_channel)
    ptx = _ptx(SHAPES[0], 1, per_channel=per_channel, batch=63)[1]  # GDN: the table's two launches (fp8)
    slots = torch.zeros(4, dtype=torch.int32)
    coef = torch.zeros(8)
    args = gc.step_args((b"\0" * 128, b"\0" * 128), coef, coef, None, c.d_records, c.k_records, c.g_records, v, v, slots,
                        c.cursor, q, q, g, g, c.arrivals, 0.1)  # fmt: skip
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_replay_step")
    fp8 = gc.step_args((b"\0" * 128, b"\0" * 128), coef, coef, torch.zeros(6, 64, 128), c.d_records, c.k_records,
                       c.g_records, v, v, slots, c.cursor, q, q, g, g, c.arrivals, 0.1)  # fmt: skip
    assert fp8.kinds == args.kinds
    assert ["64" if k in ("ptr", "i64") else k for k in fp8.kinds] == ptx_params(
        _ptx(SHAPES[0], 1, per_channel=per_channel)[1], "delta_replay_step"
    )
    if per_channel:
        return  # no coefficient launch, no small kernel
    args = gc.coefficient_args(coef, coef, c.k_records, c.g_records, c.cursor, q, q, g, g, slots, 0.1)
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_replay_coefficients")
    small_inputs = (c.d_records, c.k_records, c.g_records, c.cursor, c.arrivals, q, q, v, g, g, v, slots, 0.1)
    args = gc.small_args(c.checkpoint, None, *small_inputs)
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_replay_small")
    fp8 = gc.small_args(c.checkpoint, torch.zeros(6, 64, 128), *small_inputs)
    assert fp8.kinds == args.kinds
    assert ["64" if k in ("ptr", "i64") else k for k in fp8.kinds] == ptx_params(
        _ptx(SHAPES[0], 1, batch=1)[1], "delta_replay_small"
    )


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(act=torch.float32), "bf16"),
        (dict(dk=96), "head_k_dim 96"),
        (dict(dv=40), "head_v_dim 40"),
        (dict(L=33), "L 33"),
        (dict(k_heads=1, v_heads=64), "64 value heads per key head"),
    ],
)
def test_shape_refusals_name_their_reason(change, reason):
    c, q, v, g = _cpu_case(**change)
    got = gc.delta_shape_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g)
    assert got is not None and reason in got, got


def test_supported_shape_has_no_reason_and_cpu_tensors_are_refused_by_the_launcher():
    from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step, replay_step_kernel

    c, q, v, g = _cpu_case()
    assert gc.delta_shape_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) is None
    assert replay_step_kernel(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) == "triton"
    beta = torch.zeros(4, 64)
    with pytest.raises(ValueError, match=r"delta_replay_step \(CUDA\): not a CUDA tensor"):
        launch_gated_delta_replay_step(
            c.checkpoint, c.d_records, c.k_records, c.g_records, c.cursor, c.arrivals, q, q, v, g, beta,
            slot_ids=torch.zeros(4, dtype=torch.int32), scale=0.1, use_qk_l2norm=True, out=v.clone(), kernel="cuda",
        )  # fmt: skip


def test_small_kernel_refuses_kda():
    cfg = gc.DeltaCudaConfig(64, 2, 2, small=True)
    with pytest.raises(ValueError, match="the small kernel takes GDN only"):
        gc.delta_step_defines(32, 32, 128, 128, 16, cfg, 4, True, torch.float32, torch.float32, per_channel=True)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_g_records_in_another_dtype_are_refused(per_channel):
    """The step takes the caches' g records: KDA's in fp16 (beside bf16 records), GDN's in fp32."""
    c, q, v, g = _cpu_case(k_heads=32, v_heads=32, per_channel=per_channel)
    assert gc.delta_shape_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) is None
    other = c.g_records.float() if per_channel else c.g_records.half()
    got = gc.delta_shape_unsupported(c.checkpoint, c.d_records, c.k_records, other, q, q, v, g)
    assert got is not None and f"the CUDA step takes {torch.float16 if per_channel else torch.float32}" in got, got


def test_kda_with_strided_channels_is_refused():
    c, q, v, g = _cpu_case(per_channel=True)
    g = torch.zeros(4, 128, 64).transpose(1, 2)
    got = gc.delta_shape_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g)
    assert got is not None and "channels contiguous" in got, got


def test_rows_that_do_not_tile_the_head_are_refused():
    with pytest.raises(ValueError, match="rows 48; expected a multiple of 16 up to 128 dividing head_v_dim 128"):
        gc.delta_step_defines(16, 64, 128, 128, 16, gc.DeltaCudaConfig(48, 2, 2), 4, True, torch.float32, torch.float32)


@pytest.mark.parametrize(
    "per_channel, state_bytes, L, cfg",
    [
        (True, 4, 16, gc.DeltaCudaConfig(128, 3, 1, one_launch=True, coef_warps=4)),  # 262,240 bytes
        (True, 2, 32, gc.DeltaCudaConfig(128, 4, 1, one_launch=True, coef_warps=4)),
    ],
    ids=["kda-fp32-three-stages", "kda-bf16-L32-four-stages"],
)
def test_stages_beyond_a_ctas_shared_memory_are_refused(per_channel, state_bytes, L, cfg):
    """A configuration whose stages do not fit an sm_90 CTA's shared memory is refused, named,
    before anything is compiled or loaded (the driver would fail the attribute call), while one
    stage fewer is taken."""
    need = gc.delta_step_shared_bytes(128, cfg.rows, L, cfg.stages, state_bytes, per_channel, True, cfg.coef_warps)
    assert need > SMEM_PER_SM
    with pytest.raises(ValueError, match=f"{cfg.label()} needs {need} bytes of shared memory a CTA .* at most {SMEM_PER_SM}"):
        gc.delta_step_defines(32, 32, 128, 128, L, cfg, state_bytes, True, torch.float16, torch.float32, per_channel)
    fewer = dataclasses.replace(cfg, stages=cfg.stages - 1)
    assert gc.delta_step_defines(32, 32, 128, 128, L, fewer, state_bytes, True, torch.float16, torch.float32, per_channel)


def test_records_strided_over_positions_are_refused_by_name(monkeypatch):
    """The table's step kernel copies a unit's records in one bulk copy each: records strided over
    positions are refused, named, by the route's check (so the auto route takes Triton); GDN's g
    records (4-byte copies) are not checked."""
    c, q, v, g = _cpu_case(per_channel=True)
    assert gc.records_unsupported(c.d_records, c.k_records, c.g_records) is None

    def padded(t):
        return torch.zeros(*t.shape[:3], t.shape[3] + 8, dtype=t.dtype)[..., :-8]

    for name, args in (
        ("d_records", (padded(c.d_records), c.k_records, c.g_records)),
        ("k_records", (c.d_records, padded(c.k_records), c.g_records)),
        ("g_records", (c.d_records, c.k_records, padded(c.g_records))),
    ):
        got = gc.records_unsupported(*args)
        assert got is not None and got.startswith(f"{name} strides") and "contiguous over positions" in got, got
    gdn, gq, gv, gg = _cpu_case()
    assert gc.records_unsupported(gdn.d_records, gdn.k_records, gdn.g_records) is None
    monkeypatch.setattr(gc, "device_unsupported", lambda t: None)  # as on an sm_90 GPU
    assert gc.delta_cuda_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) is None
    got = gc.delta_cuda_unsupported(c.checkpoint, c.d_records, padded(c.k_records), c.g_records, q, q, v, g)
    assert got is not None and got.startswith("k_records strides"), got


def test_the_table_coalesces_records_defers_the_count_and_takes_flushing_units_first():
    """Every step-kernel build of the table copies records in bulk; where it runs one launch it
    claims its units up to batch 4096 from batch 256 with KDA bf16 and fp8, from 32 with KDA fp32
    and from 48 with GDN fp32, else deals
    them with KDA fp8 at batch 32-512, GDN bf16 at 48-256, GDN fp32 at 64-128 and KDA
    bf16 at 256-512 (these two with their flush units spread), elsewhere defers the count
    and takes each block's flushing units first with a 16- or 32-bit checkpoint at batch 12-63, KDA
    bf16 from 12 on, GDN fp32 with coefficient warps at 33-96 only (its 128-row units); KDA bf16 has its consumers sum the partials at 48-255, KDA fp8 its S0
    products in f16x2 FMAs with L2-normalised q and k; GDN splits the records over its coefficient
    warps (but with a bf16 checkpoint and no coefficient warps at batch 4 and 8). The small kernel
    (GDN at batch 1) takes none of them."""
    seen = set()
    for per_channel in (False, True):
        for state_bytes in (4, 2, 1):
            for batch in (1, 2, 4, 8, 11, 12, 16, 31, 32, 33, 47, 48, 63, 64, 96, 97, 255, 256, 257, 512, 513, 4096, 4097):
                cfg = gc.delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
                one = gc.step_kernel_in_one_launch(cfg, per_channel)
                assert cfg.coalesce_recs == (not cfg.small), cfg
                least = {(True, 1): 256, (True, 2): 256, (True, 4): 32, (False, 4): 48}.get((per_channel, state_bytes))
                claimed = one and least is not None and least <= batch <= 4096
                assert cfg.claimed_units == claimed, cfg
                dealt = (
                    one
                    and not claimed
                    and (
                        32 <= batch <= 512
                        if per_channel and state_bytes == 1
                        else 48 <= batch <= 256
                        if not per_channel and state_bytes == 2
                        else 64 <= batch <= 128
                        and not per_channel
                        and state_bytes == 4
                        or 256 <= batch <= 512
                        and per_channel
                        and state_bytes == 2
                    )
                )
                assert cfg.dealt_units == dealt and cfg.defer_count == (one and not dealt and not claimed), cfg
                assert cfg.dealt_spread == (dealt and (state_bytes == 4 or per_channel and state_bytes == 2)), cfg
                kda_bf16 = per_channel and state_bytes == 2
                if state_bytes == 1 or dealt or claimed:
                    first = False
                elif kda_bf16:
                    first = batch >= 12
                elif not per_channel and state_bytes == 4 and cfg.coef_warps > 0:
                    first = 33 <= batch <= 96
                else:
                    first = 12 <= batch < 64
                assert cfg.flush_first == (one and first), cfg
                assert cfg.consumer_sums == (kda_bf16 and 48 <= batch < 256), cfg
                assert cfg.s0_hfma2 == (per_channel and state_bytes == 1), cfg
                raw = gc.delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel, use_qk_l2norm=False)
                assert raw == dataclasses.replace(cfg, s0_hfma2=False), raw
                losing = state_bytes == 2 and not cfg.coef_warps and batch in gc.REC_WARPS_LOSING_BATCHES
                assert cfg.rec_warps == (one and not per_channel and not losing), cfg
                seen.add((cfg.small, one, cfg.flush_first, cfg.dealt_units, cfg.claimed_units))
    # every form met: the small kernel, two launches, one launch with and without flushing units
    # first, with dealt units, with claimed units
    assert seen == {
        (True, False, False, False, False),
        (False, False, False, False, False),
        (False, True, False, False, False),
        (False, True, True, False, False),
        (False, True, False, True, False),
        (False, True, False, False, True),
    }


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("rows", [64, 128])
@pytest.mark.parametrize("batch", [16, 256])
def test_coalesced_records_compile_with_the_same_shared_memory(per_channel, rows, batch):
    """The step kernel with ``coalesce_recs`` (one launch and two; 128-row units coalesce the d
    records too): it compiles, its shared memory is the form's without it (only the producer's
    copies change), and its code differs from that form's (the define takes effect)."""
    k_heads, v_heads, dk, dv, L = (32, 32, 128, 128, 16) if per_channel else (16, 64, 128, 128, 16)
    base = gc.delta_cuda_config(dk, dv, L, batch, 2, per_channel)
    base = gc.DeltaCudaConfig(rows=rows, stages=2, min_ctas=1, one_launch=base.one_launch and not base.small)
    ptx = {cr: gc.compile_delta_ptx(k_heads, v_heads, dk, dv, L, dataclasses.replace(base, coalesce_recs=cr), 2,
                                    per_channel=per_channel) for cr in (False, True)}  # fmt: skip
    smem = {cr: int(re.search(r"delta_step_shared_bytes = (\d+)", p).group(1)) for cr, p in ptx.items()}
    assert smem[True] == smem[False]
    assert ptx_entry(ptx[True], "delta_replay_step") != ptx_entry(ptx[False], "delta_replay_step")


def test_deferred_count_needs_one_launch():
    """``defer_count``: the step kernel in one launch only (the two launches count nothing), its
    define and label; the compiled code differs from the form without it."""
    cfg = gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=1, one_launch=True, defer_count=True)

    def defines(cfg, per_channel=False):
        return dict(gc.delta_step_defines(16, 64, 128, 128, 16, cfg, 2, True, torch.float32, torch.float32, per_channel))

    with pytest.raises(ValueError, match="defer_count needs the step kernel in one launch; got small=False, one_launch=False"):
        defines(dataclasses.replace(cfg, one_launch=False))
    with pytest.raises(ValueError, match="defer_count needs the step kernel in one launch; got small=True"):
        defines(dataclasses.replace(cfg, small=True))
    assert defines(cfg)["DEFER_COUNT"] == 1 and defines(dataclasses.replace(cfg, one_launch=False), True)["DEFER_COUNT"] == 1
    assert cfg.label().endswith(",dc")
    ptx = [ptx_entry(gc.compile_delta_ptx(32, 32, 128, 128, 16, dataclasses.replace(cfg, defer_count=dc), 2,
                                          per_channel=True), "delta_replay_step") for dc in (False, True)]  # fmt: skip
    assert ptx[0] != ptx[1]


@pytest.mark.parametrize("state_bytes", [1, 2, 4])
@pytest.mark.parametrize("per_channel", [False, True])
def test_flush_first_needs_one_launch_and_orders_each_block(state_bytes, per_channel):
    """``flush_first``: the step kernel in one launch only, its define and label, the 32-byte meta
    in the shared memory the launcher sizes; with it the producer ballots each block's flushing
    units and each unit's place."""
    table = gc.delta_cuda_config(128, 128, 16, 16, state_bytes, per_channel=per_channel)
    cfg = dataclasses.replace(table, one_launch=True, flush_first=True)
    k_heads, v_heads = (32, 32) if per_channel else (16, 64)

    def defines(cfg, per_channel=per_channel):
        return dict(gc.delta_step_defines(k_heads, v_heads, 128, 128, 16, cfg, state_bytes, True, torch.float32,
                                          torch.float32, per_channel))  # fmt: skip

    if not per_channel:
        gdn_two = dataclasses.replace(cfg, one_launch=False, coef_warps=0, defer_count=False)
        with pytest.raises(
            ValueError, match="flush_first needs the step kernel in one launch; got small=False, one_launch=False"
        ):
            defines(gdn_two)
    assert defines(cfg)["FLUSH_FIRST"] == 1 and defines(dataclasses.replace(cfg, flush_first=False))["FLUSH_FIRST"] == 0
    assert "ff" in cfg.label().split(",")
    ptx = {ff: gc.compile_delta_ptx(k_heads, v_heads, 128, 128, 16, dataclasses.replace(cfg, flush_first=ff), state_bytes,
                                    per_channel=per_channel) for ff in (False, True)}  # fmt: skip
    for ff, p in ptx.items():
        compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", p).group(1))
        assert compiled == gc.delta_step_shared_bytes(128, cfg.rows, 16, cfg.stages, state_bytes, per_channel, True,
                                                      cfg.coef_warps, cfg.s0_mma, ff)  # fmt: skip
    ballots = {ff: ptx_entry(p, "delta_replay_step").count("vote.sync.ballot.b32") for ff, p in ptx.items()}
    assert ballots[True] >= ballots[False] + 3  # two blocks' orders (the first, the next 32) and each unit's lane


@pytest.mark.parametrize("L", [5, 16, 32])
@pytest.mark.parametrize("cfg", [
    gc.DeltaCudaConfig(rows=64, stages=2, min_ctas=3, one_launch=True),
    gc.DeltaCudaConfig(rows=128, stages=4, min_ctas=1, one_launch=True, coef_warps=4, flush_mma=True, coalesce_recs=True),
], ids=["consumers", "coef-warps"])  # fmt: skip
def test_rec_warps_need_gdn_in_one_launch_and_take_one_barrier(L, cfg):
    """``rec_warps``: GDN's step kernel in one launch only, its define and label; with it the
    coefficient pass holds one named barrier instead of two, and fewer shuffles (a reduce-scatter
    of each warp's records instead of 32 values a warp). Coefficient warps drop the last barrier
    of either form: each of their threads arrives on the stage's ready barrier instead."""
    rw = dataclasses.replace(cfg, rec_warps=True)

    def defines(cfg, per_channel=False):
        return dict(gc.delta_step_defines(16, 64, 128, 128, L, cfg, 2, True, torch.float32, torch.float32, per_channel))

    with pytest.raises(ValueError, match="rec_warps needs the step kernel in one launch; got small=False, one_launch=False"):
        defines(dataclasses.replace(rw, one_launch=False, coef_warps=0))
    with pytest.raises(
        ValueError, match=r"rec_warps takes GDN only \(KDA's scan runs down the columns\); got per_channel=True"
    ):
        defines(rw, per_channel=True)
    assert defines(rw)["REC_WARPS"] == 1 and defines(cfg)["REC_WARPS"] == 0
    assert rw.label().endswith(",rw") and not cfg.label().endswith(",rw")
    ptx = {c: ptx_entry(gc.compile_delta_ptx(16, 64, 128, 128, L, c, 2), "delta_replay_step") for c in (cfg, rw)}
    last = 0 if cfg.coef_warps else 1
    assert ptx[cfg].count("bar.sync 1,") == 1 + last and ptx[rw].count("bar.sync 1,") == last
    assert ptx[rw].count("shfl.sync") < ptx[cfg].count("shfl.sync")


@pytest.mark.parametrize(
    "state_bytes, batch, L", [(2, 1, 16), (2, 64, 16), (2, 256, 16), (1, 256, 16), (4, 16, 32), (2, 64, 32), (1, 64, 8)]
)
def test_consumer_sums_take_kda_with_coefficient_warps_and_drop_the_coefficient_barrier(state_bytes, batch, L):
    """``consumer_sums``: KDA's step kernel with coefficient warps and exact S0 products only, its
    define and label; with it the coefficient pass holds no named barrier (the table's build: one),
    the kernel compiles without local memory, and its consumers shuffle the scores they summed."""
    table = gc.delta_cuda_config(128, 128, L, batch, state_bytes, per_channel=True)
    table = dataclasses.replace(table, consumer_sums=False, s0_hfma2=False)  # the exact S0 products' coefficient pass
    assert table.coef_warps and not table.s0_mma
    cs = dataclasses.replace(table, consumer_sums=True)

    def defines(cfg, per_channel=True):
        return dict(
            gc.delta_step_defines(32, 32, 128, 128, L, cfg, state_bytes, True, torch.float32, torch.float32, per_channel)
        )

    assert defines(cs)["CONSUMER_SUMS"] == 1 and defines(table)["CONSUMER_SUMS"] == 0
    assert "cs" in cs.label().split(",") and "cs" not in table.label().split(",")
    refused = [(cs, False), (dataclasses.replace(cs, coef_warps=0), True)]
    if state_bytes == 2:
        refused.append((dataclasses.replace(cs, s0_mma=True), True))
    for cfg, per_channel in refused:
        with pytest.raises(ValueError, match="consumer_sums takes KDA's step kernel with coefficient warps"):
            defines(cfg, per_channel)
    ptx = {
        c: ptx_entry(gc.compile_delta_ptx(32, 32, 128, 128, L, c, state_bytes, True, True), "delta_replay_step")
        for c in (table, cs)
    }
    assert ptx[table].count("bar.sync 1,") == 1 and ptx[cs].count("bar.sync 1,") == 0
    assert ".local" not in ptx[cs]
    assert ptx[cs].count("shfl.sync") > ptx[table].count("shfl.sync")


def _waits_parity_xored(body: str) -> int:
    """How many of the entry's barrier waits take a parity an ``xor.b32`` computed."""
    xors = set(re.findall(r"xor\.b32\s+(%r\d+),", body))
    parities = re.findall(r"mbarrier\.try_wait\.parity\S* \w+, \[%r\d+\], (%r\d+);", body)
    assert parities
    return sum(p in xors for p in parities)


@pytest.mark.parametrize(
    "per_channel, state_bytes, batch, xored, ors, traps",
    [
        (False, 2, 16, 2, 25, 1),
        (False, 4, 16, 2, 25, 1),
        (True, 2, 16, 2, 25, 1),
        (True, 4, 16, 1, 20, 1),
        (False, 1, 63, 1, 10, 0),
    ],
    ids=["gdn-cw", "gdn-f32-cw", "kda-cw", "kda-consumers", "gdn-two-launches"],
)
def test_first_waits_are_tied_to_the_parameters(per_channel, state_bytes, batch, xored, ors, traps):
    """Each warp role's first wait depends on a zero computed from the parameters it reads after
    it (the sign of their OR: pointers and strides are never negative): the coefficient warps'
    records wait and the consumers' first wait take their parity XORed with it, and the producer
    of one launch traps on it before its programmatic wait (the step kernel's only trap). The table
    at batch 16: GDN bf16 and fp32 and KDA bf16 with coefficient warps (5 + 10 + 10 ORs: their 6
    strides, the consumers' 11, the producer's 11 parameters), KDA fp32 with the consumers forming
    the coefficients (10 + 10); at batch 63 GDN fp8 in two launches (the consumers' 10, no
    producer trap)."""
    k_heads, v_heads = (32, 32) if per_channel else (16, 64)
    cfg = gc.delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
    assert bool(cfg.coef_warps) == (xored == 2) and gc.step_kernel_in_one_launch(cfg, per_channel) == bool(traps)
    ptx = gc.compile_delta_ptx(k_heads, v_heads, 128, 128, 16, cfg, state_bytes, per_channel=per_channel)
    body = ptx_entry(ptx, "delta_replay_step")
    assert _waits_parity_xored(body) == xored
    assert body.count("or.b64") >= ors
    assert body.count("trap;") == traps


@pytest.mark.parametrize("state_bytes", [2, 4, 1], ids=["bf16", "fp32", "fp8"])
def test_small_kernel_touches_every_parameter_line_before_its_wait(state_bytes):
    """GDN's small kernel ORs one parameter of each 64-byte line of its parameter bank into a trap's
    condition before its griddepcontrol.wait (params_zero), the trap its only one. Fails with a
    line dropped from the OR or a second parameter of a line added."""
    cfg = gc.delta_cuda_config(128, 128, 16, 1, state_bytes)  # GDN at batch 1: the small kernel
    assert cfg.small
    ptx = gc.compile_delta_ptx(16, 64, 128, 128, 16, cfg, state_bytes)
    body = ptx_entry(ptx, "delta_replay_small")
    assert body[: body.index("griddepcontrol.wait")].count("trap;") == body.count("trap;") == 1
    kinds = ptx_params(ptx, "delta_replay_small")
    ored = params_ored_before_trap(ptx, "delta_replay_small")
    assert param_lines(kinds, ored) == param_lines(kinds, range(len(kinds))), sorted(ored)
    assert len(ored) == len(param_lines(kinds, ored))


@pytest.mark.parametrize(
    "form, L, batch",
    [("qg", 16, 256), ("qg", 16, 64), ("qg", 32, 256), ("h2", 16, 256), ("h2", 16, 64), ("h2", 16, 1), ("h2", 32, 256)],
)
def test_fp8_s0_forms_take_kda_fp8_with_normalised_vectors(form, L, batch):
    """KDA fp8's S0 product forms, on the table's build without the routed one: ``s0_qgmma`` (64- or
    128-row units, no consumer sums) and ``s0_hfma2`` (no consumer sums, not with ``s0_qgmma``), each
    with an fp8 checkpoint and L2-normalised q and k only, its define and label. ``qg``'s PTX targets
    sm_90a and holds a warpgroup's four wgmma products and the consumers' barrier over the B tile;
    ``h2``'s targets sm_90 and holds the consumers' 64 f16x2 FMAs (a lane's 64 columns, two
    vectors) and no tensor-core instruction; neither has local memory, and the table without them
    has neither."""
    field = {"qg": "s0_qgmma", "h2": "s0_hfma2"}[form]
    table = dataclasses.replace(gc.delta_cuda_config(128, 128, L, batch, 1, per_channel=True), s0_hfma2=False)
    cfg = dataclasses.replace(table, **{field: True})

    def defines(cfg, per_channel=True, state_bytes=1, l2norm=True):
        return dict(
            gc.delta_step_defines(32, 32, 128, 128, L, cfg, state_bytes, l2norm, torch.float32, torch.float32, per_channel)
        )

    assert defines(cfg)[field.upper()] == 1 and defines(table)[field.upper()] == 0
    assert form in cfg.label().split(",") and form not in table.label().split(",")
    refusals = [
        dict(cfg=cfg, per_channel=False),
        dict(cfg=cfg, state_bytes=2),
        dict(cfg=cfg, state_bytes=4),
        dict(cfg=cfg, l2norm=False),
        dict(cfg=dataclasses.replace(cfg, consumer_sums=True)),
        dict(cfg=dataclasses.replace(cfg, rows=32) if form == "qg" else dataclasses.replace(cfg, s0_qgmma=True, rows=128)),
    ]
    for kwargs in refusals:
        with pytest.raises(ValueError, match=f"{field} takes KDA's step kernel with an fp8 checkpoint"):
            defines(**kwargs)
    ptx = gc.compile_delta_ptx(32, 32, 128, 128, L, cfg, 1, True, True)
    body = ptx_entry(ptx, "delta_replay_step")
    if form == "qg":
        assert ".target sm_90a" in ptx
        assert body.count("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3") == 4
        assert body.count("bar.sync 2,") == 1
    else:
        assert ".target sm_90\n" in ptx
        assert body.count("fma.rn.f16x2") == 64 and "wgmma" not in body and "mma.sync" not in body
    assert ".local" not in body
    plain = ptx_entry(gc.compile_delta_ptx(32, 32, 128, 128, L, table, 1, True, True), "delta_replay_step")
    assert "wgmma" not in plain and "fma.rn.f16x2" not in plain


@pytest.mark.parametrize("batch", [24, 256])
@pytest.mark.parametrize("l2norm", [True, False])
def test_gdn_fp8_f16x2_s0_takes_the_two_launches(batch, l2norm):
    """GDN's ``s0_hfma2``: its two launches with an fp8 checkpoint, q and k normalised or raw; the
    step kernel's S0 products become a lane's 64 f16x2 FMAs in place of the tensor-core products,
    and without the flush's fold on tensor cores no tensor-core instruction is left. One launch
    (the table at batch 16), the small kernel and other checkpoints are refused."""
    table = gc.delta_cuda_config(128, 128, 16, batch, 1)
    assert not table.one_launch and not table.small and table.flush_mma and not table.s0_hfma2
    cfg = dataclasses.replace(table, s0_hfma2=True)
    assert (
        gc.s0_hfma2_fits(cfg, 1, False)
        and dict(gc.delta_step_defines(16, 64, 128, 128, 16, cfg, 1, l2norm, torch.float32, torch.float32))["S0_HFMA2"] == 1
    )
    for fold_mma in (True, False):
        ptx = gc.compile_delta_ptx(16, 64, 128, 128, 16, dataclasses.replace(cfg, flush_mma=fold_mma), 1, l2norm)
        body = ptx_entry(ptx, "delta_replay_step")
        assert body.count("fma.rn.f16x2") == 64 and ".local" not in body
        assert ("mma.sync" in body) == fold_mma
    plain = ptx_entry(gc.compile_delta_ptx(16, 64, 128, 128, 16, table, 1, l2norm), "delta_replay_step")
    assert "fma.rn.f16x2" not in plain and "mma.sync" in plain
    one = dataclasses.replace(gc.delta_cuda_config(128, 128, 16, 16, 1), s0_hfma2=True)
    small = dataclasses.replace(gc.delta_cuda_config(128, 128, 16, 1, 1), s0_hfma2=True)
    assert one.one_launch and small.small
    for cfg_, state_bytes in ((one, 1), (small, 1), (cfg, 2), (cfg, 4)):
        with pytest.raises(ValueError, match="s0_hfma2 takes .*GDN's in two launches with an fp8 checkpoint"):
            gc.delta_step_defines(16, 64, 128, 128, 16, cfg_, state_bytes, l2norm, torch.float32, torch.float32)


def _assert_one_launch_forms_refused(cfg, name, refused, k_heads, v_heads, state_bytes, per_channel):
    """Each (config, message) of ``refused`` raises that ValueError from delta_step_defines, and so
    do ``cfg`` (a form ``name`` of the step kernel in one launch) in GDN's two launches and in its
    small kernel."""
    if not per_channel:
        outside = f"{name} needs the step kernel in one launch"
        refused = refused + [
            (dataclasses.replace(cfg, one_launch=False, coef_warps=0, rec_warps=False), outside),
            (dataclasses.replace(cfg, small=True, coef_warps=0, rec_warps=False), outside),
        ]
    for bad, message in refused:
        with pytest.raises(ValueError, match=message):
            gc.delta_step_defines(
                k_heads, v_heads, 128, 128, 16, bad, state_bytes, True, torch.float32, torch.float32, per_channel
            )


@pytest.mark.parametrize("per_channel, state_bytes, batch", [(False, 4, 256), (False, 2, 256), (True, 1, 64), (True, 4, 256)])
def test_claimed_units_take_the_step_kernel_in_one_launch(per_channel, state_bytes, batch):
    """``claimed_units``: the table's one-launch builds with it (in place of flush_first,
    defer_count and dealt_units) compile without local memory, claim with a plain atomic and count
    each CTA once as 2^CLAIM_BITS, their shared memory (a 32-byte meta) matching the launcher's and
    the table's CTAs a multiprocessor still fitting; the two launches, the small kernel and the
    forms it replaces are refused, and a launch whose claims outgrow CLAIM_BITS too."""
    k_heads, v_heads = (32, 32) if per_channel else (16, 64)
    table = gc.delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
    cfg = dataclasses.replace(
        table, claimed_units=True, flush_first=False, defer_count=False, dealt_units=False, dealt_spread=False
    )
    defines = dict(
        gc.delta_step_defines(
            k_heads, v_heads, 128, 128, 16, cfg, state_bytes, True, torch.float32, torch.float32, per_channel
        )
    )
    assert defines["CLAIMED_UNITS"] == 1 and defines["DEALT_UNITS"] == defines["DEFER_COUNT"] == 0
    ptx = gc.compile_delta_ptx(k_heads, v_heads, 128, 128, 16, cfg, state_bytes, True, per_channel)
    body = ptx_entry(ptx, "delta_replay_step")
    assert ".local" not in body
    assert re.search(r"atom\.global\.add\.u32", body)  # the claims
    assert re.search(rf"atom\.acq_rel\.gpu\.global\.add\.s32\s+%r\d+, \[%rd\d+\], {1 << gc.CLAIM_BITS};", body)
    compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == gc.config_shared_bytes(cfg, 128, 16, state_bytes, per_channel)
    assert (compiled + SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= SMEM_PER_SM
    message = "claimed_units replaces flush_first, defer_count and dealt_units"
    refused = [
        (dataclasses.replace(cfg, flush_first=True), message),
        (dataclasses.replace(cfg, defer_count=True), message),
        (dataclasses.replace(cfg, dealt_units=True), message),
    ]
    _assert_one_launch_forms_refused(cfg, "claimed_units", refused, k_heads, v_heads, state_bytes, per_channel)
    limit = 1 << gc.CLAIM_BITS
    gc.check_claim_count(limit - 1 - 3 * 264, 264)
    with pytest.raises(
        ValueError, match=f"claimed_units counts fewer than 2\\^{gc.CLAIM_BITS} claims; got {limit - 792} units"
    ):
        gc.check_claim_count(limit - 3 * 264, 264)


@pytest.mark.parametrize("per_channel, state_bytes, batch", [(False, 4, 64), (False, 2, 16), (True, 1, 64), (True, 2, 256)])
def test_dealt_units_take_the_step_kernel_in_one_launch(per_channel, state_bytes, batch):
    """``dealt_units``: the table's one-launch builds with it (in place of flush_first and
    defer_count) compile without local memory, their shared memory (the order's 272 bytes after the
    mbarriers, a 32-byte meta) matching the launcher's and the table's CTAs a multiprocessor still
    fitting (GDN fp32 64: the table's own, its flush units spread); the two launches, the small
    kernel, the forms it replaces and ``dealt_spread`` without it are refused."""
    k_heads, v_heads = (32, 32) if per_channel else (16, 64)
    table = gc.delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
    cfg = dataclasses.replace(table, dealt_units=True, flush_first=False, defer_count=False, claimed_units=False)
    assert (
        dict(
            gc.delta_step_defines(
                k_heads, v_heads, 128, 128, 16, cfg, state_bytes, True, torch.float32, torch.float32, per_channel
            )
        )["DEALT_UNITS"]
        == 1
    )
    ptx = gc.compile_delta_ptx(k_heads, v_heads, 128, 128, 16, cfg, state_bytes, True, per_channel)
    body = ptx_entry(ptx, "delta_replay_step")
    assert ".local" not in body and "atom.acq_rel.gpu.global.add.s32" in body
    compiled = int(re.search(r"delta_step_shared_bytes = (\d+)", ptx).group(1))
    plain = dataclasses.replace(table, flush_first=False, dealt_units=False, dealt_spread=False, claimed_units=False)
    assert compiled == gc.config_shared_bytes(cfg, 128, 16, state_bytes, per_channel)
    assert compiled - gc.config_shared_bytes(plain, 128, 16, state_bytes, per_channel) in (
        gc.DEALT_ORDER_BYTES,
        gc.DEALT_ORDER_BYTES + 1024,
    )
    assert (compiled + SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= SMEM_PER_SM
    refused = [
        (dataclasses.replace(plain, dealt_spread=True), "dealt_spread places dealt_units' flush units"),
        (dataclasses.replace(cfg, flush_first=True), "dealt_units replaces flush_first and defer_count"),
        (dataclasses.replace(cfg, defer_count=True), "dealt_units replaces flush_first and defer_count"),
    ]
    _assert_one_launch_forms_refused(cfg, "dealt_units", refused, k_heads, v_heads, state_bytes, per_channel)
