"""Timing of one SSM layer's decode and speculative verify steps on a GPU, and the logic behind
``trtllm-replayssm bench``.

The method, shared with the benchmarks in ``benchmarks/`` (they import these pieces):

- every route's step is captured in a CUDA graph of one step per *slot set*: disjoint random
  sets of ``batch`` slots whose states fill :data:`POOL_BYTES` (several times a GPU's L2), so
  consecutive steps read their state from HBM, as in a model where other layers run in between;
- replay cursors start spread over [0, L) and advance every step, so flushes come at their
  real share;
- each figure is the median of 5 medians of ``triton.testing.do_bench``; ratios are taken
  within one run, and bandwidth is compared with a device-to-device copy timed in the same run;
- a refcheck of the replay outputs against the conventional ones precedes the timing.

Bytes moved come from :mod:`trtllm_replayssm.memory` (the planner's model).

Modules: :mod:`.timing` (the method), :mod:`.results` (files and plots), :mod:`.decode_cases`
and :mod:`.verify_cases` (one layer's steps on a GPU), :mod:`.command` (``trtllm-replayssm bench``).
"""

from __future__ import annotations

from .timing import POOL_BYTES, REFCHECK_TOL, DT, copy_bandwidth, slot_sets, time_graph
from .results import header, results_stem, write_json, plot_speedups
from .decode_cases import DecodeCase, Mamba2DecodeCase, GatedDeltaDecodeCase
from .verify_cases import VERIFY_ROUTES, model_geometry, VerifyCase, Mamba2VerifyCase, DeltaVerifyCase, make_verify_case
from .command import case_geometry, bench_plan, run_bench, format_bench, plot_bench

__all__ = [
    "POOL_BYTES",
    "REFCHECK_TOL",
    "DT",
    "copy_bandwidth",
    "slot_sets",
    "time_graph",
    "header",
    "results_stem",
    "write_json",
    "plot_speedups",
    "DecodeCase",
    "Mamba2DecodeCase",
    "GatedDeltaDecodeCase",
    "VERIFY_ROUTES",
    "model_geometry",
    "VerifyCase",
    "Mamba2VerifyCase",
    "DeltaVerifyCase",
    "make_verify_case",
    "case_geometry",
    "bench_plan",
    "run_bench",
    "format_bench",
    "plot_bench",
]
