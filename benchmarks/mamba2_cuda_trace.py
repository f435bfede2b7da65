"""Per-CTA timeline of one CUDA Mamba-2 replay step (GPU, sm_90): where a step's time goes.

A copy of ``kernels/cuda/mamba2_replay_step.cu`` with ``%globaltimer`` reads (32 ns resolution on
the H200) at fixed points, each CTA writing its own row of a trace buffer (one more kernel
parameter); the step kernel's points: start, slot known, programmatic wait done, first cursor
known, then per unit the producer's issue and the consumers' stage full and unit done, the
end, and the number of units the CTA took (with claimed units it differs from CTA to CTA); the
coefficient launch's: start, slot, cursor, end; the small kernel's (the table's choice at small
batches): start, programmatic wait done, slot known, its loads back, barrier passed, output
known, arrival known, end. One eager step of a slot set that
has not been touched for a few steps (so the checkpoint comes from DRAM) is printed as
percentiles over the CTAs, in µs from the first CTA's start. Eager: the launches do not overlap
as in a CUDA graph (the host packs the second launch's arguments for tens of µs), so read the
step kernel's own timeline, not the gap between the launches.

    python benchmarks/mamba2_cuda_trace.py --state f32 --batch 16 64
    python benchmarks/mamba2_cuda_trace.py --state f32 --batch 256 --static  # the CTAs' end spread, units in the fixed order
    python benchmarks/mamba2_cuda_trace.py --state f32 --batch 256 --graph   # the boundary between two graph-replayed steps

``--graph`` (the two launches' route): two consecutive steps captured in one CUDA graph, as the
benchmarks replay them (the next step's coefficient grid a programmatic dependent of the step
kernel before it), each step with its own trace buffer (:class:`StepBuffers`); after a few
replays the last is printed, both steps from one time origin: where the second step's
coefficient grid and step kernel start against the first step kernel's end is the fixed cost a
step pays around its kernel (kernel notes, "Session 74").

The instrumentation is applied by text (``traced_source``): a CPU test checks that every anchor
still matches the kernel and that the traced copy compiles.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

import cuda_trace  # noqa: E402
from cuda_trace import TIMER_HELPERS, percentiles  # noqa: E402
from trtllm_replayssm.bench import Mamba2DecodeCase  # noqa: E402
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc  # noqa: E402

STEP_SLOTS = 64  # trace words per step-kernel CTA: 0-3 prologue, 4+i issue, 20+i full, 36+i done, 52 end, 53 units
UNITS_TRACED = 16  # units per CTA with their own words
COEF_SLOTS = 4
COEF_OFFSET = 65536  # the coefficient CTAs' words start here
SMALL_SLOTS = 8  # trace words per small-kernel CTA (from word 0: the step kernel does not run then)
SMALL_POINTS = ("start", "programmatic wait", "slot", "loads back", "barrier", "output", "arrival", "end")

# (anchor in the kernel source, text that replaces it): each anchor must occur exactly once.
_PATCHES = (
    (
        '#include "mamba2_common.cuh"\n',
        '#include "mamba2_common.cuh"\n' + TIMER_HELPERS,
    ),
    (
        "    const int* __restrict__ slot_ids, int num_slots) {\n  // Launched programmatically",
        "    const int* __restrict__ slot_ids, int num_slots, u64* __restrict__ trace) {\n"
        f"  u64* tr = trace + {COEF_OFFSET} + (blockIdx.y * gridDim.x + blockIdx.x) * {COEF_SLOTS};\n"
        "  if (threadIdx.x == 0) tr[0] = gtime();\n  // Launched programmatically",
    ),
    (
        "  if (slot < 0) return;\n  // Two memory round trips",
        "  if (slot < 0) return;\n  if (threadIdx.x == 0) tr[1] = gtime();\n  // Two memory round trips",
    ),
    (
        "  const int w = cursor[slot];\n  if (cursor_out_of_range(w)) return;",
        "  const int w = cursor[slot];\n  if (threadIdx.x == 0 && w >= 0) tr[2] = gtime();\n  if (cursor_out_of_range(w)) return;",
    ),
    (
        "      if (lane + 32 * k < ROWS) xrec[lane + 32 * k] = xv[q][k];\n  }\n}",
        "      if (lane + 32 * k < ROWS) xrec[lane + 32 * k] = xv[q][k];\n  }\n  if (threadIdx.x == 0) tr[3] = gtime();\n}",
    ),
    (
        "    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch, int num_slots) {\n  extern __shared__",
        "    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch, int num_slots,\n"
        "    u64* __restrict__ trace) {\n"
        f"  u64* tr = trace + blockIdx.x * {STEP_SLOTS};\n  if (threadIdx.x == 0) tr[0] = gtime();\n  extern __shared__",
    ),
    (
        "    if (slot_l >= 0) w_l = cursor[slot_l];\n",
        "    if (lane == 0 && slot_l > -2) tr[1] = gtime();\n    if (slot_l >= 0) w_l = cursor[slot_l];\n",
    ),
    (
        '    asm volatile("griddepcontrol.wait;" ::: "memory");\n',
        '    asm volatile("griddepcontrol.wait;" ::: "memory");\n    if (lane == 0) tr[2] = gtime();\n',
    ),
    (
        "    auto fill_stage = [&](int i, int u, int slot, int w) {\n",
        "    auto fill_stage = [&](int i, int u, int slot, int w) {\n      if (lane == 0 && i == 0 && w >= 0) tr[3] = gtime();\n",
    ),
    (
        "      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);\n",
        "      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);\n"
        f"      if (lane == 0 && i < {UNITS_TRACED}) tr[4 + i] = gtime();\n",
    ),
    (
        "\n    mbar_wait(full, (i / STAGES) & 1);\n",
        f"\n    mbar_wait(full, (i / STAGES) & 1);\n    if (threadIdx.x == 0 && i < {UNITS_TRACED}) tr[20 + i] = gtime();\n",
    ),
    (
        "      if (lane == 0) mbar_arrive(empty);\n    }\n  }\n}",
        "      if (lane == 0) mbar_arrive(empty);\n    }\n"
        f"    if (threadIdx.x == 0 && i < {UNITS_TRACED}) tr[36 + i] = gtime();\n  }}\n"
        "  if (threadIdx.x == 0) tr[52] = gtime(), tr[53] = i;\n}",
    ),
    # The op's entries of launches 1 and 2 pass the trace buffer on to the bodies above.
    (
        "    const int* __restrict__ slot_ids) {\n  coefficients(",
        "    const int* __restrict__ slot_ids, u64* __restrict__ trace) {\n  coefficients(",
    ),
    ("sC_batch, sC_group, slot_ids, 0);", "sC_batch, sC_group, slot_ids, 0, trace);"),
    (
        "    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch) {\n  step(",
        "    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch, u64* __restrict__ trace) {\n  step(",
    ),
    ("so_batch, so_head, slot_ids, cursor, batch, 0);", "so_batch, so_head, slot_ids, cursor, batch, 0, trace);"),
    # The small kernel (words at the CTA's SMALL_SLOTS): 0 start, 1 programmatic wait done, 2 slot
    # known, 3 its loads back (thread 0's), 4 barrier passed, 5 output known, 6 arrival known, 7 end.
    (
        "    const int* __restrict__ slot_ids) {\n  __shared__ __align__(16) u16 xs[LP][SM_ROWS];",
        "    const int* __restrict__ slot_ids, u64* __restrict__ trace) {\n"
        f"  u64* tr = trace + (blockIdx.y * gridDim.x + blockIdx.x) * {SMALL_SLOTS};\n"
        "  if (threadIdx.x == 0) tr[0] = gtime();\n  __shared__ __align__(16) u16 xs[LP][SM_ROWS];",
    ),
    (
        "  const int team = t >> 3;  // B_j . C teams",
        "  if (threadIdx.x == 0) tr[1] = gtime();\n  const int team = t >> 3;  // B_j . C teams",
    ),
    (
        "  const bool live = slot >= 0;\n",
        "  const bool live = slot >= 0;\n  if (threadIdx.x == 0) tr[2] = gtime_after(slot);\n",
    ),
    (
        "  // SM_EARLY_MATH: the thread's own arithmetic",
        "  if (threadIdx.x == 0) tr[3] = gtime_after(w ^ ck[SM_CPT - 1].w ^ brec[0][0].x ^ xr.x ^ __float_as_uint(dtj));\n"
        "  // SM_EARLY_MATH: the thread's own arithmetic",
    ),
    (
        "  __syncthreads();\n  // Every thread's cursor read",
        "  __syncthreads();\n  if (threadIdx.x == 0) tr[4] = gtime();\n  // Every thread's cursor read",
    ),
    (
        "  if (!live) return;\n  if (p == 0) {",
        "  if (threadIdx.x == 0) tr[5] = gtime_after(__float_as_uint(y));\n  if (!live) return;\n  if (p == 0) {",
    ),
    (
        "  if (t == 0) advance_after_last_arrival(",
        "  if (threadIdx.x == 0) tr[6] = gtime_after(arrived);\n  if (t == 0) advance_after_last_arrival(",
    ),
    (
        "slot, w, LREC);\n}",
        "slot, w, LREC);\n  if (threadIdx.x == 0) tr[7] = gtime();\n}",
    ),
)


_KERNEL = cuda_trace.Instrumented(mc, _PATCHES, "mamba2_replay_step_traced.cu")
traced_source = _KERNEL.traced_source
write_traced_source = _KERNEL.write_traced_source
traced_kernels = _KERNEL.traced_kernels


class StepBuffers:
    """Trace buffers taken in turn by the launches of consecutive steps, two launches a step (the
    coefficient launch and the step kernel), so that each step of a captured sequence writes its
    own: passed as the trace argument, whose ``data_ptr`` (read once a launch, when its arguments
    are packed) names the buffer of the launch's step."""

    def __init__(self, steps: int, words: int, device):
        self.buffers = [torch.zeros(words, dtype=torch.int64, device=device) for _ in range(steps)]
        self.launches = 0

    def data_ptr(self) -> int:
        buffer = self.buffers[(self.launches // 2) % len(self.buffers)]
        self.launches += 1
        return buffer.data_ptr()


def trace_rows(trace: list) -> tuple:
    """A step's trace as the rows of the CTAs that ran (those with a start time): the step kernel's,
    then the coefficient launch's."""
    step = [trace[i : i + STEP_SLOTS] for i in range(0, COEF_OFFSET, STEP_SLOTS) if trace[i]]
    coef = [trace[i : i + COEF_SLOTS] for i in range(COEF_OFFSET, len(trace), COEF_SLOTS) if trace[i]]
    return step, coef


def first_start(step: list, coef: list) -> int:
    """The earliest start of a step's CTAs (rows of :func:`trace_rows`)."""
    return min(r[0] for r in step + coef)


def report(trace: list, units: int, t0: int = 0) -> None:
    """Percentiles of each trace point over the CTAs that ran (those with a start time), from
    ``t0`` (ns of %globaltimer; 0: the step's own first start)."""
    step, coef = trace_rows(trace)
    t0 = t0 or first_start(step, coef)
    rel = lambda words: [w - t0 for w in words if w]  # noqa: E731
    print(f"  {'(µs from the first start)':28s} {'min':>7} {'p50':>7} {'p90':>7} {'max':>7}")
    for k, name in enumerate(("coefficients: start", "coefficients: slot", "coefficients: cursor", "coefficients: end")):
        if coef:
            print(f"  {name:28s} {percentiles(rel(r[k] for r in coef))}")
    for k, name in enumerate(("step: start", "step: slot", "step: programmatic wait", "step: first cursor")):
        print(f"  {name:28s} {percentiles(rel(r[k] for r in step))}")
    for i in range(min(UNITS_TRACED, -(-units // len(step)))):
        for k, name in ((4, "issued"), (20, "full"), (36, "done")):
            print(f"  {f'unit {i}: {name}':28s} {percentiles(rel(r[k + i] for r in step))}")
    print(f"  {'step: end':28s} {percentiles(rel(r[52] for r in step))}")
    print(f"  {'step: units a CTA':28s} {percentiles([r[53] for r in step], scale=1)}")  # claimed units: uneven


def report_small(trace: list) -> None:
    """Percentiles of the small kernel's trace points over its CTAs."""
    ctas = [trace[i : i + SMALL_SLOTS] for i in range(0, COEF_OFFSET, SMALL_SLOTS) if trace[i]]
    t0 = min(r[0] for r in ctas)
    print(f"  {'(µs from the first start)':28s} {'min':>7} {'p50':>7} {'p90':>7} {'max':>7}")
    for k, name in enumerate(SMALL_POINTS):
        print(f"  {'small: ' + name:28s} {percentiles([r[k] - t0 for r in ctas if r[k]])}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8))
    ap.add_argument("--batch", type=int, nargs="+", default=[16])
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", default="bf16", choices=["bf16", "f32"])
    ap.add_argument(
        "--static", action="store_true", help="the table's launch with claimed_units off (units in the fixed order)"
    )
    ap.add_argument("--graph", action="store_true", help="two consecutive steps replayed from one CUDA graph")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("mamba2_cuda_trace: needs a CUDA GPU")
    with tempfile.TemporaryDirectory() as tmp:
        source = write_traced_source(tmp)
        for batch in args.batch:
            case = Mamba2DecodeCase(args.geometry, batch, args.L, args.state, "bf16")
            nheads, head_dim, d_state, _ = args.geometry
            cfg = mc.cuda_step_config(head_dim, d_state, args.L, batch, case.state.itemsize)
            if args.static and not cfg.small:
                cfg = dataclasses.replace(cfg, claimed_units=False)
            if args.graph:
                if cfg.small:
                    sys.exit(f"mamba2_cuda_trace: --graph traces the two launches; batch {batch} takes the small kernel")
                print(f"== {args.state} batch {batch} L {args.L} {cfg.label()}, two steps from one graph")
                graph_boundary(case, source, cfg, batch * nheads)
                continue
            trace = torch.zeros(2 * COEF_OFFSET, dtype=torch.int64, device="cuda")
            with traced_kernels(source, trace):
                for rep in range(len(case.slot_sets) + 1):  # compile, warm; the last set traced is the coldest
                    trace.zero_()
                    case.step("replay_step", case.slot_sets[rep % len(case.slot_sets)], cfg)
                    torch.cuda.synchronize()
            print(f"== {args.state} batch {batch} L {args.L} {cfg.label()}")
            (report_small(trace.cpu().tolist()) if cfg.small else report(trace.cpu().tolist(), batch * nheads))


def graph_boundary(case, source: str, cfg, units: int, replays: int = 4) -> None:
    """Two consecutive steps of ``case``'s first slot set captured in one CUDA graph, each with its
    own trace buffer; the last of ``replays`` replays printed from the first step's first start."""
    buffers = StepBuffers(2, 2 * COEF_OFFSET, "cuda")
    slots = case.slot_sets[0]
    with traced_kernels(source, buffers):
        for _ in range(2):  # compile and warm, eagerly
            case.step("replay_step", slots, cfg)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(2):
                case.step("replay_step", slots, cfg)
    for _ in range(replays):
        for b in buffers.buffers:
            b.zero_()
        graph.replay()
    torch.cuda.synchronize()
    traces = [b.cpu().tolist() for b in buffers.buffers]
    t0 = first_start(*trace_rows(traces[0]))
    for k, trace in enumerate(traces):
        print(f"-- graph step {k + 1} of 2")
        report(trace, units, t0)


if __name__ == "__main__":
    main()
