"""The CUDA C++ Mamba-2 verify on the CPU: NVRTC compiles every shape and window size, the shared
memory and coefficient blocks the launcher allocates equal what the kernels index, the launcher
packs exactly the kernels' PTX parameters, and the route's refusals name their reason. (Running it
needs an sm_90 GPU: tests/gpu/test_mamba2_verify_cuda_gpu.py.)"""

import re

import pytest
import torch

from ptx_params import ptx_params
from trtllm_replayssm.kernels import mamba2_verify_cuda as vc
from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig
from trtllm_replayssm.kernels.mamba2_verify import launch_mamba2_replay_verify, replay_verify_kernel
from trtllm_replayssm.kernels.nvrtc import compile_program

FLAGS = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=1, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)
SHAPES = [  # (nheads, ngroups, head_dim, d_state, L, T)
    (128, 8, 64, 128, 20, 4),  # Nemotron-3-Super, TP=1, B = 16
    (96, 8, 80, 128, 20, 4),  # Nemotron-3-Nano
    (128, 1, 64, 128, 24, 8),
    (128, 8, 64, 128, 17, 1),
    (6, 3, 48, 64, 5, 2),
    (20, 2, 16, 192, 32, 8),
    (14, 2, 32, 64, 16, 3),  # 7 heads a group: warps with one and two heads
]


def _ptx(shape, batch=256, flags=FLAGS, state_bytes=2, has_num_tokens=True):
    nheads, ngroups, head_dim, d_state, L, T = shape
    cfg = vc.cuda_verify_config(head_dim, d_state, L, T, batch, state_bytes)
    defines = vc.verify_defines(nheads, ngroups, head_dim, d_state, L, T, cfg, flags, state_bytes, has_num_tokens)
    return compile_program(vc.SOURCE, "sm_90", defines, "ptx").decode()


@pytest.mark.parametrize("batch", [16, 256], ids=["c16", "c4"])
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_every_shape_compiles_and_shared_memory_matches(shape, state_bytes, batch):
    _, _, head_dim, d_state, L, T = shape
    cfg = vc.cuda_verify_config(head_dim, d_state, L, T, batch, state_bytes)
    ptx = _ptx(shape, batch=batch, state_bytes=state_bytes)
    assert ".entry mamba2_verify_step(" in ptx and ".entry mamba2_verify_coefficients(" in ptx
    compiled = int(re.search(r"mamba2_verify_shared_bytes = (\d+)", ptx).group(1))
    assert compiled == vc.verify_shared_bytes(head_dim, d_state, L, T, cfg.stages, state_bytes)
    assert (compiled + vc.SMEM_RESERVED_PER_CTA) * cfg.min_ctas <= vc.SMEM_PER_SM
    floats = int(re.search(r"mamba2_verify_coefficient_floats = (\d+)", ptx).group(1))
    assert floats == vc.verify_coefficient_floats(L, T) and floats % 4 == 0


@pytest.mark.parametrize("has_num_tokens", [True, False])
@pytest.mark.parametrize("flags", [dict(FLAGS), dict(FLAGS, HAS_D=0, HAS_Z=0, HAS_DT_BIAS=0, DT_SOFTPLUS=0, DT_CODE=0),
                                   dict(FLAGS, D_PER_DIM=1, D_CODE=1, DTB_CODE=2, DT_CODE=2)])  # fmt: skip
def test_optional_inputs_and_dtypes_compile(flags, has_num_tokens):
    assert ".entry mamba2_verify_step(" in _ptx(SHAPES[0], flags=flags, has_num_tokens=has_num_tokens)


def _cpu_case(nheads=128, head_dim=64, d_state=128, ngroups=8, L=20, T=4, batch=4, slots=6):
    from trtllm_replayssm.cache import Mamba2ReplayCache

    c = Mamba2ReplayCache.allocate(
        slots, nheads, head_dim, d_state, ngroups, L, state_dtype=torch.float32, act_dtype=torch.bfloat16, device="cpu"
    )
    x = torch.zeros(batch, T, nheads, head_dim, dtype=torch.bfloat16)
    B = torch.zeros(batch, T, ngroups, d_state, dtype=torch.bfloat16)
    return c, x, B


def test_launcher_packs_the_kernels_ptx_parameters():
    """Same count and widths, in order: a missing, extra or swapped-width argument fails."""
    c, x, B = _cpu_case()
    ptx = _ptx(SHAPES[0])
    dt = torch.zeros(4, 4, 128)
    A = torch.zeros(128)
    slots = torch.zeros(4, dtype=torch.int32)
    coef = torch.zeros(8)
    args = vc.coefficient_args(coef, B, c.dt_records, c.B_records, c.cursor, c.pending, dt, A, None, B, B, slots, None)
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "mamba2_verify_coefficients")
    maps = (b"\0" * 128, b"\0" * 128)
    args = vc.step_args(maps, coef, B, c.x_records, c.B_records, x, B, None, None, x, slots, None, c.cursor, c.arrivals)
    assert ["64" if k in ("ptr", "i64") else k for k in args.kinds] == ptx_params(ptx, "mamba2_verify_step")


def test_launch_rule_and_block_sizes():
    assert vc.cuda_verify_config(64, 128, 20, 4, 256, 2) == CudaStepConfig(stages=2, min_ctas=3, pdl=True, coef_warps=4)
    assert vc.cuda_verify_config(64, 128, 20, 4, 16, 4) == CudaStepConfig(stages=2, min_ctas=2, pdl=True, coef_warps=16)
    # hist [16][4] + win [4][4] + decay [4] + wgt [16] + fold decay, w, n -> 103, rounded to 104
    assert vc.verify_coefficient_floats(16, 4) == 64 + 16 + 4 + 16 + 3 + 1
    assert vc.verify_coefficient_floats(24, 8) == 32 * 8 + 64 + 8 + 32 + 4
    with pytest.raises(ValueError, match="do not fit a multiprocessor"):
        vc.cuda_verify_config(128, 256, 32, 8, 16, 4)


def test_cpu_tensors_route_to_triton_and_cuda_is_refused_with_the_reason():
    c, x, B = _cpu_case()
    assert replay_verify_kernel(c.checkpoint, c.x_records, c.B_records, x, B, B) == "triton"
    assert vc.cuda_verify_unsupported(c.checkpoint, c.x_records, c.B_records, x, B, B) == "not a CUDA tensor"
    dt = torch.zeros(4, 4, 128)
    slots = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"mamba2_replay_verify \(CUDA\): not a CUDA tensor"):
        launch_mamba2_replay_verify(c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals,
                                    c.pending, x, dt, torch.zeros(128), B, B, slot_ids=slots, out=x.clone(),
                                    kernel="cuda")  # fmt: skip
    with pytest.raises(ValueError, match="kernel is 'gpu'"):
        launch_mamba2_replay_verify(c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals,
                                    c.pending, x, dt, torch.zeros(128), B, B, slot_ids=slots, out=x.clone(),
                                    kernel="gpu")  # fmt: skip
