"""Build a tiny TensorRT engine around the ``replayssm::mamba2_replay_step`` AOT plugin and run
it step by step against the PyTorch op (``trtllm_replayssm.ops.mamba2_replay_step``).

    pip install -e ".[tensorrt]"
    python examples/trt_engine_mamba2.py [--steps 10] [--save-engine mamba2_replay.engine]
    python examples/trt_engine_mamba2.py --kernel cuda     # the CUDA step's two layers (sm_90)

Needs TensorRT >= 10.9 and a CUDA GPU (``--kernel cuda``: an sm_90 one, a bf16 checkpoint);
anywhere else it prints why it skips and exits 0.
The engine holds the kernel's PTX, so a saved engine runs in ``trtexec`` or the C++ runtime
without Python or a plugin library. The caches are network inputs whose aliased plugin outputs
are marked as network outputs and bound to the same addresses: the engine updates them in place.
"""

import argparse
import sys


def _skip_reason():
    try:
        import tensorrt as trt
    except ImportError:
        return "TensorRT is not installed (pip install 'trtllm_replayssm[tensorrt]')"
    from trtllm_replayssm_plugins.tensorrt_plugin import MIN_TENSORRT_AOT, version_tuple

    if version_tuple(trt.__version__) < MIN_TENSORRT_AOT:
        return f"TensorRT {trt.__version__} has no AOT plugins (needs >= 10.9)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="decode steps to run (default: 10, L = 4)")
    parser.add_argument("--save-engine", default=None, help="write the serialized engine here")
    parser.add_argument(
        "--kernel",
        choices=("triton", "cuda"),
        default="triton",
        help="triton: add_mamba2_replay_step (fp32 checkpoint); cuda: add_mamba2_replay_step_cuda (bf16 checkpoint, "
        "sm_90) (default: triton)",
    )
    args = parser.parse_args(argv)
    try:
        reason = _skip_reason()
    except ImportError as e:
        reason = f"trtllm_replayssm_plugins is not importable ({e}); pip install -e ."
    if not reason and args.kernel == "cuda":
        import torch

        if torch.cuda.get_device_capability() != (9, 0):
            reason = f"--kernel cuda needs an sm_90 GPU; this one is {torch.cuda.get_device_capability()}"
    if reason:
        print(f"skipped: {reason}")
        return 0

    import tensorrt as trt
    import torch

    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.ops import mamba2_replay_step
    from trtllm_replayssm_plugins import mamba2
    from trtllm_replayssm_plugins.network import add_mamba2_replay_step, add_mamba2_replay_step_cuda

    nheads, head_dim, d_state, ngroups, L, num_slots = 8, 64, 64, 2, 4, 6
    max_batch = 4
    state_dtype = torch.bfloat16 if args.kernel == "cuda" else torch.float32
    cache = Mamba2ReplayCache.allocate(
        num_slots, nheads, head_dim, d_state, ngroups, L, state_dtype=state_dtype, act_dtype=torch.bfloat16, device="cuda"
    )
    cache.checkpoint.normal_()
    A = -(torch.rand(nheads, device="cuda") + 1.0)
    D = torch.randn(nheads, device="cuda")
    dt_bias = torch.rand(nheads, device="cuda") - 4.0
    ref = Mamba2ReplayCache(**{n: getattr(cache, n).clone() for n in mamba2.INPUTS[:6]})

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    to_trt = {torch.float32: trt.float32, torch.bfloat16: trt.bfloat16, torch.int32: trt.int32}
    shapes = dict(
        x=(-1, nheads, head_dim),
        dt=(-1, nheads),
        B=(-1, ngroups, d_state),
        C=(-1, ngroups, d_state),
        z=(-1, nheads, head_dim),
        slot_ids=(-1,),
    )
    dtypes = dict(
        x=torch.bfloat16, dt=torch.bfloat16, B=torch.bfloat16, C=torch.bfloat16, z=torch.bfloat16, slot_ids=torch.int32
    )
    cache_inputs = mamba2.INPUTS[:5] if args.kernel == "cuda" else mamba2.INPUTS[:6]
    tensors = {n: network.add_input(n, to_trt[getattr(cache, n).dtype], tuple(getattr(cache, n).shape)) for n in cache_inputs}
    tensors.update(
        {n: network.add_input(n, to_trt[t.dtype], tuple(t.shape)) for n, t in dict(A=A, D=D, dt_bias=dt_bias).items()}
    )
    tensors.update({n: network.add_input(n, to_trt[dtypes[n]], s) for n, s in shapes.items()})
    common = dict(slot_ids=tensors["slot_ids"], D=tensors["D"], z=tensors["z"], dt_bias=tensors["dt_bias"])
    if args.kernel == "cuda":
        # no arrivals: the two launches neither read nor write it (not a network input here)
        layer = add_mamba2_replay_step_cuda(
            network, *(tensors.get(n) for n in mamba2.INPUTS[:11]), **common, batch_hint=max_batch,
            name="mamba2_replay_step",
        )  # fmt: skip
        cache_outputs = mamba2.INPUTS[:5]
    else:
        layer = add_mamba2_replay_step(
            network, *(tensors[n] for n in mamba2.INPUTS[:11]), **common, batch_hint=max_batch, aot=True,
            name="mamba2_replay_step",
        )  # fmt: skip
        cache_outputs = mamba2.INPUTS[:6]
    out_names = ["y"] + [f"{n}_out" for n in cache_outputs]
    for i, name in enumerate(out_names):
        layer.get_output(i).name = name
        network.mark_output(layer.get_output(i))

    config = builder.create_builder_config()
    config.set_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True)
    profile = builder.create_optimization_profile()
    for n, s in shapes.items():
        profile.set_shape(n, (1,) + s[1:], (max_batch,) + s[1:], (max_batch,) + s[1:])
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        print("FAILED: TensorRT could not build the engine (see its log above)")
        return 1
    if args.save_engine:
        with open(args.save_engine, "wb") as f:
            f.write(serialized)
        print(f"engine written to {args.save_engine}")

    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    context = engine.create_execution_context()
    stream = torch.cuda.Stream()
    g = torch.Generator(device="cuda").manual_seed(0)
    flushes, worst = 0, 0.0
    slot_ids = torch.tensor([4, -1, 0, 2], dtype=torch.int32, device="cuda")
    for step in range(args.steps):
        inp = {
            n: torch.randn((max_batch,) + s[1:], device="cuda", generator=g).to(dtypes[n])
            for n, s in shapes.items()
            if n != "slot_ids"
        }
        inp["slot_ids"] = slot_ids
        y = torch.full_like(inp["x"], 42.0)
        y_ref = y.clone()
        flushes += int((cache.cursor[slot_ids[slot_ids >= 0].long()] == L - 1).sum())
        bound = {**{n: getattr(cache, n) for n in cache_inputs}, "A": A, "D": D, "dt_bias": dt_bias, **inp}
        for n, t in bound.items():
            if n in shapes:
                context.set_input_shape(n, tuple(t.shape))
            context.set_tensor_address(n, t.data_ptr())
        context.set_tensor_address("y", y.data_ptr())
        for n in cache_outputs:
            context.set_tensor_address(f"{n}_out", getattr(cache, n).data_ptr())  # in place
        if not context.execute_async_v3(stream.cuda_stream):
            print(f"FAILED: execute_async_v3 returned False at step {step}")
            return 1
        stream.synchronize()
        mamba2_replay_step(
            ref, inp["x"], inp["dt"], A, inp["B"], inp["C"], slot_ids=slot_ids, D=D, z=inp["z"], dt_bias=dt_bias, out=y_ref
        )
        torch.cuda.synchronize()
        same = torch.equal(y, y_ref) and all(torch.equal(getattr(cache, n), getattr(ref, n)) for n in mamba2.INPUTS[:6])
        worst = max(worst, float((y.float() - y_ref.float()).abs().max()))
        print(f"step {step}: cursors {cache.cursor.tolist()}  y and caches {'equal' if same else 'DIFFER'} to the op")
        if not same:
            print(f"MISMATCH: engine != op at step {step} (max |dy| = {worst:.3e})")
            return 1
    print(f"OK: the TensorRT engine equals the op bit for bit over {args.steps} steps ({flushes} flushes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
