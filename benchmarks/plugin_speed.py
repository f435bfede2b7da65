"""The Mamba-2 replay step as a TensorRT engine runs it, against the op, in the same run (GPU, sm_90).

The exported AOT plugin PTX is launched through the CUDA driver exactly as TensorRT launches an
AOT plugin (the plugin's grid, block, shared memory and argument list; no programmatic dependent
launch), captured in CUDA graphs with the op's routes and timed in interleaved rounds
(benchmarks/peers_mamba2.py's ``time_interleaved``): what an engine's Mamba-2 layer would run at,
without TensorRT. Routes, per batch (Nemotron-3-Super's geometry, bf16 activations, a bf16
checkpoint, L 16 by default; a >= 512 MiB slot pool rotated across steps, cursors spread):

    conventional  the op's conventional bf16 step
    op            the op's replay step (its CUDA route: programmatic launches)
    aot cuda      add_mamba2_replay_step_cuda's two layers (plugins/mamba2_cuda.py)
    aot triton    add_mamba2_replay_step's one layer (the Triton PTX, launch configuration for the batch)

Before timing, each plugin route runs 2L + 1 steps on a copy of the case (same seed) beside the
op and its largest output difference is printed (aot cuda: expected 0, the same code). The plugin
package is imported from the checkout as the GPU tests import it (tests/plugins/plugin_cases.py).

    python benchmarks/plugin_speed.py --batch 1 16 64 256 512
"""

from __future__ import annotations

import argparse
import os
import sys

from functools import partial

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests", "plugins")]

from harness import copy_bandwidth, header, results_stem, write_json  # noqa: E402
from peers_mamba2 import Route, capture, time_interleaved  # noqa: E402
from plugin_cases import info_of  # noqa: E402  (also makes trtllm_replayssm_plugins importable)
from trtllm_replayssm.bench import Mamba2DecodeCase  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay_cuda import coefficient_floats  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import CudaKernel, KernelArgs  # noqa: E402
from trtllm_replayssm_plugins import mamba2, mamba2_cuda  # noqa: E402

GEOMETRY = (128, 64, 128, 8)  # Nemotron-3-Super at TP = 1: nheads, head_dim, d_state, ngroups


def load_ptx(compiled) -> CudaKernel:
    """The exported PTX's entry, loaded as TensorRT loads it (cuModuleLoadData: the driver's JIT)."""
    from cuda.bindings import driver

    err, module = driver.cuModuleLoadData(compiled.ptx.encode())
    if int(err) == 0:
        err, function = driver.cuModuleGetFunction(module, compiled.kernel_name.encode())
    if int(err) != 0:
        raise RuntimeError(f"plugin_speed: loading {compiled.kernel_name} failed: {err!r}")
    return CudaKernel(function, compiled.shared_mem)


class PluginLaunch:
    """One plugin layer's launch on torch's current stream: its kernel, grid, block and shared
    memory, and per call the input tensors and outputs (TensorRT's argument order)."""

    def __init__(self, spec, compiled):
        self.spec, self.kernel, self.smem = spec, load_ptx(compiled), compiled.shared_mem

    def __call__(self, inputs, outputs):
        shapes = [tuple(t.shape) for t in inputs]
        args = KernelArgs()
        for t in inputs:
            args.ptr(t)
        for v in self.spec.scalar_values(shapes):
            args.i32(v)
        for t in outputs:
            args.ptr(t)
        stream = torch.cuda.current_stream().cuda_stream
        self.kernel.launch(self.spec.grid_values(shapes), self.spec.block[0], self.smem, stream, args)


class CudaLayers:
    """add_mamba2_replay_step_cuda's two layers on a decode case's tensors."""

    def __init__(self, case):
        cu = mamba2_cuda
        self.case = case
        a = self.attrs = cu.Mamba2CudaAttrs.for_layer(*GEOMETRY, case.L, state_dtype="bf16", batch_hint=case.batch)
        c = case.cache
        self.tensors = dict(
            checkpoint=c.checkpoint, x_records=c.x_records, dt_records=c.dt_records, B_records=c.B_records,
            cursor=c.cursor, x=case.x, dt=case.dt, A=case.A, B=case.B, C=case.C, D=case.D, dt_bias=case.dt_bias,
            z=case.x, tensor_maps=torch.from_numpy(cu.map_template(a, "bf16")).cuda(),
            coef=torch.empty((case.batch, a.nheads, coefficient_floats(case.L)), device="cuda"),
            c_rows=torch.empty((case.batch, a.ngroups, a.d_state), dtype=torch.bfloat16, device="cuda"),
        )  # fmt: skip
        self.scratch = torch.empty((a.grid, 2, cu.MAP_WORDS), dtype=torch.int32, device="cuda")
        self.launches = []
        for layer in (cu.COEFFICIENTS, cu.STEP):
            spec = layer.kernel_spec(a, [info_of(self._input(layer, n, case.slot_sets[0])) for n in layer.INPUTS])
            self.launches.append((layer, PluginLaunch(spec, layer.compile_kernel(spec, 90))))

    def _input(self, layer, name, slots):
        return slots if name == "slot_ids" else self.tensors[name]

    def step(self, slots):
        t = self.tensors
        outputs = {
            "mamba2_replay_coefficients": [t["coef"], t["c_rows"], t["x_records"], t["dt_records"], t["B_records"]],
            "mamba2_replay_step_cuda": [self.case.out, t["checkpoint"], t["cursor"], self.scratch],
        }
        for layer, launch in self.launches:
            launch([self._input(layer, n, slots) for n in layer.INPUTS], outputs[layer.PLUGIN])


class TritonLayer:
    """add_mamba2_replay_step's one layer (the Triton entry's PTX) on a decode case's tensors."""

    def __init__(self, case):
        self.case = case
        a = mamba2.Mamba2ReplayAttrs.for_layer(*GEOMETRY, case.L, state_dtype="bf16", batch_hint=case.batch)
        self.extra = torch.empty(case.batch, dtype=torch.int32, device="cuda")  # output 7: unused without fp8
        spec = mamba2.kernel_spec(a, [info_of(t) for t in self._inputs(case.slot_sets[0])])
        self.launch = PluginLaunch(spec, mamba2.compile_kernel(spec, 90))

    def _inputs(self, slots):
        c, case = self.case.cache, self.case
        tensors = dict(checkpoint=c.checkpoint, x_records=c.x_records, dt_records=c.dt_records, B_records=c.B_records,
                       cursor=c.cursor, arrivals=c.arrivals, x=case.x, dt=case.dt, A=case.A, B=case.B, C=case.C,
                       slot_ids=slots, D=case.D, dt_bias=case.dt_bias)  # fmt: skip
        return mamba2.plugin_inputs(tensors)[0]

    def step(self, slots):
        ins = self._inputs(slots)
        c = self.case.cache
        outs = [self.case.out, c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, self.extra]
        self.launch(ins, outs)


def largest_difference(batch: int, L: int, plugin) -> float:
    """Max |y - y_op| over 2L + 1 steps of two copies of one case (same seed), one stepped by the
    op and one by ``plugin`` (a class above), with the same slot sets."""
    op, other = Mamba2DecodeCase(GEOMETRY, batch, L, "bf16", "bf16"), Mamba2DecodeCase(GEOMETRY, batch, L, "bf16", "bf16")
    route = plugin(other)
    worst = 0.0
    for i in range(2 * L + 1):
        slots = op.slot_sets[i % len(op.slot_sets)]
        op.step("replay_step", slots)
        route.step(slots)
        torch.cuda.synchronize()
        worst = max(worst, float((op.out.float() - other.out.float()).abs().max()))
    del op, other, route
    torch.cuda.empty_cache()
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        sys.exit("plugin_speed: needs an sm_90 GPU (the CUDA step's export is for sm_90a)")
    copy_bw = copy_bandwidth()
    print(header("plugin_speed", copy_bw))
    plugins = {"aot cuda": CudaLayers, "aot triton": TritonLayer}
    for batch in args.batch:
        for name, plugin in plugins.items():
            print(f"# batch {batch}: {name} max |y - y_op| over {2 * args.L + 1} steps = "
                  f"{largest_difference(batch, args.L, plugin):.3e}")  # fmt: skip
    print(f"{'batch':>6} {'route':>13} {'us/step':>9} {'x conv':>8} {'x op':>8}")
    rows = []
    for batch in args.batch:
        case = Mamba2DecodeCase(GEOMETRY, batch, args.L, "bf16", "bf16")
        steppers = {"conventional": partial(case.step, "decode_step"), "op": partial(case.step, "replay_step")}
        steppers.update({name: plugin(case).step for name, plugin in plugins.items()})
        routes = {name: Route([partial(f, s) for s in case.slot_sets]) for name, f in steppers.items()}
        graphs = {name: capture(r) for name, r in routes.items()}
        times = time_interleaved(graphs, {n: len(routes[n].steps) for n in graphs})
        for name, (seconds, samples) in times.items():
            row = dict(batch=batch, L=args.L, route=name, seconds=seconds, samples_ms=samples,
                       vs_conventional=times["conventional"][0] / seconds, vs_op=times["op"][0] / seconds)  # fmt: skip
            rows.append(row)
            print(f"{batch:>6} {name:>13} {seconds * 1e6:9.2f} {row['vs_conventional']:8.3f} {row['vs_op']:8.3f}")
        del case, graphs, routes, steppers
        torch.cuda.empty_cache()
    stem = results_stem(args.out_dir, "plugin_speed")
    write_json(stem, copy_bw, rows, L=args.L)
    print(f"# wrote {stem}.json")
    print("# repro: python benchmarks/plugin_speed.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
