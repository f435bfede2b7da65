"""Triton helpers shared by the decode kernels, and their launch configurations.

Kernels in this package do no validation: the ops in :mod:`trtllm_replayssm.ops` check every
argument before a launch. Addressing is int64 (slot ids times slot strides exceed 2**31 for
large pools).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

__all__ = ["KERNELS", "LaunchConfig", "mamba2_launch_config", "mamba2_step_args", "mamba2_step_constexprs",
           "resolve_kernel"]

# The replay launchers' ``kernel`` argument: the op's choice, or the Triton or CUDA C++ kernel.
KERNELS = ("auto", "triton", "cuda")


def resolve_kernel(launcher: str, kernel: str, config, cuda_config_type: type, auto: Callable[[], str]) -> str:
    """The kernel a launcher runs, ``"triton"`` or ``"cuda"``: ``kernel`` itself unless ``"auto"``;
    then the kind of ``config`` (a ``cuda_config_type``: CUDA; a :class:`LaunchConfig`: Triton),
    else ``auto()`` (the op's route rule).

    Raises:
        ValueError: ``kernel`` is not one of :data:`KERNELS` (naming ``launcher``).
    """
    if kernel not in KERNELS:
        raise ValueError(f"{launcher}: kernel is {kernel!r}; expected one of {KERNELS}")
    if kernel != "auto":
        return kernel
    if isinstance(config, cuda_config_type):
        return "cuda"
    if isinstance(config, LaunchConfig):
        return "triton"
    return auto()


@triton.jit
def process_dt(dt_ptr, dt_bias_ptr, i_h, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr):
    """Processed step size (fp32 scalar): softplus(dt + dt_bias), identity above 20."""
    dt = tl.load(dt_ptr).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + i_h).to(tl.float32)
    if DT_SOFTPLUS:
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
    return dt


@triton.jit
def skip_gate_store(y, x, o_p, m_p, i_h, D_ptr, stride_D_head, z_ptr, out_ptr,
                    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr):
    """y += D x; y *= silu(z); store y (fp32 [BLOCK_HEAD_DIM]) into ``out`` at offsets o_p."""
    if HAS_D:
        if D_PER_DIM:
            d = tl.load(D_ptr + i_h * stride_D_head + o_p, mask=m_p, other=0.0).to(tl.float32)
        else:
            d = tl.load(D_ptr + i_h * stride_D_head).to(tl.float32)
        y += d * x
    if HAS_Z:
        z = tl.load(z_ptr + o_p, mask=m_p, other=0.0).to(tl.float32)
        y *= z * tl.sigmoid(z)
    tl.store(out_ptr + o_p, y.to(out_ptr.dtype.element_ty), mask=m_p)


@triton.jit
def tf32_split(x):
    """(hi, lo), x = hi + lo exactly: hi is x truncated to TF32 (10 mantissa bits), lo = x - hi.
    TF32 products of the parts lose only lo's low bits (about 2^-21 of x): the 3xTF32 scheme,
    with the split done once per operand (Triton's ``tf32x3`` re-splits both operands at every
    product, with NaN/inf selects: ~360 of the GDN verify tile loop's 787 instructions, sm_90a)."""
    hi = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def split_dot(a, b, acc, SPLIT_B: tl.constexpr):
    """acc + a b, fp32, from tensor-core products of the operands' TF32 parts
    (:func:`tf32_split`; the lo x lo product is dropped: about fp32 accuracy). b is split only
    when SPLIT_B (16-bit values are exact in TF32). Tiles as ``tl.dot`` needs them (every
    dimension >= 16; sm_80+)."""
    a_hi, a_lo = tf32_split(a)
    if SPLIT_B:
        b_hi, b_lo = tf32_split(b)
        acc = tl.dot(a_hi, b_lo, acc=acc, input_precision="tf32")
    else:
        b_hi = b
    acc = tl.dot(a_lo, b_hi, acc=acc, input_precision="tf32")
    return tl.dot(a_hi, b_hi, acc=acc, input_precision="tf32")


@triton.jit
def grid_round(q, MANT_BITS: tl.constexpr, MIN_EXP: tl.constexpr, u, STOCHASTIC: tl.constexpr):
    """``q`` (fp32, within the format's range) on the grid of a float format of MANT_BITS explicit
    mantissa bits and smallest normal exponent MIN_EXP (its subnormals share that binade's
    spacing; MIN_EXP - MANT_BITS > -127), still fp32, so that the conversion that follows is
    exact: nearest even, or with STOCHASTIC the upper neighbour with probability (q - lower) /
    spacing, ``u`` uniform in [0, 1) of q's shape (ignored otherwise)."""
    e = tl.maximum(((q.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, MIN_EXP)  # binade
    step = ((e - MANT_BITS + 127) << 23).to(tl.float32, bitcast=True)
    q = q / step  # exact: a power of two
    if STOCHASTIC:
        lower = tl.floor(q)
        q = lower + tl.where(u < q - lower, 1.0, 0.0)
    else:
        q = (q + 12582912.0) - 12582912.0  # round to nearest even (|q| < 2^22)
    return q * step


@triton.jit
def fp8_row_codes(v, amax, u, STOCHASTIC: tl.constexpr):
    """Rows of ``v`` (fp32 [rows, n]; the whole rows, or a column tile of them) as an fp8
    checkpoint stores them, given each row's largest magnitude ``amax`` [rows] (over the whole
    row): (their values divided by the row scale max |row| / 448 (1 for a zero row) and rounded
    on the float8-e4m3 grid (:func:`grid_round`, ``u`` and STOCHASTIC as there), still fp32; the
    scales [rows]). The rule of ``reference.rounding.fp8_row_encode``. The rounding is done here,
    not by the conversion: the Triton interpreter's fp32 -> fp8 drops the carry into the exponent
    (127.9 -> 64; Triton 3.8), so the CPU tests could not check it. The divisions are IEEE-rounded
    (``div_rn``, as torch's and the CUDA steps' ``__fdiv_rn``): Triton's ``/`` on fp32 lowers to
    ``div.full.f32`` on the GPU, up to 2 ulp off, which can move a scale and then a code at a
    rounding tie."""
    scale = tl.where(amax > 0, tl.math.div_rn(amax, 448.0), 1.0)
    q = tl.clamp(tl.math.div_rn(v, scale[:, None]), -448.0, 448.0)
    return grid_round(q, 3, -6, u, STOCHASTIC), scale


@triton.jit
def uniform_from_bits(r):
    """Uniform fp32 values in [0, 1) from random uint32 words ``r`` (their top 24 bits)."""
    return (r >> 8).to(tl.float32) * (1.0 / 16777216.0)


@triton.jit
def stochastic_16bit(v, r, IS_BF16: tl.constexpr):
    """``v`` (fp32) rounded stochastically to bf16 (IS_BF16) or fp16, still fp32 (the conversion
    that follows is exact): the upper neighbour in magnitude with probability (|v| - lower) /
    spacing. ``r``: uniform random uint32 of v's shape. bf16 adds its low 16 bits to v's bit
    pattern and truncates (fp32's exponent range: subnormals included); fp16 clamps to 65504
    and rounds on its grid (:func:`grid_round`)."""
    if IS_BF16:
        bits = v.to(tl.int32, bitcast=True) + (r & 0xFFFF).to(tl.int32)
        return (bits & -65536).to(tl.float32, bitcast=True)
    return grid_round(tl.clamp(v, -65504.0, 65504.0), 10, -14, uniform_from_bits(r), True)


@triton.jit
def store_checkpoint_tile(p_tile, m_tile, p_scale, m_rows, b_s, b_amax, sr_seed, slot, head, salt, offsets,
                          HAS_SCALE: tl.constexpr, SR: tl.constexpr):
    """A flush's folded state tile ``b_s`` [rows, cols] (fp32) stored over the checkpoint at
    ``p_tile`` (mask ``m_tile``): rounded to its dtype to nearest even or, with SR,
    stochastically: the Philox words at ``offsets`` [rows, cols] of a seed mixed from
    ``sr_seed``, the slot, the head and the bits of ``salt`` (an fp32 scalar of the flush's
    inputs, so that successive flushes draw differently). An fp8 checkpoint's (HAS_SCALE) as codes
    (:func:`fp8_row_codes`) of the rows' largest magnitudes ``b_amax`` [rows] (a tile of whole
    rows: ``tl.max(tl.abs(b_s), axis=1)``; unused otherwise), each row's new scale at ``p_scale``
    (mask ``m_rows``; a row split over tiles stores the same scale from each)."""
    b_r = tl.zeros(b_s.shape, dtype=tl.uint32)
    if SR:
        b_r = tl.randint(sr_seed + slot * 1000003 + head * 7919 + salt.to(tl.int32, bitcast=True), offsets)
    if HAS_SCALE:
        b_s, b_sc = fp8_row_codes(b_s, b_amax, uniform_from_bits(b_r), SR)
        tl.store(p_scale, b_sc, mask=m_rows)
    elif SR:
        b_s = stochastic_16bit(b_s, b_r, p_tile.dtype.element_ty == tl.bfloat16)
    tl.store(p_tile, b_s.to(p_tile.dtype.element_ty), mask=m_tile)


@triton.jit
def window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS: tl.constexpr):
    """Tokens of row ``i_b`` in a speculative window: ``num_tokens[i_b]`` when given, else T
    (int32 scalar). Read only for live rows (after the caller's padding check)."""
    if HAS_NUM_TOKENS:
        n = tl.load(num_tokens_ptr + i_b)
    else:
        n = tl.full([], T, tl.int32)
    return n


@triton.jit
def last_arrival(arrivals_ptr, slot, n_programs):
    """Count this program in the row's arrivals (after a CTA barrier, so every thread of the
    program is done with what it read; acq_rel atomic): True in the row's last program of the
    ``n_programs``, which also resets the counter to 0 for the next launch."""
    tl.debug_barrier()
    arrived = tl.atomic_add(arrivals_ptr + slot, 1, sem="acq_rel", scope="gpu")
    last = arrived == n_programs - 1
    if last:
        tl.store(arrivals_ptr + slot, 0)
    return last


# A GDN/KDA row whose verify flushed holds cursor w + VERIFY_FLUSHED (w: its committed records
# before the verify, all folded into the checkpoint) until its commit, which starts it from 0;
# no launch before the commit resets a cursor (``reference.spec.VERIFY_FLUSHED``, the same value).
VERIFY_FLUSHED = tl.constexpr(1 << 30)


@triton.jit
def verify_flushes(w, n, L: tl.constexpr):
    """Whether a verify row with w committed records and n window tokens flushes: its window
    would reach record position L-1 (``reference.spec.verify_flushes``)."""
    return w + n > L - 1


@triton.jit
def advance_cursor(cursor_ptr, arrivals_ptr, slot, w, L: tl.constexpr):
    """End of a replay program: count it in the row's arrivals; the last program of the row
    writes the new cursor (0 after a flush at w == L-1, else w+1) and resets the counter.

    Every thread of the program has consumed w before the barrier, and the atomic is acq_rel,
    so no program of the launch can read a cursor that this launch already advanced: one
    captured CUDA graph replays correctly for any mix of flush and non-flush rows.
    """
    if last_arrival(arrivals_ptr, slot, tl.num_programs(0) * tl.num_programs(1)):
        tl.store(cursor_ptr + slot, tl.where(w == L - 1, 0, w + 1))


def mamba2_optional_inputs(x, A, D, z, dt_bias) -> tuple:
    """(z, D, dt_bias) for a Mamba-2 kernel launch: an absent tensor becomes a harmless pointer
    (x for z, A for D and dt_bias), never read since its constexpr flag is off."""
    return (z if z is not None else x, D if D is not None else A, dt_bias if dt_bias is not None else A)


def mamba2_step_args(x, dt, A, B, C, slot_ids, D, z, dt_bias, out) -> tuple:
    """Kernel arguments of the step inputs, in the order both Mamba-2 kernels declare them
    (x, z, out, dt, A, dt_bias, D, B, C, slot_ids, head_dim, d_state, heads_per_group)."""
    zz, DD, bias = mamba2_optional_inputs(x, A, D, z, dt_bias)
    return (x, x.stride(0), x.stride(1), zz, zz.stride(0), zz.stride(1),
            out, out.stride(0), out.stride(1), dt, dt.stride(0), dt.stride(1),
            A, bias, DD, DD.stride(0),
            B, B.stride(0), B.stride(1), C, C.stride(0), C.stride(1), slot_ids,
            x.shape[2], B.shape[2], x.shape[1] // B.shape[1])


def mamba2_step_constexprs(D, z, dt_bias, dt_softplus: bool, d_state: int) -> dict:
    """Constexpr flags shared by both Mamba-2 kernels."""
    return dict(BLOCK_D_STATE=triton.next_power_of_2(d_state),
                HAS_D=D is not None, D_PER_DIM=D is not None and D.dim() == 2, HAS_Z=z is not None,
                HAS_DT_BIAS=dt_bias is not None, DT_SOFTPLUS=dt_softplus)


@dataclass(frozen=True)
class LaunchConfig:
    """Work of one program: ``chunks`` tiles of ``block_head_dim`` rows of one head's
    [head_dim, d_state] state, walked in a loop software-pipelined ``num_stages`` deep.

    The conventional kernel uses one chunk per program (``chunks`` and ``num_stages`` 1).
    ``max_registers`` (None: ptxas chooses) caps the registers per thread (Triton's
    ``maxnreg``), trading spills for more resident warps; it never changes results.
    """

    block_head_dim: int
    num_warps: int
    chunks: int = 1
    num_stages: int = 1
    max_registers: Optional[int] = None

    def label(self) -> str:
        """``block_head_dim,num_warps,chunks,num_stages`` (and ``,r<max_registers>``): sweeps' key."""
        cap = f",r{self.max_registers}" if self.max_registers is not None else ""
        return f"{self.block_head_dim},{self.num_warps},{self.chunks},{self.num_stages}{cap}"

    def launch_options(self) -> dict:
        """Triton launch keywords: ``num_warps``, and ``maxnreg`` when capped."""
        opts = dict(num_warps=self.num_warps)
        if self.max_registers is not None:
            opts["maxnreg"] = self.max_registers
        return opts


def mamba2_launch_config(route: str, head_dim: int, d_state: int, batch: int,
                         state_dtype: torch.dtype) -> LaunchConfig:
    """Launch configuration of the Mamba-2 decode kernels for a shape and batch.

    ``route`` is ``"decode_step"`` (conventional) or ``"replay_step"``. The table was measured
    on an H200 (docs/kernel-notes.md has the sweep). Configurations differ only in the order of
    fp32 reductions, so the choice moves time, not results beyond fp32 rounding.
    """
    if route not in ("decode_step", "replay_step"):
        raise ValueError(f"mamba2_launch_config: route is {route!r}; expected 'decode_step' or 'replay_step'")
    wide = state_dtype.itemsize >= 4
    pow2 = triton.next_power_of_2(head_dim)
    if route == "decode_step":
        # Read-modify-write of one small tile per program reaches ~95% of copy bandwidth.
        return LaunchConfig(block_head_dim=min(8 if wide else 16, pow2), num_warps=2)
    # Replay: measured on an H200 with (128, 64, 128, 8), L = 16 (docs/kernel-notes.md, v2 sweep).
    if batch < 8:
        # Few rows: spread each head over several programs to fill the GPU.
        return LaunchConfig(block_head_dim=min(8 if wide else 16, pow2), num_warps=1 if wide else 2)
    if batch < 32:
        return LaunchConfig(block_head_dim=min(32, pow2), num_warps=1)
    # Many rows: one program per head, its checkpoint streamed through a
    # cp.async pipeline, so the per-head work (weights, B.C) is paid once and loads stay in flight.
    block = min(16 if batch < 128 else 8, pow2)
    return LaunchConfig(block_head_dim=block, num_warps=2 if (batch < 128 and not wide) else 1,
                        chunks=triton.cdiv(head_dim, block), num_stages=2 if (batch < 128 and wide) else 3)
