"""The CUDA C++ Mamba-2 replay step (kernels/cuda/mamba2_replay_step.cu) on an sm_90 GPU: long runs
against the float64 oracle (flushes, padding rows, poisoned unused slots and record positions),
CUDA graphs bit for bit, the op's route, spill-free launch-table shapes, refusals."""

import dataclasses

import pytest
import torch

from op_checks import assert_fp8_flush_matches, bits
from mamba2_cases import (
    ACT_TOL,
    STATE_TOL,
    Geometry,
    drive_replay,
    make_params,
    make_step,
    replay_with_launcher,
    replay_with_op,
)

pytestmark = pytest.mark.gpu


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the CUDA step is built for sm_90")


def bf16_cache(g, num_slots, L):
    from trtllm_replayssm.cache import Mamba2ReplayCache

    dims = (num_slots, g.nheads, g.head_dim, g.d_state, g.ngroups, L)
    return Mamba2ReplayCache.allocate(*dims, state_dtype=torch.bfloat16, act_dtype=torch.bfloat16, device="cuda")


def replay_cuda(cache, inp, p, slot_ids, out, config=None):
    return replay_with_launcher(cache, inp, p, slot_ids, out, config=config, kernel="cuda")


SHAPES = [
    pytest.param(Geometry(128, 64, 128, 8), 16, id="super-L16"),
    pytest.param(Geometry(96, 80, 128, 8), 8, id="nano-hd80-L8"),
    pytest.param(Geometry(96, 80, 128, 8), 32, id="nano-hd80-L32"),
    pytest.param(Geometry(6, 48, 64, 3), 5, id="odd-hd48-ds64-L5"),
    pytest.param(Geometry(4, 128, 256, 1), 1, id="hd128-ds256-L1"),
    pytest.param(Geometry(10, 16, 192, 2), 17, id="hd16-ds192-L17"),
    pytest.param(Geometry(40, 32, 64, 1), 16, id="ngroups1-40heads-L16"),  # three coefficient CTAs a row
]


STATES = {"bf16": torch.bfloat16, "f32": torch.float32}
FORMS = ["c4", "c16", "c4-cl", "small", "small-b1", "small-head"]


def form_config(table, form: str, head_dim: int = 64, d_state: int = 128, L: int = 16, state_bytes: int = 2):
    """``table`` (a CudaStepConfig) in one of FORMS: coefficient CTAs of 4 or 16 warps, or the
    small one-launch kernel as the launch table takes it from batch 2 (registers capped, the
    arithmetic after the barrier, 32 / 16 rows a CTA) or at batch 1 (the arithmetic before the
    barrier, 40 / 32 / 24 / 16 rows, capped for two CTAs above 32), or as at batch 1 with a CTA a
    head, uncapped (head_dim rows: 16 to 128, multiples of 8 that are not powers of two among
    them). ``c4-cl``: ``c4`` with
    each CTA's units after its first ``stages`` claimed (``claimed_units``, the table's at batch 40-255)."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import small_config

    if form == "small-head":
        return dataclasses.replace(small_config(head_dim, d_state, L, 1, state_bytes), small_rows=head_dim, min_ctas=1)
    if form.startswith("small"):
        return small_config(head_dim, d_state, L, 1 if form == "small-b1" else 2, state_bytes)
    return dataclasses.replace(table, coef_warps=16 if form == "c16" else 4, claimed_units=form == "c4-cl")


@needs_sm90
@pytest.mark.parametrize("g,L", SHAPES)
@pytest.mark.parametrize("D_per_dim", [False, True], ids=["D-head", "D-dim"])
@pytest.mark.parametrize("state", ["bf16", "f32"])
@pytest.mark.parametrize("form", FORMS)
def test_cuda_step_long_run_against_oracle(g, L, D_per_dim, state, form):
    """Every shape with a bf16 and an fp32 checkpoint, coefficient CTAs of 4 and 16 warps (more
    and fewer warps than heads: 1-40 heads a group) and the small one-launch kernel, except rows
    too large for two stages."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import (
        SMEM_PER_SM,
        SMEM_RESERVED_PER_CTA,
        cuda_step_config,
        step_shared_bytes,
    )

    es = STATES[state].itemsize
    if step_shared_bytes(g.head_dim, g.d_state, L, 2, es) + SMEM_RESERVED_PER_CTA > SMEM_PER_SM:
        pytest.skip("refused: two stages do not fit (tests/kernels/test_mamba2_cuda_compile.py)")
    cfg = form_config(cuda_step_config(g.head_dim, g.d_state, L, 256, es), form, g.head_dim, g.d_state, L, es)
    worst = drive_replay(
        lambda *a: replay_cuda(*a, config=cfg),
        g,
        L,
        STATES[state],
        torch.bfloat16,
        "cuda",
        steps=3 * L + 5,
        batch=7,
        num_slots=12,
        n_padding=2,
        with_z=True,
        D_per_dim=D_per_dim,
    )
    assert worst["flushes"] >= 7 * ((3 * L + 5) // L) - 7
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[state], worst
    assert worst["ckpt"] < STATE_TOL[state], worst


@needs_sm90
@pytest.mark.parametrize(
    "stages,pdl,coef_warps,small", [(2, True, 4, False), (3, False, 16, False), (1, True, 4, False),
                                    (2, False, 16, False), (2, True, 16, True)]
)  # fmt: skip
def test_cuda_step_configs_agree(stages, pdl, coef_warps, small):
    """Every stage count, with and without programmatic dependent launch, both coefficient
    CTAs, the small kernel, at batch 40 (the ring's wrap-around at 1-3 stages)."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig

    cfg = CudaStepConfig(stages=stages, min_ctas=1, pdl=pdl, coef_warps=coef_warps, small=small)
    g = Geometry(128, 64, 128, 8)
    worst = drive_replay(
        lambda *a: replay_cuda(*a, config=cfg), g, 16, torch.bfloat16, torch.bfloat16, "cuda",
        steps=40, batch=40, num_slots=50, n_padding=3, with_z=True,
    )  # fmt: skip
    assert worst["ckpt"] < STATE_TOL["bf16"] and worst["y"] < ACT_TOL["bf16"] + STATE_TOL["bf16"], worst


@needs_sm90
@pytest.mark.parametrize("L", [1, 16, 32])
@pytest.mark.parametrize(
    "form,state", [(f, "bf16") for f in FORMS] + [(f, "fp8") for f in ("c4", "c16", "c4-cl", "small", "small-b1")]
)
def test_cuda_step_graph_equals_eager(L, form, state):
    """One captured step (both launches) replayed 3L times equals 3L eager steps, bit for bit
    (outputs and every cache tensor: an fp8 checkpoint's codes and row scales too)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.kernels.mamba2_replay_cuda import cuda_step_config

    dtype = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[state]
    cfg = form_config(cuda_step_config(64, 128, L, 20, dtype.itemsize), form)

    g = Geometry(128, 64, 128, 8)
    p = make_params(g, "cuda")
    rows = [7, -1, 2, 0, 5, 16, 11, -1, 3, 9, 14, 1, 4, 6, 8, 10, 12, 13, 15, -1]
    slots = torch.tensor(rows, dtype=torch.int32, device="cuda")
    c = Mamba2ReplayCache.allocate(
        17, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=dtype, act_dtype=torch.bfloat16, device="cuda"
    )
    torch.manual_seed(3)
    c.admit(
        torch.arange(17, dtype=torch.int32, device="cuda"), torch.randn(17, g.nheads, g.head_dim, g.d_state, device="cuda")
    )
    c.cursor.copy_(torch.arange(17, dtype=torch.int32) % L)
    caches = [c, c.clone()]
    inputs = [make_step(g, len(rows), torch.bfloat16, "cuda", with_z=True) for _ in range(3 * L)]
    static = {k: v.clone() for k, v in inputs[0].items()}
    out_g = torch.full_like(static["x"], 42.0)
    out_e = out_g.clone()
    replay_cuda(caches[0].clone(), static, p, slots, out_g.clone(), config=cfg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replay_cuda(caches[0], static, p, slots, out_g, config=cfg)
    for inp in inputs:
        for k, v in inp.items():
            if v is not None:
                static[k].copy_(v)
        graph.replay()
        replay_cuda(caches[1], inp, p, slots, out_e, config=cfg)
        torch.cuda.synchronize()
        assert torch.equal(out_g, out_e)
    theirs = caches[1].tensors()
    for name, t in caches[0].tensors().items():
        assert torch.equal(bits(t), bits(theirs[name])), name


@needs_sm90
@pytest.mark.parametrize("state", ["bf16", "f32"])
@pytest.mark.parametrize("form", ["c4", "c4-cl", "small", "small-b1"])
def test_cuda_steps_in_one_graph_equal_eager(state, form):
    """2L + 3 consecutive steps captured in one graph (each step's coefficient launch then
    follows the previous step kernel inside the graph through a programmatic edge)
    equal the same steps run eagerly, outputs and caches bit for bit (``c4-cl``: each step's claim
    count zeroed by its own coefficient launch)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.kernels.mamba2_replay_cuda import cuda_step_config

    L, g = 16, Geometry(128, 64, 128, 8)
    es = STATES[state].itemsize
    cfg = form_config(cuda_step_config(64, 128, L, 20, es), form, 64, 128, L, es)
    p = make_params(g, "cuda")
    rows = [7, -1, 2, 0, 5, 16, 11, -1, 3, 9, 14, 1, 4, 6, 8, 10, 12, 13, 15, -1]
    slots = torch.tensor(rows, dtype=torch.int32, device="cuda")
    dims = (17, g.nheads, g.head_dim, g.d_state, g.ngroups, L)
    torch.manual_seed(5)
    first = Mamba2ReplayCache.allocate(*dims, state_dtype=STATES[state], act_dtype=torch.bfloat16, device="cuda")
    first.checkpoint.normal_()
    first.cursor.copy_(torch.arange(17, dtype=torch.int32) % L)
    caches = [first.clone() for _ in range(3)]
    inputs = [make_step(g, len(rows), torch.bfloat16, "cuda", with_z=True) for _ in range(2 * L + 3)]
    outs_g = [torch.full_like(inputs[0]["x"], 42.0) for _ in inputs]
    outs_e = [o.clone() for o in outs_g]
    replay_cuda(caches[2], inputs[0], p, slots, outs_g[0].clone(), config=cfg)  # compile and load
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for inp, out in zip(inputs, outs_g):
            replay_cuda(caches[0], inp, p, slots, out, config=cfg)
    graph.replay()
    for inp, out in zip(inputs, outs_e):
        replay_cuda(caches[1], inp, p, slots, out, config=cfg)
    torch.cuda.synchronize()
    for k, (a, b) in enumerate(zip(outs_g, outs_e)):
        assert torch.equal(a, b), k
    for name in ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name


@needs_sm90
@pytest.mark.parametrize("batch,offset_B", [(1, False), (2, False), (4, False), (1, True)])
def test_op_routes_bf16_to_cuda_and_matches_triton(batch, offset_B):
    """The op (kernel "auto") takes the CUDA step for a bf16 cache at every batch (the small
    kernel at batch 1, two launches above; B rows off 16-byte alignment, which the small kernel
    cannot read: two launches at batch 1 too), and its outputs and caches track the Triton
    kernel's over 2L + 3 steps."""
    from trtllm_replayssm.kernels.mamba2_replay import replay_step_kernel
    from trtllm_replayssm.kernels.mamba2_replay_cuda import small_inputs_unsupported

    g, L = Geometry(128, 64, 128, 8), 16
    p = make_params(g, "cuda")
    c = bf16_cache(g, batch, L)
    c.checkpoint.normal_()
    c.cursor.copy_(torch.arange(batch, dtype=torch.int32) % L)
    t = c.clone()
    slots = torch.arange(batch, dtype=torch.int32, device="cuda")
    x = torch.empty(batch, g.nheads, g.head_dim, dtype=torch.bfloat16, device="cuda")
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x) == "cuda"
    for _ in range(2 * L + 3):
        inp = make_step(g, batch, torch.bfloat16, "cuda", with_z=True)
        if offset_B:  # the same values, each row 2 bytes off 16-byte alignment
            inp["B"] = torch.cat([torch.zeros_like(inp["B"][..., :1]), inp["B"]], dim=-1)[..., 1:]
            assert "B strides" in small_inputs_unsupported(inp["B"], inp["C"])
        y = replay_with_op(c, inp, p, slots, torch.zeros_like(inp["x"]))
        y_t = replay_with_launcher(t, inp, p, slots, torch.zeros_like(inp["x"]), kernel="triton")
        assert (y.float() - y_t.float()).abs().max() <= 2e-2 * y_t.float().abs().max()
    assert torch.equal(c.cursor, t.cursor)
    assert (c.checkpoint.float() - t.checkpoint.float()).abs().max() <= 2e-2 * t.checkpoint.float().abs().max()


@needs_sm90
@pytest.mark.parametrize(
    "g,L", [(Geometry(128, 64, 128, 8), 16), (Geometry(96, 80, 128, 8), 16), (Geometry(128, 64, 128, 8), 32)]
)
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "f32"])
def test_cuda_step_launch_table_shapes_do_not_spill(g, L, state_bytes):
    """The launch table's register caps leave the step kernel and the small kernel without local
    memory."""
    from cuda.bindings import driver

    from trtllm_replayssm.kernels.mamba2_replay_cuda import SOURCE, cuda_step_config, step_defines, step_shared_bytes
    from trtllm_replayssm.kernels.nvrtc import load_kernel

    cfg = cuda_step_config(g.head_dim, g.d_state, L, 256, state_bytes)
    flags = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=1, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)
    defines = step_defines(g.nheads, g.ngroups, g.head_dim, g.d_state, L, cfg, flags, state_bytes)
    smem = step_shared_bytes(g.head_dim, g.d_state, L, cfg.stages, state_bytes)
    for entry, entry_smem in (("mamba2_replay_step", smem), ("mamba2_replay_small", 0)):
        k = load_kernel(SOURCE, entry, defines, torch.device("cuda"), entry_smem)
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
        err, local = driver.cuFuncGetAttribute(attr, k.function)
        assert int(err) == 0 and local == 0, (entry, cfg, local)


@needs_sm90
def test_cuda_kernel_refuses_fp16_checkpoint_and_leaves_cache():
    from trtllm_replayssm.cache import Mamba2ReplayCache

    g = Geometry(128, 64, 128, 8)
    p = make_params(g, "cuda")
    c = Mamba2ReplayCache.allocate(
        4, g.nheads, g.head_dim, g.d_state, g.ngroups, 16, state_dtype=torch.float16, act_dtype=torch.bfloat16, device="cuda"
    )
    before = {k: v.clone() for k, v in vars(c).items() if isinstance(v, torch.Tensor)}
    inp = make_step(g, 4, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match=r"mamba2_replay_step \(CUDA\): checkpoint torch.float16"):
        replay_cuda(c, inp, p, torch.arange(4, dtype=torch.int32, device="cuda"), torch.empty_like(inp["x"]))
    for k, v in before.items():
        assert torch.equal(getattr(c, k), v), k


@needs_sm90
def test_small_config_refuses_unaligned_inputs_and_leaves_cache():
    """An explicit small config with B rows off 16-byte alignment raises naming B (the launch
    table's small kernel takes the two launches instead: the route test above)."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig

    g = Geometry(128, 64, 128, 8)
    p = make_params(g, "cuda")
    c = bf16_cache(g, 4, 16)
    before = {k: v.clone() for k, v in vars(c).items() if isinstance(v, torch.Tensor)}
    inp = make_step(g, 1, torch.bfloat16, "cuda")
    inp["B"] = torch.cat([torch.zeros_like(inp["B"][..., :1]), inp["B"]], dim=-1)[..., 1:]
    cfg = CudaStepConfig(stages=2, min_ctas=3, pdl=True, small=True)
    with pytest.raises(ValueError, match=r"mamba2_replay_step \(CUDA, small\): B strides"):
        replay_cuda(c, inp, p, torch.zeros(1, dtype=torch.int32, device="cuda"), torch.empty_like(inp["x"]), config=cfg)
    for k, v in before.items():
        assert torch.equal(getattr(c, k), v), k


@needs_sm90
def test_op_routes_fp32_checkpoints_to_cuda_at_every_batch():
    """The automatic route takes the CUDA step for fp32 checkpoints too, batch 1 included
    (measured no slower than Triton there and faster above, 2026-12-02)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.kernels.mamba2_replay import replay_step_kernel

    g = Geometry(128, 64, 128, 8)
    c = Mamba2ReplayCache.allocate(
        64, g.nheads, g.head_dim, g.d_state, g.ngroups, 16, state_dtype=torch.float32, act_dtype=torch.bfloat16, device="cuda"
    )
    x = torch.empty(64, g.nheads, g.head_dim, dtype=torch.bfloat16, device="cuda")
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x) == "cuda"
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x[:1]) == "cuda"


FP8_SHAPES = [  # d_state 128: the CUDA step's fp8 rows
    pytest.param(Geometry(128, 64, 128, 8), 16, id="super-L16"),
    pytest.param(Geometry(96, 80, 128, 8), 8, id="nano-hd80-L8"),
    pytest.param(Geometry(96, 80, 128, 8), 32, id="nano-hd80-L32"),
    pytest.param(Geometry(40, 32, 128, 1), 5, id="ngroups1-40heads-L5"),
]


def admitted_fp8_cache(g, batch: int, L: int):
    """An fp8 cache of ``batch`` slots, each admitted with an N(0, 1) state, and the slot ids."""
    from trtllm_replayssm.cache import Mamba2ReplayCache

    c = Mamba2ReplayCache.allocate(
        batch, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=torch.float8_e4m3fn,
        act_dtype=torch.bfloat16, device="cuda",
    )  # fmt: skip
    slots = torch.arange(batch, dtype=torch.int32, device="cuda")
    c.admit(slots, torch.randn(batch, g.nheads, g.head_dim, g.d_state, device="cuda"))
    return c, slots


@needs_sm90
@pytest.mark.parametrize("g,L", FP8_SHAPES)
@pytest.mark.parametrize("form", ["c4", "c16", "c4-cl", "small", "small-b1"])
def test_cuda_step_fp8_long_run_against_oracle(g, L, form):
    """An fp8 checkpoint through the two launches and the small kernel: codes and row scales
    against the float64 oracle over many flushes, padding rows and unused slots untouched
    (drive_replay)."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import cuda_step_config

    cfg = form_config(cuda_step_config(g.head_dim, g.d_state, L, 256, 1), form, g.head_dim, g.d_state, L, 1)
    worst = drive_replay(
        lambda *a: replay_cuda(*a, config=cfg), g, L, torch.float8_e4m3fn, torch.bfloat16, "cuda",
        steps=3 * L + 5, batch=7, num_slots=12, n_padding=2, with_z=True,
    )  # fmt: skip
    assert worst["flushes"] >= 7 * ((3 * L + 5) // L) - 7
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL["fp8"], worst
    assert worst["ckpt"] < STATE_TOL["fp8"], worst


@needs_sm90
@pytest.mark.parametrize("L", [8, 16])
def test_cuda_step_fp8_flush_equals_triton_to_a_code(L):
    """One flush from the same fp8 cache by the CUDA and the Triton step: the same row scales (to
    fp32 rounding of the fold) and codes at most one e4m3 step apart (the two folds' fp32 sums
    may round a tie the other way); outputs within bf16 rounding."""
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

    g = Geometry(128, 64, 128, 8)
    p = make_params(g, "cuda")
    batch = 9
    c, slots = admitted_fp8_cache(g, batch, L)
    for _ in range(L):  # every row flushes at step L - 1
        inp = make_step(g, batch, torch.bfloat16, "cuda", with_z=True)
        ref = c.clone()
        outs = {}
        for kernel, cache in (("cuda", c), ("triton", ref)):
            outs[kernel] = launch_mamba2_replay_step(
                cache.checkpoint, cache.x_records, cache.dt_records, cache.B_records, cache.cursor, cache.arrivals,
                inp["x"], inp["dt"], p.A, inp["B"], inp["C"], slot_ids=slots, D=p.D, z=inp["z"], dt_bias=p.dt_bias,
                out=torch.empty_like(inp["x"]), checkpoint_scale=cache.checkpoint_scale, kernel=kernel,
            )  # fmt: skip
        torch.testing.assert_close(outs["cuda"].float(), outs["triton"].float(), rtol=1e-2, atol=1e-2)
        assert torch.equal(c.cursor, ref.cursor)
    assert_fp8_flush_matches(c.checkpoint, c.checkpoint_scale, ref.checkpoint, ref.checkpoint_scale, exact=False)


@needs_sm90
@pytest.mark.parametrize("batch", [2, 64], ids=["small", "two-launch"])
def test_cuda_step_fp8_takes_C_of_any_magnitude(batch):
    """The two launches' S0 . C multiplies the codes (as f16) by C as f16 times a power of two
    chosen per (row, group): C far above f16's range (2^20 x), far below it (2^-20 x) and zero
    gives the Triton step's outputs (fp32 products) to bf16 rounding. Without D, every output
    scales with C, so the small magnitudes are compared at their own scale (unscaled f16 C would
    overflow at 2^20 and lose most bits at 2^-20)."""
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

    g, L = Geometry(128, 64, 128, 8), 16
    p = make_params(g, "cuda", has_D=False)
    c, slots = admitted_fp8_cache(g, batch, L)
    c.x_records.normal_(), c.B_records.normal_(), c.dt_records.uniform_(0.01, 0.05)
    c.cursor.copy_(torch.arange(batch, dtype=torch.int32) % (L - 1))  # no flush: every step reads the same S0
    inp = make_step(g, batch, torch.bfloat16, "cuda")
    for factor in (2.0**20, 2.0**-20, 0.0):
        scaled = dict(inp, C=inp["C"] * factor)  # powers of two: exact in bf16
        outs = {}
        for kernel in ("cuda", "triton"):
            cache = c.clone()
            outs[kernel] = launch_mamba2_replay_step(
                cache.checkpoint, cache.x_records, cache.dt_records, cache.B_records, cache.cursor, cache.arrivals,
                scaled["x"], scaled["dt"], p.A, scaled["B"], scaled["C"], slot_ids=slots, dt_bias=p.dt_bias,
                out=torch.empty_like(inp["x"]), checkpoint_scale=cache.checkpoint_scale, kernel=kernel,
            ).float()  # fmt: skip
        if factor == 0.0:
            assert not outs["cuda"].any() and not outs["triton"].any()
            continue
        torch.testing.assert_close(outs["cuda"] / factor, outs["triton"] / factor, rtol=2e-2, atol=2e-2)


@needs_sm90
def test_op_routes_fp8_checkpoints_to_cuda_and_a_seed_to_triton():
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.kernels.mamba2_replay import replay_step_kernel

    g = Geometry(128, 64, 128, 8)
    c = Mamba2ReplayCache.allocate(
        64, g.nheads, g.head_dim, g.d_state, g.ngroups, 16, state_dtype=torch.float8_e4m3fn, act_dtype=torch.bfloat16,
        device="cuda",
    )  # fmt: skip
    x = torch.empty(64, g.nheads, g.head_dim, dtype=torch.bfloat16, device="cuda")
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x, c.checkpoint_scale) == "cuda"
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x[:1], c.checkpoint_scale) == "cuda"
    assert replay_step_kernel(c.checkpoint, c.x_records, c.B_records, x) == "triton"  # no scales given
