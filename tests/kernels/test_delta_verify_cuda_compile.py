"""The CUDA C++ GDN verify on the CPU: NVRTC compiles every shape and window size without spills,
the shared memory, coefficient blocks and u rows the launcher allocates equal what the kernels
index, the launcher packs exactly the kernels' PTX parameters, and the refusals name their reason.
(Running it needs an sm_90 GPU: tests/gpu/test_delta_verify_cuda_gpu.py; its arithmetic is
modelled in tests/kernels/test_delta_verify_cuda_logic.py.)"""

import os
import re
import sys
from functools import partial

import pytest
import torch

from ptx_params import ptx_entry, ptx_params
from trtllm_replayssm.kernels import gated_delta_verify_cuda as vc
from trtllm_replayssm.kernels.gated_delta_verify import gated_delta_verify_kernel, launch_gated_delta_replay_verify
from trtllm_replayssm.kernels.nvrtc import SMEM_PER_SM, SMEM_RESERVED_PER_CTA, compile_program

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from kernel_resources import _cubin_resources  # noqa: E402

SHAPES = [  # (k_heads, v_heads, head_k_dim, head_v_dim, L, T)
    (16, 64, 128, 128, 20, 4),  # Qwen3.5-122B, TP=1, B = 16
    (16, 32, 128, 128, 18, 2),  # Qwen3.5-4B
    (16, 64, 128, 128, 24, 8),
    (16, 64, 128, 128, 17, 1),
    (2, 6, 64, 48, 7, 2),
    (1, 2, 256, 32, 29, 5),
    (4, 4, 64, 64, 32, 3),  # one value head a key head
]


KDA_SHAPES = [  # one value head per key head
    (32, 32, 128, 128, 20, 4),  # Kimi Linear, TP=1, B = 16
    (32, 32, 128, 128, 24, 8),  # fp32: capped at 128 registers
    (32, 32, 128, 128, 22, 6),
    (32, 32, 128, 128, 17, 1),
    (32, 32, 128, 128, 18, 2),
    (3, 3, 64, 48, 7, 2),
    (1, 1, 256, 32, 29, 5),
    (1, 1, 256, 32, 19, 3),
]
CASES = [(shape, False) for shape in SHAPES] + [(shape, True) for shape in KDA_SHAPES]


def _defines(shape, state_bytes, has_num_tokens=True, per_channel=False):
    hk, hv, dk, dv, L, T = shape
    cfg = vc.delta_verify_cuda_config(dk, dv, L, T, state_bytes, per_channel)
    return cfg, vc.delta_verify_defines(
        hk, hv, dk, dv, L, T, cfg, state_bytes, True, torch.float32, torch.bfloat16, has_num_tokens, per_channel
    )


@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    "shape, per_channel", CASES, ids=lambda c: "-".join(map(str, c)) if isinstance(c, tuple) else ("kda" if c else "gdn")
)
def test_every_shape_compiles_without_spills_and_sizes_match(shape, per_channel, state_bytes):
    _, _, dk, dv, L, T = shape
    cfg, defines = _defines(shape, state_bytes, per_channel=per_channel)
    ptx = compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()
    assert ".entry delta_verify_step(" in ptx
    assert (".entry delta_verify_coefficients(" in ptx) == (not cfg.fused)  # fused: the step kernel's own warps
    compiled = int(re.search(r"delta_verify_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == vc.delta_verify_shared_bytes(dk, cfg.rows, L, T, cfg.stages, state_bytes, per_channel, cfg.fused)
    assert (compiled + SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= SMEM_PER_SM
    floats = int(re.search(r"delta_verify_coefficient_floats = (\d+)", ptx).group(1))
    assert floats == vc.delta_verify_coefficient_floats(L, T, dk, per_channel) and floats % 4 == 0
    assert int(re.search(r"delta_verify_qk_pitch = (\d+)", ptx).group(1)) == vc.delta_verify_qk_pitch(dk, state_bytes)
    coef_smem = re.search(r"delta_verify_coef_shared_bytes = (\d+)", ptx)
    assert int(coef_smem.group(1) if coef_smem else 0) == vc.delta_verify_coef_shared_bytes(dk, L, T, per_channel)
    for name, regs, stack, static, local in _cubin_resources(compile_program(vc.SOURCE, "sm_90", defines)):
        assert stack + local == 0, (name, regs, stack, local)
        forms_kda_coefficients = per_channel and name == ("delta_verify_step" if cfg.fused else "delta_verify_coefficients")
        coef_static = vc.delta_verify_coef_static_bytes(dk, T) if forms_kda_coefficients else 0
        if name == "delta_verify_step" or per_channel:
            assert static == SMEM_RESERVED_PER_CTA + coef_static, (name, static)


@pytest.mark.parametrize(
    "shape, state_bytes, rows",
    [
        ((32, 32, 128, 128, 20, 4), 2, 128),  # bf16 checkpoints take 64-row units by the rule
        ((32, 32, 128, 128, 18, 2), 2, 128),
        ((3, 3, 64, 48, 8, 3), 4, 48),
    ],
)
def test_forced_one_launch_configs_compile_without_spills(shape, state_bytes, rows):
    """KDA in one launch where the GPU tests force it (tests/gpu: long runs, CUDA graphs)."""
    hk, hv, dk, dv, L, T = shape
    cfg = vc.DeltaVerifyCudaConfig(rows, 2, 1, fused=True)
    defines = vc.delta_verify_defines(hk, hv, dk, dv, L, T, cfg, state_bytes, True, torch.float32, torch.bfloat16, True, True)
    ptx = compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()
    compiled = int(re.search(r"delta_verify_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == vc.delta_verify_shared_bytes(dk, rows, L, T, 2, state_bytes, True, True)
    for name, regs, stack, static, local in _cubin_resources(compile_program(vc.SOURCE, "sm_90", defines)):
        assert (name, stack + local) == ("delta_verify_step", 0), (name, regs, stack, local)
        assert static == SMEM_RESERVED_PER_CTA + vc.delta_verify_coef_static_bytes(dk, T)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_fp32_s0_products_load_a_by_ldmatrix_and_split_in_integer_ops(per_channel):
    """An fp32 checkpoint from T = 4 (three TF32 products): the checkpoint's A fragments come from
    one ldmatrix.x4 a k step (head_k_dim / 8 a unit, none else untransposed), and no TF32 split goes
    through cvt.rna.tf32.f32, which NVRTC compiles to four instructions (kernel notes, session 57)."""
    shape = KDA_SHAPES[0] if per_channel else SHAPES[0]
    _, defines = _defines(shape, 4, per_channel=per_channel)
    ptx = compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()
    step = ptx_entry(ptx, "delta_verify_step")
    assert step.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == shape[2] // 8
    assert "cvt.rna.tf32" not in ptx


@pytest.mark.parametrize(
    "head_k_dim, L, T, per_channel, state_bytes, ctas",
    [
        (128, 20, 4, True, 4, 8),  # Kimi Linear, B = 16: 64 registers a thread
        (128, 18, 2, True, 2, 8),
        (64, 7, 2, True, 4, 16),
        (256, 19, 3, True, 2, 4),
        (128, 21, 4, True, 4, 4),  # longer record buffers spill under 64: 128 with an fp32 checkpoint
        (128, 21, 4, True, 2, 1),
        (128, 24, 8, True, 4, 4),  # T = 8 takes 150-203 registers uncapped
        (128, 24, 8, True, 2, 1),  # bf16: T = 8 spills under 128
        (128, 9, 8, True, 4, 1),
        (64, 24, 8, True, 4, 1),
        (128, 20, 4, False, 4, 1),  # GDN's coefficient CTA: a warp a value head, uncapped
    ],
)
def test_coefficient_register_cap(head_k_dim, L, T, per_channel, state_bytes, ctas):
    assert vc.coefficient_min_ctas(head_k_dim, L, T, per_channel, state_bytes) == ctas


def test_kda_compiles_only_with_one_value_head_per_key_head():
    with pytest.raises(RuntimeError, match="one value head per key head"):
        _defines_ptx = _defines((16, 32, 128, 128, 20, 4), 2, per_channel=True)[1]
        compile_program(vc.SOURCE, "sm_90", _defines_ptx, "ptx")


@pytest.mark.parametrize("has_num_tokens", [True, False])
def test_without_num_tokens_and_l2norm_compiles(has_num_tokens):
    hk, hv, dk, dv, L, T = SHAPES[0]
    cfg = vc.delta_verify_cuda_config(dk, dv, L, T, 2)
    defines = vc.delta_verify_defines(hk, hv, dk, dv, L, T, cfg, 2, False, torch.bfloat16, torch.float16, has_num_tokens)
    assert ".entry delta_verify_step(" in compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()


def _cpu_case(shape=SHAPES[0], batch=4, slots=6, per_channel=False):
    from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache

    hk, hv, dk, dv, L, T = shape
    cls = KDAReplayCache if per_channel else GDNReplayCache
    c = cls.allocate(slots, hk, hv, dk, dv, L, state_dtype=torch.float32, record_dtype=torch.bfloat16, device="cpu")
    q = torch.zeros(batch, T, hk, dk, dtype=torch.bfloat16)
    v = torch.zeros(batch, T, hv, dv, dtype=torch.bfloat16)
    g = torch.zeros((batch, T, hv, dk) if per_channel else (batch, T, hv))
    return c, q, v, g, torch.zeros(batch, T, hv)


def test_launcher_packs_the_kernels_ptx_parameters():
    """Same count and widths, in order: a missing, extra or swapped-width argument fails."""
    c, q, v, g, beta = _cpu_case()
    ptx = compile_program(vc.SOURCE, "sm_90", _defines(SHAPES[0], 2)[1], "ptx").decode()
    slots = torch.zeros(4, dtype=torch.int32)
    coef = torch.zeros(8)
    args = vc.coefficient_args(
        coef, coef, coef, c.k_records, c.g_records, c.cursor, c.pending, q, q, g, beta, slots, None, 0.1
    )
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_verify_coefficients")
    maps = (b"\0" * 128, b"\0" * 128)
    args = vc.step_args(maps, coef, coef, coef, c.d_records, v, v, slots, None, c.cursor)
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_verify_step")


def test_launcher_packs_the_fused_kernels_ptx_parameters():
    """KDA in one launch: the step kernel's parameters, then the coefficients' (COEF_PARAMS)."""
    ck, qk, vk, gk, beta = _cpu_case(shape=KDA_SHAPES[0], per_channel=True)
    cfg, defines = _defines(KDA_SHAPES[0], 4, per_channel=True)
    assert cfg.fused
    ptx = compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()
    slots = torch.zeros(4, dtype=torch.int32)
    args = vc.fused_step_args(
        (b"\0" * 128, b"\0" * 128), ck.d_records, vk, vk, slots, None, ck.cursor, ck.k_records, ck.g_records, ck.pending,
        qk, qk, gk, beta, 0.1,
    )  # fmt: skip
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "delta_verify_step")


def test_launch_rule_and_block_sizes():
    assert vc.delta_verify_cuda_config(128, 128, 20, 4, 2) == vc.DeltaVerifyCudaConfig(rows=64, stages=2, min_ctas=3)
    assert vc.delta_verify_cuda_config(128, 128, 20, 4, 4) == vc.DeltaVerifyCudaConfig(rows=64, stages=2, min_ctas=2)
    # fp32, T = 8: two stages of 64 rows fit one CTA (4 consumer warps), of 128 rows one CTA of 8
    assert vc.delta_verify_cuda_config(128, 128, 24, 8, 4) == vc.DeltaVerifyCudaConfig(rows=128, stages=2, min_ctas=1)
    assert vc.delta_verify_cuda_config(128, 128, 24, 8, 2) == vc.DeltaVerifyCudaConfig(rows=64, stages=2, min_ctas=3)
    assert vc.delta_verify_cuda_config(64, 48, 7, 2, 2).rows == 48  # neither 64 nor 128 tiles 48
    # KDA in one launch where a unit spans every value row, T <= 4 and the scratch fits: Kimi Linear
    # fp32 at L = 20 (T = 4) and 17 (T = 1); not at L = 32 (U's 31 rows do not fit), T = 8, or bf16
    # (64-row units)
    fused = vc.DeltaVerifyCudaConfig(rows=128, stages=2, min_ctas=1, fused=True)
    assert vc.delta_verify_cuda_config(128, 128, 20, 4, 4, True) == fused
    assert vc.delta_verify_cuda_config(128, 128, 17, 1, 4, True) == fused
    assert not vc.delta_verify_cuda_config(128, 128, 32, 4, 4, True).fused
    assert not vc.delta_verify_cuda_config(128, 128, 24, 8, 4, True).fused
    assert vc.delta_verify_cuda_config(128, 128, 20, 4, 2, True) == vc.DeltaVerifyCudaConfig(rows=64, stages=2, min_ctas=2)
    assert not vc.delta_verify_cuda_config(128, 128, 20, 4, 4).fused  # GDN: two launches
    # ... from 6 units a multiprocessor: Kimi Linear's 32 heads at batch 25 on 132 (batch 16 lost 5%)
    kimi = partial(vc.delta_verify_cuda_config, 128, 128, 20, 4, 4, True, multiprocessors=132)
    assert not kimi(heads=24 * 32).fused and kimi(heads=25 * 32).fused and kimi(heads=None).fused
    # hk, hq [32][4], A, Q [4][4], wk, wq, beta [4], wgt [32], E0, w, n -> 363, rounded to 364
    assert vc.delta_verify_coefficient_floats(20, 4) == 2 * 128 + 2 * 16 + 12 + 32 + 3 + 1
    assert vc.delta_verify_coefficient_floats(16, 8) == 2 * 128 + 2 * 64 + 24 + 16 + 4
    assert vc.delta_verify_qk_pitch(128, 4) == 528
    fused = vc.DeltaVerifyCudaConfig(128, 2, 1, fused=True)
    kw = dict(g_dtype=torch.float32, beta_dtype=torch.float32, has_num_tokens=True)
    assert ("FUSED_COEF", 1) in vc.delta_verify_defines(32, 32, 128, 128, 20, 4, fused, 4, True, per_channel=True, **kw)
    for args, per_channel in (
        ((32, 32, 128, 128, 32, 4), True),
        ((32, 32, 128, 128, 24, 8), True),
        ((16, 64, 128, 128, 20, 4), False),
    ):
        with pytest.raises(ValueError, match="config fused=True; expected KDA units of every value row"):
            vc.delta_verify_defines(*args, fused, 4, True, per_channel=per_channel, **kw)
    with pytest.raises(ValueError, match="rows 48; expected a multiple of 16 up to 128 dividing head_v_dim 128"):
        vc.delta_verify_defines(
            16, 64, 128, 128, 20, 4, vc.DeltaVerifyCudaConfig(48, 2, 1), 2, True, torch.float32, torch.float32, True
        )


def test_shape_refusals_name_their_reason():
    c, q, v, g, beta = _cpu_case()
    assert vc.delta_verify_shape_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) is None
    assert vc.delta_verify_cuda_unsupported(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) == \
        "not a CUDA tensor"  # fmt: skip
    ck, qk, vk, gk, _ = _cpu_case(per_channel=True)
    assert "KDA with 4 value heads per key head; the CUDA verify takes one" in vc.delta_verify_shape_unsupported(
        ck.checkpoint, ck.d_records, ck.k_records, ck.g_records, qk, qk, vk, gk
    )
    c9, q9, v9, g9, _ = _cpu_case(shape=(16, 64, 128, 128, 32, 9))
    assert vc.delta_verify_shape_unsupported(c9.checkpoint, c9.d_records, c9.k_records, c9.g_records, q9, q9, v9, g9) \
        == "T 9; the CUDA verify takes T <= 8"  # fmt: skip
    assert vc.record_offset_unsupported("k_records", 20, 128) is None  # the caches' stride: head_k_dim
    assert vc.record_offset_unsupported("g_records", 32, 2**26) is None  # 31 x 2^26 < 2^31
    assert vc.record_offset_unsupported("g_records", 33, 2**26) == (  # 32 x 2^26 = 2^31
        "g_records position stride 67108864: 32 positions past a 32-bit offset"
    )
    q_odd = torch.zeros(4, 4, 16, 130, dtype=torch.bfloat16)[..., :128]  # rows 260 bytes apart
    assert "q base or strides" in vc.delta_verify_shape_unsupported(
        c.checkpoint, c.d_records, c.k_records, c.g_records, q_odd, q, v, g
    )


def test_cpu_tensors_take_triton_and_cuda_is_refused_with_the_reason():
    c, q, v, g, beta = _cpu_case()
    assert gated_delta_verify_kernel(c.checkpoint, c.d_records, c.k_records, c.g_records, q, q, v, g) == "triton"
    slots = torch.zeros(4, dtype=torch.int32)
    launch = partial(
        launch_gated_delta_replay_verify,
        *(c.checkpoint, c.d_records, c.k_records, c.g_records, c.cursor, c.pending, q, q, v, g, beta),
        slot_ids=slots,
        scale=0.1,
        use_qk_l2norm=True,
        out=v.clone(),
    )
    with pytest.raises(ValueError, match=r"gdn_replay_verify \(CUDA\): not a CUDA tensor"):
        launch(kernel="cuda")
    with pytest.raises(ValueError, match="flush_config, history_product and rounding_seed set the Triton kernels"):
        launch(kernel="cuda", history_product=False)
    with pytest.raises(ValueError, match="flush_config, history_product and rounding_seed set the Triton kernels"):
        launch(kernel="cuda", rounding_seed=1)
    with pytest.raises(TypeError, match="config is DeltaVerifyCudaConfig; the Triton kernels take a LaunchConfig"):
        launch(kernel="triton", config=vc.DeltaVerifyCudaConfig(64, 2, 1))
