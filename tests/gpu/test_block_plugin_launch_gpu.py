"""The ``replayssm::mamba2_replay_block`` PTX on a runtime-shaped state buffer, launched with the
CUDA driver API on the GPU (issue 26's last verification item).

TensorRT-LLM's engine runtime hands each SSM layer one state buffer, and the block plugin finds
every slot's checkpoint, records and cursors inside it (trtllm_replayssm.block). Here the buffer
is one pooled device allocation of two layers, uninitialised (random bytes), the plugin's
``state_ptr`` input the device address of layer 1 (tests/plugins/block_cases.py). The entry's
PTX is exported as the plugin exports it (``kernel_spec``, ``compile_ptx`` for this GPU: name,
PTX, grid, block, shared memory, scalars), loaded with cuModuleLoadData and launched with
cuLaunchKernel (``cuda_driver.Driver``, as test_plugin_launch_gpu.py), one launch per step:

- a context step (more tokens than rows): the stock states written at the admitted slots are
  transposed in place to checkpoints, cursor / arrivals / pending zeroed, nothing else written;
- 3L + 2 generation steps (three flushes per slot) with padding rows between live rows and
  slots in a nontrivial order.

After every step the output rows and the whole layer (every region of every slot: checkpoints,
dt / x / B records, cursor, arrivals, pending; unused slots and stale record positions included)
must equal the public op, ``replayssm::mamba2_replay_step``, and layer 0 must stay untouched. The
rows (five) keep the op's launch heuristic at the configuration the plugin's attributes take
(asserted), so the public op runs the same configuration. Two oracles:

- ``twin``, bit for bit: the op on strided views of a copy of the layer in the same block layout,
  placed so that no float region is 16-byte aligned (``block_cases.twin_cache_of``). The entry
  loads the layer's address at run time and so knows no alignment; Triton's JIT specializes the
  op's pointers by their actual alignment; unaligned, both lay the tiles out alike.
- ``dense``, to rounding: the op on an ordinary dense cache holding the same bits. Its aligned
  tensors give it vector loads and another summation order over d_state (on the H200, 2026-12-02,
  one unit in the last place at the first step of Nemotron-3-Super's geometry), so outputs and live
  checkpoints are compared to ``block_cases.GPU_CLOSE``; everything copied (records, cursors,
  arrivals, pending, unused slots) still bit for bit.

The same comparisons run bit for bit on the CPU under the Triton interpreter with the entry called
directly (tests/plugins/test_plugin_block.py).

The checkpoint is fp32 whatever the activation dtype (the runtime's state buffer is fp32), so
unlike test_plugin_launch_gpu.py there is no 16-bit state; the activations and records are bf16
or fp32. Geometries: Nemotron-3-Super's Mamba-2 layer (TP=1, L = 16) and a small odd one
(head_dim 24, d_state 20, three groups, L = 4).
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins"))
from block_cases import ROWS, op_cache_of, run_case, twin_cache_of
from cuda_driver import Driver
from plugin_cases import grid_of, launch_arguments
# (importing plugin_cases makes trtllm_replayssm_plugins importable from a checkout)

pytestmark = pytest.mark.gpu

NUM_SLOTS = 8  # slots 1, 2, 4, 6, 7 stay unused

# (nheads, head_dim, d_state, ngroups, L), flags, activation dtype
CASES = [
    pytest.param((128, 64, 128, 8, 16), dict(has_z=True), "bf16", id="nh128-hd64-ds128-g8-L16-bf16-z"),
    pytest.param((128, 64, 128, 8, 16), dict(has_z=True), "f32", id="nh128-hd64-ds128-g8-L16-f32-z"),
    pytest.param((6, 24, 20, 3, 4), dict(has_z=True), "bf16", id="nh6-hd24-ds20-g3-L4-bf16-z"),
    pytest.param(
        (6, 24, 20, 3, 4),
        dict(has_D=False, has_dt_bias=False, dt_softplus=False),
        "f32",
        id="nh6-hd24-ds20-g3-L4-f32-none",
    ),
]


@pytest.fixture(scope="module")
def driver():
    torch.zeros(1, device="cuda")  # make torch's primary context current
    return Driver()


def driver_launch(driver, loaded):
    """``launch(spec, inputs, out)`` for block_cases.run_case: the exported PTX through the
    driver API, loaded once per specialization (recorded in ``loaded``)."""
    from trtllm_replayssm_plugins import compile_ptx, mamba2_block

    major, minor = torch.cuda.get_device_capability()

    def launch(spec, inputs, out):
        key = (spec.name, spec.variant)
        if key not in loaded:
            compiled = compile_ptx(spec, mamba2_block.ENTRY, 10 * major + minor)
            fn = driver.load(compiled.ptx, compiled.kernel_name)
            if driver.has_param_info:
                sizes = driver.param_sizes(fn)
                assert sizes == [4 if p.role == "scalar" else 8 for p in spec.params], compiled.file_name
            loaded[key] = fn, compiled
        fn, compiled = loaded[key]
        args = launch_arguments(mamba2_block, spec, inputs, out)
        driver.launch(fn, grid_of(spec, inputs), spec.block, compiled.shared_mem, args, spec.params)

    return launch


@pytest.mark.parametrize("oracle", ["twin", "dense"])
@pytest.mark.parametrize("geometry,flags,act", CASES)
def test_block_ptx_on_a_pooled_buffer_equals_the_op(driver, geometry, flags, act, oracle):
    from trtllm_replayssm.kernels.common import mamba2_launch_config
    from trtllm_replayssm_plugins import mamba2, mamba2_block

    r = mamba2.Mamba2ReplayAttrs.for_layer(*geometry, state_dtype="f32", batch_hint=len(ROWS), **flags)
    cfg = mamba2_launch_config("replay_step", r.head_dim, r.d_state, len(ROWS), torch.float32)
    assert (cfg.block_head_dim, cfg.num_warps, cfg.chunks, cfg.num_stages, cfg.max_registers) == (
        r.block_head_dim,
        r.num_warps,
        r.chunks,
        r.num_stages,
        None,
    ), "the public op must launch at the plugin's configuration for a bit-identical comparison"
    a = mamba2_block.Mamba2BlockAttrs(r, NUM_SLOTS, act)
    loaded = {}
    op_cache, exact = dict(twin=(twin_cache_of, True), dense=(op_cache_of, False))[oracle]
    run_case(mamba2_block, a, driver_launch(driver, loaded), device="cuda", op_cache=op_cache, exact=exact)
    assert len(loaded) == 1, "one PTX serves the context and the generation steps"
