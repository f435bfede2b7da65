"""The CUDA C++ Mamba-2 step on the CPU: NVRTC compiles every launch-table shape, the shared memory
the launcher allocates equals what the kernel indexes, the launcher packs exactly the kernels'
PTX parameters, and the route's refusals name their reason. (Running it needs an sm_90 GPU:
tests/gpu/test_mamba2_cuda_gpu.py.)"""

import dataclasses
import re

import pytest
import torch

from ptx_params import FP8_PTX, param_lines, params_ored_before_trap, ptx_entry, ptx_params
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc
from trtllm_replayssm.kernels.nvrtc import tensor_map_key
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step, replay_step_kernel

FLAGS = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=1, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)
SHAPES = [  # (nheads, ngroups, head_dim, d_state, L)
    (128, 8, 64, 128, 16),  # Nemotron-3-Super, TP=1
    (96, 8, 80, 128, 16),  # Nemotron-3-Nano
    (128, 1, 64, 128, 32),
    (128, 8, 64, 128, 8),
    (6, 3, 48, 64, 5),
    (4, 1, 128, 256, 1),
    (10, 2, 16, 192, 17),
    (14, 2, 32, 64, 16),  # 7 heads a group: warps with one and two heads
]


def _ptx(shape, batch=256, flags=FLAGS, state_bytes=2):
    nheads, ngroups, head_dim, d_state, L = shape
    cfg = mc.cuda_step_config(head_dim, d_state, L, batch, state_bytes)
    return mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, flags, state_bytes)


@pytest.mark.parametrize("batch", [16, 256], ids=["c16", "c4"])
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_every_shape_compiles_and_shared_memory_matches(shape, state_bytes, batch):
    _, _, head_dim, d_state, L = shape
    if mc.step_shared_bytes(head_dim, d_state, L, 2, state_bytes) + mc.SMEM_RESERVED_PER_CTA > mc.SMEM_PER_SM:
        pytest.skip("does not fit: test_oversized_stages_are_refused")
    cfg = mc.cuda_step_config(head_dim, d_state, L, batch, state_bytes)
    ptx = _ptx(shape, batch=batch, state_bytes=state_bytes)
    assert ".entry mamba2_replay_step(" in ptx and ".entry mamba2_replay_coefficients(" in ptx
    assert ".entry mamba2_replay_small(" in ptx
    compiled = int(re.search(r"mamba2_step_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == mc.step_shared_bytes(head_dim, d_state, L, cfg.stages, state_bytes)
    assert (compiled + mc.SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= mc.SMEM_PER_SM


@pytest.mark.parametrize("flags", [dict(FLAGS), dict(FLAGS, HAS_D=0, HAS_Z=0, HAS_DT_BIAS=0, DT_SOFTPLUS=0, DT_CODE=0),
                                   dict(FLAGS, D_PER_DIM=1, D_CODE=1, DTB_CODE=2, DT_CODE=2)])  # fmt: skip
def test_optional_inputs_and_dtypes_compile(flags):
    assert ".entry mamba2_replay_step(" in _ptx(SHAPES[0], flags=flags)


def _cpu_case(nheads=128, head_dim=64, d_state=128, ngroups=8, L=16, batch=4, slots=6):
    from trtllm_replayssm.cache import Mamba2ReplayCache

    c = Mamba2ReplayCache.allocate(
        slots, nheads, head_dim, d_state, ngroups, L, state_dtype=torch.bfloat16, act_dtype=torch.bfloat16, device="cpu"
    )
    x = torch.zeros(batch, nheads, head_dim, dtype=torch.bfloat16)
    B = torch.zeros(batch, ngroups, d_state, dtype=torch.bfloat16)
    return c, x, B


def test_launcher_packs_the_kernels_ptx_parameters():
    """Same count and widths, in order: a missing, extra or swapped-width argument fails."""
    c, x, B = _cpu_case()
    ptx = _ptx(SHAPES[0])
    dt = torch.zeros(4, 128)
    A = torch.zeros(128)
    slots = torch.zeros(4, dtype=torch.int32)
    coef = torch.zeros(8)
    args = mc.coefficient_args(coef, B, c.x_records, c.dt_records, c.B_records, c.cursor, x, dt, A, B, B, slots, None)
    widths = ["64" if k in ("ptr", "i64") else k for k in args.kinds]
    assert widths == ptx_params(ptx, "mamba2_replay_coefficients")
    maps = (b"\0" * 128, b"\0" * 128)
    args = mc.step_args(maps, coef, B, None, c.x_records, c.B_records, c.cursor, slots, None, None, x, x)
    widths = ["64" if k in ("ptr", "i64") else k for k in args.kinds]
    assert widths == ptx_params(ptx, "mamba2_replay_step")
    scale = torch.zeros(6, 128, 64)
    fp8 = mc.step_args(maps, coef, B, scale, c.x_records, c.B_records, c.cursor, slots, None, None, x, x)
    assert fp8.kinds == args.kinds and widths == ptx_params(_ptx(SHAPES[0], state_bytes=1), "mamba2_replay_step")
    small_inputs = (c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, x, dt, A, B, B, slots, None, None, None, x)
    args = mc.small_args(c.checkpoint, None, *small_inputs)
    widths = ["64" if k in ("ptr", "i64") else k for k in args.kinds]
    assert widths == ptx_params(ptx, "mamba2_replay_small")
    fp8 = mc.small_args(c.checkpoint, scale, *small_inputs)
    assert fp8.kinds == args.kinds and widths == ptx_params(_ptx(SHAPES[0], state_bytes=1), "mamba2_replay_small")


def test_launch_table():
    assert mc.cuda_step_config(64, 128, 16, 256) == mc.CudaStepConfig(stages=2, min_ctas=3, pdl=True, coef_warps=4)
    assert mc.cuda_step_config(64, 128, 16, 127).coef_warps == 16 and mc.cuda_step_config(64, 128, 16, 128).coef_warps == 4
    assert [mc.coefficient_split(h) for h in (1, 16, 17, 40, 128)] == [1, 1, 2, 3, 8]
    # The small one-launch kernel at batch 1-3 (bf16) and 1-4 (fp32). Batch 1: the most rows, a
    # multiple of 8 from 16 to 40, that tile head_dim, with the arithmetic before the barrier,
    # uncapped up to 32 rows and capped for two CTAs above. From batch 2: 32 rows where they tile
    # head_dim (else 16), capped at 64 registers where that does not spill.
    for batch, state_bytes, small in ((3, 2, True), (4, 2, False), (1, 4, True), (4, 4, True), (5, 4, False)):
        assert mc.cuda_step_config(64, 128, 16, batch, state_bytes).small == small, (batch, state_bytes)
    small = mc.CudaStepConfig(stages=2, min_ctas=1, pdl=True, small=True, small_rows=32, early_math=True)
    assert mc.cuda_step_config(64, 128, 16, 1, 2) == small == mc.cuda_step_config(64, 128, 16, 1, 4)
    for head_dim, batch, state_bytes, rows, ctas in ((64, 2, 2, 32, 4), (64, 4, 4, 32, 4), (96, 3, 2, 32, 4),
                                                     (80, 1, 2, 40, 2), (80, 1, 4, 40, 2), (80, 1, 1, 40, 2),
                                                     (48, 1, 2, 24, 1), (112, 1, 4, 16, 1), (128, 1, 2, 32, 1),
                                                     (80, 2, 4, 16, 1), (48, 2, 2, 16, 1)):  # fmt: skip
        cfg = mc.small_config(head_dim, 128, 16, batch, state_bytes)
        assert (cfg.small_rows, cfg.min_ctas, cfg.early_math) == (rows, ctas, batch == 1), (head_dim, batch, state_bytes)
    assert mc.small_config(64, 128, 32, 2, 2).min_ctas == mc.small_config(64, 256, 16, 2, 2).min_ctas == 1  # would spill
    # uncapped, the small kernel only up to batch 2 (L = 32: the two launches faster from 3 / 4)
    for batch, state_bytes, small in ((2, 2, True), (3, 2, False), (2, 4, True), (3, 4, False)):
        assert mc.cuda_step_config(64, 128, 32, batch, state_bytes).small == small, (batch, state_bytes)
    assert mc.cuda_step_config(80, 128, 16, 256).min_ctas == 2  # 3 CTAs of 6 warps: under 128 registers
    assert mc.cuda_step_config(64, 128, 32, 256).min_ctas == 3
    assert mc.cuda_step_config(128, 256, 32, 256).min_ctas == 1
    assert mc.cuda_step_config(64, 128, 16, 256, state_bytes=4).min_ctas == 2  # 2 stages of 40 KiB
    assert mc.coefficient_floats(16) == 36 and mc.coefficient_floats(17) == 68
    # fp8: bf16's rules (the small kernel at batch 1-3), 2 CTAs from L = 17 (3 spill the flush)
    assert mc.cuda_step_config(64, 128, 16, 1, 1) == mc.cuda_step_config(64, 128, 16, 1, 2)
    assert mc.cuda_step_config(64, 128, 16, 3, 1).small
    assert mc.cuda_step_config(64, 128, 16, 4, 1) == mc.CudaStepConfig(stages=2, min_ctas=3, pdl=True, coef_warps=16)
    assert mc.cuda_step_config(64, 128, 16, 256, 1).min_ctas == 3 and mc.cuda_step_config(64, 128, 17, 256, 1).min_ctas == 2
    # fp8 from FP8_DEEP_RING_BATCH: four stages where they fit as many CTAs as two
    deep = mc.FP8_DEEP_RING_BATCH
    assert mc.cuda_step_config(64, 128, 16, deep - 1, 1).stages == 2 and mc.cuda_step_config(64, 128, 16, deep, 1).stages == 4
    deep_ring = mc.CudaStepConfig(stages=4, min_ctas=2, pdl=True, coef_warps=4)
    assert mc.cuda_step_config(64, 128, 32, deep, 1) == deep_ring
    assert mc.cuda_step_config(128, 128, 32, deep, 1) == dataclasses.replace(deep_ring, min_ctas=1)
    assert mc.cuda_step_config(64, 128, 16, deep, 2).stages == 2
    # where the small kernel cannot read B or C, the launcher takes the table's two launches, not the
    # small kernel's register cap (which spilled the step kernel: 416 bytes at head_dim 128, fp8)
    for es in (1, 2):
        assert mc.two_launch_config(64, 128, 16, 2, es) == mc.cuda_step_config(64, 128, 16, 4, es)
        assert not mc.two_launch_config(128, 128, 16, 2, es).small
    assert mc.two_launch_config(128, 128, 16, 2, 1).min_ctas == mc.cuda_step_config(128, 128, 16, 64, 1).min_ctas
    # a stage of codes: 8 KiB less than bf16 rows, plus 256 B of row scales, within the 1 KiB rounding
    assert mc.step_shared_bytes(64, 128, 16, 1, 2) - mc.step_shared_bytes(64, 128, 16, 1, 1) == 8 * 1024


FP8_SHAPES = [s for s in SHAPES if s[3] == 128]


@pytest.mark.parametrize("batch", [1, 256], ids=["c16", "c4"])
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_fp8_checkpoints_compile_with_their_scales(shape, batch):
    """An fp8 checkpoint's kernel: shared memory as the launcher allocates it (the row scales in
    each stage), codes read exactly (e4m3 pairs to f16 pairs), the step kernel's S0 . C as f16
    tensor-core products (no bf16 product from the checkpoint rows: the codes are not bf16), the
    flush's codes rounded to nearest even with saturation, its scales from exact divisions and its
    quotients from a correctly rounded reciprocal (rcp.rn, Markstein's correction); the
    small kernel likewise (its S0 . C in fp32 FMAs). C reaches the step kernel as f16 times a
    power of two that the coefficient launch chooses."""
    nheads, ngroups, head_dim, d_state, L = shape
    cfg = mc.cuda_step_config(head_dim, d_state, L, batch, 1)
    ptx = mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, 1)
    small = ptx_entry(ptx, "mamba2_replay_small")
    assert all(op in small for op in FP8_PTX), [op for op in FP8_PTX if op not in small]
    compiled = int(re.search(r"mamba2_step_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == mc.step_shared_bytes(head_dim, d_state, L, cfg.stages, 1)
    assert (compiled + mc.SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= mc.SMEM_PER_SM
    step = ptx_entry(ptx, "mamba2_replay_step")
    assert all(op in step for op in FP8_PTX), [op for op in FP8_PTX if op not in step]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in step  # the flush's record products
    # S0 . C takes no bf16 tensor-core product: no A operand loaded from the checkpoint rows
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" not in step
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in step
    assert "cvt.rn.f16.f32" in ptx_entry(ptx, "mamba2_replay_coefficients")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx_entry(_ptx(shape), "mamba2_replay_step")


def test_fp8_checkpoints_have_no_tensorrt_aot_entries():
    """The AOT entries pass no row scales: the .cu file refuses to compile them for fp8 (the
    export refuses fp8 before that, plugins/mamba2_cuda.py), while bf16 compiles."""
    from trtllm_replayssm.kernels.nvrtc import compile_program

    nheads, ngroups, head_dim, d_state, L = FP8_SHAPES[0]
    cfg = dataclasses.replace(mc.cuda_step_config(head_dim, d_state, L, 256, 1), claimed_units=False)  # as the plugin's
    for entries in (1, 2):
        fp8 = dict(mc.step_defines(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, 1), AOT_ENTRIES=entries)
        with pytest.raises(RuntimeError, match="AOT entries take bf16 checkpoints"):
            compile_program(mc.SOURCE, "sm_90a", tuple(sorted(fp8.items())), "ptx")
        bf16 = dict(mc.step_defines(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, 2), AOT_ENTRIES=entries)
        assert b"_aot" in compile_program(mc.SOURCE, "sm_90a", tuple(sorted(bf16.items())), "ptx")


def test_small_inputs_unsupported_names_the_tensor():
    _, _, B = _cpu_case(batch=2)
    assert mc.small_inputs_unsupported(B, B) is None
    odd = torch.zeros(2, 8, 129, dtype=torch.bfloat16)[..., 1:]  # rows 2 bytes off 16-byte alignment
    assert "B strides" in mc.small_inputs_unsupported(odd, B)
    assert "C strides" in mc.small_inputs_unsupported(B, odd)


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(state=torch.float16), "checkpoint torch.float16"),
        (dict(act=torch.float16), "activations torch.float16"),
        (dict(head_dim=72), "head_dim 72"),
        (dict(head_dim=144), "head_dim 144"),
        (dict(d_state=96), "d_state 96"),
        (dict(L=33), "L 33"),
    ],
)
def test_shape_refusals_name_their_reason(change, reason):
    from trtllm_replayssm.cache import Mamba2ReplayCache

    kw = dict(head_dim=64, d_state=128, L=16, state=torch.bfloat16, act=torch.bfloat16) | change
    c = Mamba2ReplayCache.allocate(
        3, 4, kw["head_dim"], kw["d_state"], 2, kw["L"], state_dtype=kw["state"], act_dtype=kw["act"], device="cpu"
    )
    x = torch.zeros(2, 4, kw["head_dim"], dtype=kw["act"])
    assert reason in mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x)


def test_oversized_stages_are_refused():
    from trtllm_replayssm.cache import Mamba2ReplayCache

    c = Mamba2ReplayCache.allocate(2, 2, 128, 256, 1, 4, state_dtype=torch.float32, act_dtype=torch.bfloat16, device="cpu")
    x = torch.zeros(1, 2, 128, dtype=torch.bfloat16)
    assert "do not fit a multiprocessor" in mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x)


def test_fp8_refusals_name_their_reason():
    from trtllm_replayssm.cache import Mamba2ReplayCache

    fp8 = torch.float8_e4m3fn
    c = Mamba2ReplayCache.allocate(3, 4, 64, 128, 2, 16, state_dtype=fp8, act_dtype=torch.bfloat16, device="cpu")
    x = torch.zeros(2, 4, 64, dtype=torch.bfloat16)
    assert mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x, c.checkpoint_scale) is None
    assert "fp8 checkpoint without checkpoint_scale" in mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x)
    spread = torch.zeros(3, 4, 65)[..., 1:]
    assert "fp8 checkpoint_scale strides" in mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x, spread)
    for bad in (torch.zeros(3, 4, 64, dtype=torch.bfloat16), torch.zeros(2, 4, 64)):  # dtype; slots
        reason = mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x, bad)
        assert f"fp8 checkpoint_scale {bad.dtype} {tuple(bad.shape)}; expected fp32 (3, 4, 64)" in reason
    c64 = Mamba2ReplayCache.allocate(3, 4, 64, 64, 2, 16, state_dtype=fp8, act_dtype=torch.bfloat16, device="cpu")
    reason = mc.cuda_shape_unsupported(c64.checkpoint, c64.x_records, c64.B_records, x, c64.checkpoint_scale)
    assert "d_state 64 with an fp8 checkpoint" in reason


def test_misaligned_records_are_refused():
    c, x, _ = _cpu_case()
    xr = torch.zeros(6 * 128 * 16 * 64 + 1, dtype=torch.bfloat16)[1:].view(6, 128, 16, 64)
    assert "x_records base or strides" in mc.cuda_shape_unsupported(c.checkpoint, xr, c.B_records, x)
    assert mc.cuda_shape_unsupported(c.checkpoint, c.x_records, c.B_records, x) is None
    spread = torch.zeros(6, 128, 16, 72, dtype=torch.bfloat16)[..., :64]
    assert "x_records positions 72 elements apart" in mc.cuda_shape_unsupported(c.checkpoint, spread, c.B_records, x)


def test_cpu_tensors_route_to_triton_and_cuda_is_refused_with_the_reason():
    c, x, B = _cpu_case(batch=4)
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x) == "triton"
    with pytest.raises(ValueError, match=r"mamba2_replay_step \(CUDA\): not a CUDA tensor"):
        launch_mamba2_replay_step(
            c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, x, torch.zeros(x.shape[:2]),
            torch.zeros(128), B, B, slot_ids=torch.zeros(4, dtype=torch.int32), out=x, kernel="cuda",
        )  # fmt: skip
    with pytest.raises(ValueError, match="kernel is 'cutlass'"):
        launch_mamba2_replay_step(
            c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, x, torch.zeros(x.shape[:2]),
            torch.zeros(128), B, B, slot_ids=torch.zeros(4, dtype=torch.int32), out=x, kernel="cutlass",
        )  # fmt: skip


def test_nvrtc_compile_error_carries_the_log(tmp_path, monkeypatch):
    from trtllm_replayssm.kernels import nvrtc

    monkeypatch.setattr(nvrtc, "_SOURCE_DIR", str(tmp_path))
    (tmp_path / "bad.cu").write_text('extern "C" __global__ void k() { undeclared_thing(); }\n')
    with pytest.raises(RuntimeError, match="undeclared_thing"):
        nvrtc.compile_program("bad.cu", "sm_90", ())


def test_tensor_map_key_tells_apart_dtypes_at_one_address():
    """A freed bf16 checkpoint's address handed to an fp32 one must not find the bf16 maps."""
    raw = torch.zeros(2 * 3 * 16 * 64, dtype=torch.float32)
    f32 = raw.view(2, 3, 16, 64)
    bf16 = raw[: raw.numel() // 2].view(torch.bfloat16)[: 2 * 3 * 16 * 64].view(2, 3, 16, 64)
    assert f32.data_ptr() == bf16.data_ptr() and f32.shape == bf16.shape and f32.stride() == bf16.stride()
    assert tensor_map_key(f32) != tensor_map_key(bf16)
    assert tensor_map_key(f32) == tensor_map_key(f32.view(2, 3, 16, 64))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_fp32_s0c_takes_no_tf32_products(shape):
    """An fp32 checkpoint's S0 . C is formed in exact fp32 FMAs (kernel notes, session 18): no
    TF32 tensor-core product anywhere in the step kernel; the flush keeps its bf16 three-part
    products, and a bf16 checkpoint its bf16 S0 . C products."""
    nheads, ngroups, head_dim, d_state, L = shape
    tf32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    bf16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    for es in (2, 4):
        if mc.step_shared_bytes(head_dim, d_state, L, 2, es) + mc.SMEM_RESERVED_PER_CTA > mc.SMEM_PER_SM:
            continue  # does not fit: test_oversized_stages_are_refused
        cfg = mc.cuda_step_config(head_dim, d_state, L, 256, es)
        step = ptx_entry(mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, es), "mamba2_replay_step")
        assert tf32 not in step and bf16 in step, es
        if es == 4:
            assert "ld.shared.v4.f32" in step  # four checkpoint columns a load


def test_coefficient_grid_waits_for_the_previous_kernel_before_anything():
    """The coefficient kernel's first global access and its trigger for the step kernel come after
    its griddepcontrol.wait (with ``pdl`` it is launched programmatically after the previous
    kernel in the stream, whose writes it and the step kernel's early reads must see); the step
    kernel triggers the next coefficient grid at its start."""
    nheads, ngroups, head_dim, d_state, L = SHAPES[0]
    cfg = mc.cuda_step_config(head_dim, d_state, L, 256)
    assert cfg.pdl and not cfg.small
    ptx = mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS)
    body = ptx_entry(ptx, "mamba2_replay_coefficients")
    wait = body.index("griddepcontrol.wait")
    assert wait < body.index("griddepcontrol.launch_dependents")
    assert wait < body.index("ld.global")
    step = ptx_entry(ptx, "mamba2_replay_step")
    assert step.index("griddepcontrol.launch_dependents") < step.index("ld.global")


@pytest.mark.parametrize("state_bytes", [2, 4, 1], ids=["bf16", "fp32", "fp8"])
@pytest.mark.parametrize("rows", [16, 32, 64])
@pytest.mark.parametrize("early", [False, True], ids=["late", "early"])
def test_small_kernel_loads_the_cache_before_any_branch(rows, state_bytes, early):
    """The small kernel's cache loads (cursor, checkpoint chunks (fp8: and the row's scale), B, x and dt records) are
    predicated on the slot, not behind a branch, and all precede the barrier; no return before
    it (session 19: behind the padding-row branch, NVVM sank ~140 instructions of index
    arithmetic between the slot's arrival and these loads)."""
    nheads, ngroups, head_dim, d_state, L = SHAPES[0]
    cfg = mc.CudaStepConfig(stages=2, min_ctas=1, pdl=True, small=True, small_rows=rows, early_math=early)
    body = ptx_entry(
        mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, state_bytes), "mamba2_replay_small"
    )
    assert f".maxntid {8 * rows}, 1, 1" in body
    # the head's weights (a warp scan of shuffles) before the barrier only with the early arithmetic
    assert ("shfl.sync.down" in body[: body.index("bar.sync")]) == early
    head = body[: body.index("bar.sync")]
    chunks = d_state * state_bytes // 128
    # cursor + checkpoint chunks (+ an fp8 row's scale) + B records (one 16-record round of d_state
    # / 64 chunks) + x + dt
    assert head.count("@q ld.global") == 1 + chunks + (state_bytes == 1) + d_state // 64 + 1 + 1
    assert "ret;" not in head


@pytest.mark.parametrize("state_bytes", [2, 4, 1], ids=["bf16", "fp32", "fp8"])
@pytest.mark.parametrize("min_ctas,early", [(1, True), (4, False)], ids=["m1-early", "m4"])
def test_small_kernel_touches_every_parameter_line_before_its_wait(min_ctas, early, state_bytes):
    """Before its griddepcontrol.wait the small kernel ORs one parameter of each 64-byte line of its
    parameter bank into a trap's condition (params_zero), so that the bank's misses overlap the
    wait (session 56): the parameters in that OR cover every line the parameters occupy."""
    nheads, ngroups, head_dim, d_state, L = SHAPES[0]
    cfg = mc.CudaStepConfig(stages=2, min_ctas=min_ctas, pdl=True, small=True, small_rows=32, early_math=early)
    ptx = mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, state_bytes)
    kinds = ptx_params(ptx, "mamba2_replay_small")
    body = ptx_entry(ptx, "mamba2_replay_small")
    assert body[: body.index("griddepcontrol.wait")].count("trap;") == 1
    ored = params_ored_before_trap(ptx, "mamba2_replay_small")
    assert param_lines(kinds, ored) == param_lines(kinds, range(len(kinds))), sorted(ored)
    assert len(ored) == len(param_lines(kinds, ored))  # one a line: the form for four CTAs spills with more


@pytest.mark.parametrize("rows,head_dim", [(8, 64), (12, 48), (136, 136), (32, 80), (40, 96)])
def test_small_rows_that_do_not_tile_the_head_are_refused(rows, head_dim):
    cfg = mc.CudaStepConfig(stages=2, min_ctas=1, pdl=True, small=True, small_rows=rows)
    with pytest.raises(
        ValueError, match=rf"small_rows {rows}; expected a multiple of 8 from 16 to 128 dividing head_dim {head_dim}"
    ):
        mc.step_defines(8, 1, head_dim, 128, 16, cfg, FLAGS)


@pytest.mark.parametrize("rows,head_dim", [(40, 80), (80, 80), (128, 128), (24, 48)])
def test_small_rows_any_multiple_of_8_that_tiles_the_head(rows, head_dim):
    """One CTA a head for head_dim that is no power of two (Nano: 80; GPU-tested as the form
    ``small-head``), or any multiple of 8 rows that tiles it."""
    cfg = mc.CudaStepConfig(stages=2, min_ctas=1, pdl=True, small=True, small_rows=rows)
    assert ("SM_ROWS", rows) in mc.step_defines(8, 1, head_dim, 128, 16, cfg, FLAGS)


@pytest.mark.parametrize("state_bytes", [1, 2, 4], ids=["fp8", "bf16", "fp32"])
def test_claimed_units_compile_and_only_they_claim(state_bytes):
    """``claimed_units`` (the table's at CLAIMED_UNITS_BATCHES): the step kernel claims units with
    global atomics (the count after the coefficient blocks, which the coefficient launch zeroes);
    without it the kernel claims nothing; shared memory the same either way."""
    nheads, ngroups, head_dim, d_state, L = SHAPES[0]
    table = mc.cuda_step_config(head_dim, d_state, L, 64, state_bytes)
    assert table.claimed_units
    for cfg, claims in ((table, True), (dataclasses.replace(table, claimed_units=False), False)):
        ptx = mc.compile_step_ptx(nheads, ngroups, head_dim, d_state, L, cfg, FLAGS, state_bytes)
        assert ("atom.global.add" in ptx_entry(ptx, "mamba2_replay_step")) == claims
        compiled = int(re.search(r"mamba2_step_shared_bytes = (\d+)", ptx).group(1))
        assert compiled == mc.step_shared_bytes(head_dim, d_state, L, cfg.stages, state_bytes)


def test_claimed_units_from_their_batch_and_refused_where_they_cannot_run():
    """The table claims at CLAIMED_UNITS_BATCHES (40-255) only; the small kernel (no ring) and the TensorRT AOT
    entries (the static order; the plugin builds its own configuration) refuse claimed units."""
    from trtllm_replayssm.kernels.nvrtc import compile_program

    nheads, ngroups, head_dim, d_state, L = SHAPES[0]
    for es in (1, 2, 4):
        claims = [mc.cuda_step_config(head_dim, d_state, L, b, es).claimed_units for b in (39, 40, 255, 256, 512)]
        assert claims == [False, True, True, False, False], (es, claims)
    small = dataclasses.replace(mc.small_config(64, 128, 16, 2, 2), claimed_units=True)
    with pytest.raises(ValueError, match=r"mamba2_replay_step \(CUDA\): claimed_units needs the two launches"):
        mc.step_defines(nheads, ngroups, head_dim, d_state, L, small, FLAGS)
    claimed = dataclasses.replace(mc.cuda_step_config(head_dim, d_state, L, 256), claimed_units=True)
    aot = dict(mc.step_defines(nheads, ngroups, head_dim, d_state, L, claimed, FLAGS), AOT_ENTRIES=2)
    with pytest.raises(RuntimeError, match="AOT entries take the static unit order"):
        compile_program(mc.SOURCE, "sm_90a", tuple(sorted(aot.items())), "ptx")
