"""The CUDA C++ Mamba-2 verify (kernels/cuda/mamba2_verify_step.cu) on an sm_90 GPU, forced through
``kernel="cuda"``: long verify + commit runs against the float64 serial recurrence (every window
output, every flushed checkpoint, cursors, pending, padding rows, unused slots and poisoned record
positions), over geometries, T and both checkpoint dtypes; the same step as the Triton kernel's;
the op's route; refusals."""

from functools import partial

import pytest
import torch

from mamba2_cases import ACT_TOL, STATE_TOL, Geometry, Mamba2Family
from spec_cases import commit_with_launcher, draw, drive_spec, make_window, mamba2_verify_with_launcher
from trtllm_replayssm.kernels.mamba2_verify import replay_verify_kernel
from trtllm_replayssm.ops import spec_buffer_len

pytestmark = pytest.mark.gpu

SUPER = Geometry(128, 64, 128, 8)  # Nemotron-3-Super, TP=1
NANO = Geometry(96, 80, 128, 8)  # Nemotron-3-Nano-4B
ONE_GROUP = Geometry(128, 64, 128, 1)
ODD = Geometry(6, 48, 64, 3)  # two heads a group, 3 consumer warps
WIDE = Geometry(20, 16, 192, 2)  # 10 heads a group, one consumer warp, 3 column blocks
ROWS = ["all", "bonus", "mixed", "short", "mixed", "all"]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
CUDA = partial(mamba2_verify_with_launcher, kernel="cuda")
TRITON = partial(mamba2_verify_with_launcher, kernel="triton")


@pytest.mark.parametrize(
    "g, T, B, state, with_z, D_per_dim",
    [
        pytest.param(SUPER, 4, 16, "f32", True, False, id="super-T4-f32"),
        pytest.param(SUPER, 4, 16, "bf16", True, False, id="super-T4-bf16"),
        pytest.param(SUPER, 1, 16, "f32", True, False, id="super-T1-f32"),
        pytest.param(SUPER, 2, 16, "bf16", False, False, id="super-T2-bf16-noz"),
        pytest.param(SUPER, 3, 13, "f32", True, True, id="super-T3-B13-f32-Ddim"),
        pytest.param(SUPER, 8, 16, "f32", True, False, id="super-T8-f32"),
        pytest.param(SUPER, 8, 16, "bf16", True, False, id="super-T8-bf16"),
        pytest.param(NANO, 4, 16, "f32", True, False, id="nano-T4-f32"),
        pytest.param(NANO, 4, 16, "bf16", True, True, id="nano-T4-bf16-Ddim"),
        pytest.param(ONE_GROUP, 4, 16, "f32", True, False, id="ngroups1-T4-f32"),
        pytest.param(ODD, 2, 5, "bf16", True, False, id="odd-T2-B5-bf16"),
        pytest.param(WIDE, 8, 24, "f32", False, True, id="wide-T8-B24-f32"),
    ],
)
def test_cuda_verify_long_run_against_float64(g, T, B, state, with_z, D_per_dim):
    """64 verify + commit steps from empty buffers with random acceptance, num_tokens and padding
    rows (tests/spec_cases.drive_spec checks every step)."""
    worst = drive_spec(
        Mamba2Family(g, with_z=with_z, D_per_dim=D_per_dim),
        CUDA,
        commit_with_launcher,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=DTYPES[state],
        act_dtype=torch.bfloat16,
        device="cuda",
        steps=64,
        policies=ROWS,
        num_slots=11,
        n_padding=2,
    )
    print(f"{g} T={T} B={B} {state}: {worst}")
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[state], worst
    assert worst["ckpt"] < STATE_TOL[state], worst


@pytest.mark.parametrize("all_tokens", [False, True], ids=["num_tokens", "every-row-T"])
@pytest.mark.parametrize("state", ["f32", "bf16"])
@pytest.mark.parametrize("T", [2, 4, 8])
def test_cuda_verify_equals_the_triton_kernel(T, state, all_tokens):
    """One verify on two copies of a cache with spread cursors (flush and non-flush rows, a padding
    row, fewer tokens in some rows, or num_tokens None: every row T): outputs and flushed
    checkpoints to fp32 rounding, records, cursors and pending equal (dt records to the last bits
    of softplus)."""
    fam = Mamba2Family(SUPER, with_z=True)
    L = spec_buffer_len(16, T)
    p = fam.make_params("cuda")
    slots = torch.tensor([7, -1, 2, 0, 5, 3, 8, 1], dtype=torch.int32, device="cuda")
    torch.manual_seed(5)
    caches = []
    for _ in range(2):
        c = fam.allocate(9, L, DTYPES[state], torch.bfloat16, "cuda")
        torch.manual_seed(11)
        c.checkpoint.normal_()
        fam.poison(c)
        c.dt_records.uniform_(0.01, 0.05)
        c.cursor.copy_(torch.tensor([0, L - 1, L - T, L - T - 1, 3, L - 2, 1, L - 1, 2], dtype=torch.int32))
        caches.append(c)
    n = None if all_tokens else torch.tensor([draw("short", T)[0] for _ in range(8)], dtype=torch.int32, device="cuda")
    win = make_window(fam, 8, T, torch.bfloat16, "cuda")
    outs = [torch.full_like(win["x"], 42.0) for _ in range(2)]
    for c, out, verify in zip(caches, outs, (CUDA, TRITON)):
        verify(c, win, p, slots, n, out)
    torch.cuda.synchronize()
    a, b = caches
    assert torch.equal(a.cursor, b.cursor) and torch.equal(a.pending, b.pending)
    assert not a.arrivals.any()
    scale = b.checkpoint.float().abs().max()
    tol = 2e-5 if state == "f32" else 1e-2
    assert (a.checkpoint.float() - b.checkpoint.float()).abs().max() <= tol * scale
    assert torch.equal(a.x_records, b.x_records) and torch.equal(a.B_records, b.B_records)
    torch.testing.assert_close(a.dt_records, b.dt_records, rtol=1e-4, atol=0)  # softplus: __expf / log1pf
    y_scale = outs[1].float().abs().max()
    assert (outs[0].float() - outs[1].float()).abs().max() <= 2e-2 * y_scale
    assert torch.equal(outs[0] == 42.0, outs[1] == 42.0)  # the same outputs untouched


def test_the_op_routes_bf16_activations_to_cuda_and_refuses_what_cuda_cannot_run():
    fam = Mamba2Family(SUPER)
    c = fam.allocate(4, 16, torch.float32, torch.bfloat16, "cuda")
    win = make_window(fam, 2, 4, torch.bfloat16, "cuda")
    assert replay_verify_kernel(c.checkpoint, c.x_records, c.B_records, win["x"], win["B"], win["C"]) == "cuda"
    c16 = fam.allocate(4, 16, torch.float16, torch.bfloat16, "cuda")
    assert replay_verify_kernel(c16.checkpoint, c16.x_records, c16.B_records, win["x"], win["B"], win["C"]) == "triton"
    p = fam.make_params("cuda")
    slots = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="mamba2_replay_verify \\(CUDA\\): checkpoint torch.float16"):
        CUDA(c16, win, p, slots, None, torch.empty_like(win["x"]))
    big = fam.allocate(4, 32, torch.float32, torch.bfloat16, "cuda")
    win9 = make_window(fam, 2, 9, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="T 9; the CUDA verify takes T <= 8"):
        CUDA(big, win9, p, slots, None, torch.empty_like(win9["x"]))
