"""Per-unit timeline of the CUDA GDN / KDA replay step in one launch with coefficient warps (GPU,
sm_90): where a unit's time goes between the producer, the coefficient warps and the consumers.

A copy of ``kernels/cuda/gated_delta_replay_step.cu`` with ``%clock64`` reads (the SM's cycles; only
differences within a CTA are used) at fixed points, each CTA writing its own row of a trace buffer
(one more kernel parameter). Per unit i of a CTA (the first UNITS_TRACED):

    issued     the producer has its stage (empty passed) and starts the unit's copies
    w          the unit's cursor (L - 1: the unit flushes)
    recs       the coefficient warps have the records and inputs (their recs wait passed)
    ready      coefficient thread 0 is done (just before its ready arrival; each coefficient thread
               arrives once its own part is written)
    full       consumer warp 0 has the checkpoint (full passed)
    go         consumer warp 0 has the coefficients (ready passed)
    released   consumer warp 0 gave the stage back (a unit that does not flush: once read)
    done       consumer warp 0 is through the unit
    folded     a flush unit: consumer warp 0 has folded its rows (before their store)
    stored     a flush unit: consumer warp 0's store has read its rows (the stage may be reused)
    scanned    coefficient thread 0 has scanned its column (records' decays and score sums; this
               point, reduced and scaled are not reached with rec_warps, GDN's table form in one
               launch since session 54: they stay 0 and scan, reduce, scale and finish print
               nothing)
    reduced    the coefficient warps' first barrier passed (scores reduce-scattered, norms summed)
    scaled     coefficient thread 0 has scaled its column of the qk block (before the scores' sums;
               GDN with two coefficient warps or more: its warp forms the decays next instead, the
               others scale)

One eager step of a slot set that has not been touched for a few steps (the state comes from
DRAM) with the case's spread, advancing cursors (``--cursors W`` pins them). Printed over the
traced units from the fourth on (the ring full; ``--first-unit`` moves it), flush units apart, as
percentiles in µs at the SM clock the launch ran at (its cycles over the %globaltimer across each
CTA's run, printed first; ``--clock-mhz`` sets another: a kernel with tensor-core instructions
ran at ~1.80 GHz on an H100 where one without ran at ~1.95, kernel notes "Session 64"):

    records     recs - issued        the copies' latency, as the coefficient warps see it
    coef idle   recs - ready(i-1)    coefficient warps waiting for the records
    coef        ready - recs         forming the unit's coefficients
    wait full   full - done(i-1)     consumers waiting for the checkpoint
    wait coef   go - full            consumers waiting for the coefficients (0 when they were first)
    consume     done - go            the consumers' own work
    fold        folded - go          a flush unit's fold, up to its store
    store       stored - folded      a flush unit's store: issue, then the wait for its read
    scan        scanned - recs       the coefficients' column pass (thread 0's)
    reduce      reduced - scanned    reduce-scatter, norms, first barrier
    scale       scaled - reduced     norms applied, the qk block scaled (thread 0's; GDN, two
                                     warps or more: the norms only)
    finish      ready - scaled       (GDN, two warps or more: the decays,) the scores' sums, the
                                     block's scalars, second barrier
    period      done - done(i-1)     one unit, as the consumers see it

At small batches a CTA has a few units and the ring never fills: ``--timeline N`` also prints, for
each of the first N units, when each point came after the CTA's start (its first instruction):
the chain from the launch to the unit's output.

    python benchmarks/delta_cuda_trace.py --family kda --state fp8 --batch 256

Only builds with coefficient warps (KDA's table) reach every point; others leave the coefficient
words empty. The instrumentation is applied by text (``traced_source``): a CPU test checks that
every anchor still matches the kernel and that the traced copy compiles.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

import cuda_trace  # noqa: E402
from cuda_trace import TIMER_HELPERS, percentiles  # noqa: E402
from delta_cuda_probe import GEOMETRY, case_config, parse_config  # noqa: E402
from trtllm_replayssm.bench import DT, GatedDeltaDecodeCase  # noqa: E402
from trtllm_replayssm.kernels import gated_delta_replay_cuda as gc  # noqa: E402

SLOTS = 320  # trace words per CTA
MAX_CTAS = 1024  # the trace buffer's rows (the persistent grid is a few CTAs a multiprocessor)
UNITS_TRACED = 24
POINTS = (
    "issued",
    "w",
    "recs",
    "ready",
    "full",
    "go",
    "released",
    "done",
    "folded",
    "stored",
    "scanned",
    "reduced",
    "scaled",
)  # word POINT_BASE + k * 24 + i
POINT_BASE = 8
WORD = {name: POINT_BASE + k * UNITS_TRACED for k, name in enumerate(POINTS)}

_T = f"i < {UNITS_TRACED}"
# (anchor in the kernel source, text that replaces it): each anchor must occur exactly once.
_PATCHES = (
    (
        '#include "delta_records.cuh"\n',
        '#include "delta_records.cuh"\n' + TIMER_HELPERS + "__shared__ u64 coef_phase[3];  // unit_coefficients' points\n",
    ),
    (
        "  // Lane l < 16 of chunk c0 holds the warp's part of record c0 + l's q score, lane 16 + l its k score.\n",
        "  if (tid == 0) coef_phase[0] = clk();\n"
        "  // Lane l < 16 of chunk c0 holds the warp's part of record c0 + l's q score, lane 16 + l its k score.\n",
    ),
    (
        "  float rq, rk;\n  nqk = summed_norms(rn, scale, rq, rk);\n",
        "  if (tid == 0) coef_phase[1] = clk();\n  float rq, rk;\n  nqk = summed_norms(rn, scale, rq, rk);\n",
    ),
    (
        "#if DECAYS_LATE\n  // The scores: the first warp, after its decays.\n",
        "  if (tid == 0) coef_phase[2] = clk();\n#if DECAYS_LATE\n  // The scores: the first warp, after its decays.\n",
    ),
    (
        "    int* __restrict__ arrivals, float scale) {\n  extern __shared__ unsigned char smem_raw[];\n",
        "    int* __restrict__ arrivals, float scale, u64* __restrict__ trace) {\n"
        f"  u64* tr = trace + blockIdx.x * {SLOTS};\n"
        "  if (threadIdx.x == 0) { tr[0] = clk(); tr[1] = gtime(); coef_phase[0] = coef_phase[1] = coef_phase[2] = 0; }\n"
        "  extern __shared__ unsigned char smem_raw[];\n",
    ),
    (
        "      mbar_wait(BAR_RECS(st), ((i / STAGES) & 1) ^ warm);  // the records and inputs: the checkpoint may still be on its way\n",
        "      mbar_wait(BAR_RECS(st), ((i / STAGES) & 1) ^ warm);  // the records and inputs: the checkpoint may still be on its way\n"
        f"      if (threadIdx.x == CONSUMERS * 32 && {_T}) tr[{WORD['recs']} + i] = clk();\n",
    ),
    (
        "      mbar_arrive(BAR_READY(st));\n",
        f"      if (threadIdx.x == CONSUMERS * 32 && {_T}) {{ tr[{WORD['ready']} + i] = clk();"
        f" if (slot >= 0) {{ tr[{WORD['scanned']} + i] = coef_phase[0]; tr[{WORD['reduced']} + i] = coef_phase[1];"
        f" tr[{WORD['scaled']} + i] = coef_phase[2]; }} }}\n"
        "      mbar_arrive(BAR_READY(st));\n",
    ),
    (
        "      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);\n",
        "      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);\n"
        f"      if (lane == 0 && {_T}) {{ tr[{WORD['issued']} + i] = clk(); tr[{WORD['w']} + i] = (u64)(w + 1); }}\n",
    ),
    (
        "#else\n    mbar_wait(full, ((i / STAGES) & 1) ^ warm);\n#if COEF_WARPS\n"
        "    mbar_wait(BAR_READY(st), (i / STAGES) & 1);  // the coefficient warps are done with it\n#endif\n",
        "#else\n    mbar_wait(full, ((i / STAGES) & 1) ^ warm);\n"
        f"    if (threadIdx.x == 0 && {_T}) tr[{WORD['full']} + i] = clk();\n#if COEF_WARPS\n"
        "    mbar_wait(BAR_READY(st), (i / STAGES) & 1);  // the coefficient warps are done with it\n"
        f"    if (threadIdx.x == 0 && {_T}) tr[{WORD['go']} + i] = clk();\n#endif\n",
    ),
    (
        "        store_warp_rows(&ckpt_store, stage, NBOX, ROWS * 128, BOXC, r0, part * ROWS + r0, h, slot, lane);\n",
        f"        if (threadIdx.x == 0 && {_T}) tr[{WORD['folded']} + i] = clk();\n"
        "        store_warp_rows(&ckpt_store, stage, NBOX, ROWS * 128, BOXC, r0, part * ROWS + r0, h, slot, lane);\n"
        f"        if (threadIdx.x == 0 && {_T}) tr[{WORD['stored']} + i] = clk();\n",
    ),
    (
        "      if (released) {\n        __syncwarp();\n        if (lane == 0) mbar_arrive(empty);\n      }\n",
        "      if (released) {\n        __syncwarp();\n        if (lane == 0) mbar_arrive(empty);\n"
        f"        if (threadIdx.x == 0 && {_T}) tr[{WORD['released']} + i] = clk();\n      }}\n",
    ),
    (
        "    if (!released) {\n      __syncwarp();\n      if (lane == 0) mbar_arrive(empty);\n    }\n  }\n}\n",
        "    if (!released) {\n      __syncwarp();\n      if (lane == 0) mbar_arrive(empty);\n"
        f"      if (threadIdx.x == 0 && {_T}) tr[{WORD['released']} + i] = clk();\n    }}\n"
        f"    if (threadIdx.x == 0 && {_T}) tr[{WORD['done']} + i] = clk();\n  }}\n"
        "  if (threadIdx.x == 0) { tr[2] = clk(); tr[3] = gtime(); }\n}\n",
    ),
)


_KERNEL = cuda_trace.Instrumented(gc, _PATCHES, "gated_delta_replay_step_traced.cu")
traced_source = _KERNEL.traced_source
write_traced_source = _KERNEL.write_traced_source
traced_kernels = _KERNEL.traced_kernels


# (interval, later point, earlier point): a point is (name, unit offset: 0 this unit, -1 the one before)
INTERVALS = (
    ("records", ("recs", 0), ("issued", 0)),
    ("coef idle", ("recs", 0), ("ready", -1)),
    ("coef", ("ready", 0), ("recs", 0)),
    ("scan", ("scanned", 0), ("recs", 0)),
    ("reduce", ("reduced", 0), ("scanned", 0)),
    ("scale", ("scaled", 0), ("reduced", 0)),
    ("finish", ("ready", 0), ("scaled", 0)),
    ("wait full", ("full", 0), ("done", -1)),
    ("wait coef", ("go", 0), ("full", 0)),
    ("consume", ("done", 0), ("go", 0)),
    ("fold", ("folded", 0), ("go", 0)),
    ("store", ("stored", 0), ("folded", 0)),
    ("period", ("done", 0), ("done", -1)),
)


def unit_intervals(rows, L: int, first: int = 3):
    """{interval: ([cycles of units that do not flush], [cycles of flush units])} over the traced
    units ``first``.. of every CTA row (a list of SLOTS words; by default from the fourth on, the
    ring full); an interval is later - earlier (0 where the earlier point came later: wait coef when
    the coefficients were first), left out where a point it reads was not reached (0) or lies
    before the CTA's first unit."""
    out = {name: ([], []) for name, _, _ in INTERVALS}
    for row in rows:
        p = {name: row[WORD[name] : WORD[name] + UNITS_TRACED] for name in POINTS}
        for i in range(first, UNITS_TRACED):
            if not p["w"][i] or not p["done"][i]:
                continue
            flush = p["w"][i] - 1 == L - 1
            for name, (a, da), (b, db) in INTERVALS:
                if i + db >= 0 and p[a][i + da] and p[b][i + db]:
                    out[name][flush].append(max(0, p[a][i + da] - p[b][i + db]))
    return out


# The points of a CTA's timeline from its start (``since_start``), in the order a unit reaches them
# at batch 1 (the coefficient pass's phases too: at small batches each CTA's first unit is the
# only one traced past the ring's fill).
TIMELINE_POINTS = ("issued", "recs", "scanned", "reduced", "scaled", "full", "ready", "go", "folded", "done")


def since_start(rows, units: int):
    """{(point, i): [cycles from the CTA's start (word 0) to ``point`` of its unit i]} for i < ``units``
    over the CTA rows, a point left out where not reached: at small batches, where a CTA has a few
    units, the chain from the launch to each unit's output."""
    out = {(name, i): [] for name in TIMELINE_POINTS for i in range(units)}
    for row in rows:
        for name in TIMELINE_POINTS:
            for i in range(units):
                if row[WORD[name] + i]:
                    out[name, i].append(row[WORD[name] + i] - row[0])
    return out


def measured_clock_mhz(rows) -> float:
    """The SM clock the traced launch ran at, in MHz: the cycles over the %globaltimer nanoseconds
    of every CTA's run (words 0 and 2: its first and last clock reads; 1 and 3: the timer beside
    them), summed over the CTA rows (0: no CTA has both). The timer ticks coarsely (~1 µs on some
    GPUs): a CTA's run is tens of µs, and the sums average the ticks out."""
    cycles = sum(r[2] - r[0] for r in rows if r[2] and r[3])
    ns = sum(r[3] - r[1] for r in rows if r[2] and r[3])
    return 1e3 * cycles / ns if ns > 0 else 0.0


def report(trace: list, L: int, clock_mhz: float, first: int = 3, timeline: int = 0) -> None:
    """Percentiles and means of each interval over units ``first``.. (µs at ``clock_mhz``; 0: at the
    clock the launch ran at, :func:`measured_clock_mhz`), units that do not flush and flush units
    apart; then, for ``timeline`` > 0, each point of the CTAs' first ``timeline`` units from the
    CTA's start."""
    rows = [trace[c : c + SLOTS] for c in range(0, len(trace), SLOTS) if trace[c]]
    measured = measured_clock_mhz(rows)
    clock_mhz = clock_mhz or measured
    if not clock_mhz:
        raise ValueError("delta_cuda_trace.report: no CTA recorded its run's clock and timer; pass clock_mhz")
    scale = clock_mhz  # cycles per µs
    print(f"  {len(rows)} CTAs; the SM clock measured over their runs: {measured:.0f} MHz")
    print(f"  µs at {clock_mhz:.0f} MHz: min / p50 / p90 / max (mean); units {first}..")
    for name, (plain, flush) in unit_intervals(rows, L, first).items():
        for label, v in (("", plain), (" (flush)", flush)):
            if v:
                print(f"  {name + label:20s} {percentiles(v, scale)}  ({statistics.fmean(v) / scale:6.2f}, n {len(v)})")
    if timeline:
        print("  from the CTA's start, µs: min / p50 / p90 / max (n)")
        for (name, i), v in since_start(rows, timeline).items():
            if v:
                print(f"  unit {i} {name:8s} {percentiles(v, scale)}  (n {len(v)})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(GEOMETRY), default="kda")
    ap.add_argument("--batch", type=int, nargs="+", default=[256])
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", default="fp8", choices=list(DT))
    ap.add_argument("--cursors", type=int, default=None, help="pin every replay cursor to this value")
    ap.add_argument("--config", type=parse_config, default=None, help="a CUDA launch (default: the launch table's)")
    ap.add_argument(
        "--clock-mhz", type=float, default=0.0, help="cycles per µs (default: the clock the launch ran at, measured)"
    )
    ap.add_argument("--first-unit", type=int, default=3, help="the intervals over each CTA's units from this one on")
    ap.add_argument("--timeline", type=int, default=0, help="print each CTA's first N units' points from its start")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("delta_cuda_trace: needs a CUDA GPU")
    geometry = GEOMETRY[args.family]
    with tempfile.TemporaryDirectory() as tmp:
        source = write_traced_source(tmp)
        for batch in args.batch:
            case = GatedDeltaDecodeCase(args.family, geometry, batch, args.L, args.state, "bf16")
            cfg = case_config(args.config or "table", geometry, args.L, batch, case.state.itemsize, args.family == "kda")
            trace = torch.zeros(MAX_CTAS * SLOTS, dtype=torch.int64, device="cuda")
            with traced_kernels(source, trace):
                for rep in range(len(case.slot_sets) + 1):  # compile, warm; the last set traced is the coldest
                    if args.cursors is not None:
                        case.cache.cursor.fill_(args.cursors)
                    trace.zero_()
                    case.step("replay_step", case.slot_sets[rep % len(case.slot_sets)], cfg)
                    torch.cuda.synchronize()
            print(
                f"== {args.family} {args.state} batch {batch} L {args.L} {cfg.label()}"
                f"{'' if args.cursors is None else f' cursors {args.cursors}'}"
            )
            report(trace.cpu().tolist(), args.L, args.clock_mhz, args.first_unit, args.timeline)


if __name__ == "__main__":
    main()
