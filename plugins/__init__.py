"""trtllm_replayssm_plugins: ReplaySSM decode steps as TensorRT Python AOT plugins.

Installed as ``trtllm_replayssm_plugins`` (setup.py maps it onto ``plugins/``). It imports the
core package ``trtllm_replayssm``; the core never imports it. Nothing here imports TensorRT
except :mod:`.tensorrt_plugin` and :mod:`.network`, which need TensorRT >= 10.9 for the AOT path
(10.6 for the JIT path) and say so when it is missing.

Modules:
    spec: what a plugin layer launches, as plain data (argument order, scalars, grid, block).
    mamba2: the ``replayssm::mamba2_replay_step`` plugin: inputs, attributes, shape checks,
        the entry kernel's specialization.
    mamba2_entry: the entry kernel (TensorRT's parameter order) around the core replay kernel.
    mamba2_cuda: the op's CUDA C++ step on sm_90 as two AOT plugin layers
        (``replayssm::mamba2_replay_coefficients``, ``replayssm::mamba2_replay_step_cuda``).
    gated_delta, gated_delta_entry: the same for ``replayssm::gated_delta_replay_step`` (GDN,
        KDA).
    ptx: offline PTX compilation fitted to TensorRT's launch convention; Triton version table.
    tensorrt_plugin: the ``tensorrt.plugin`` registration (register, aot_impl, impl).
    network: ``add_mamba2_replay_step``, ``add_gdn_replay_step``, ``add_kda_replay_step`` add
        the plugin layer to an ``INetworkDefinition``; ``add_mamba2_replay_step_cuda`` the CUDA
        step's two layers.
    export: ``python -m trtllm_replayssm_plugins.export``: PTX + launch manifest to files.
"""

from . import gated_delta, mamba2, mamba2_cuda
from .ptx import KNOWN_GOOD_TRITON, CompiledKernel, compile_ptx
from .spec import KernelSpec, TensorInfo

NAMESPACE = "replayssm"
FAMILIES = (mamba2, gated_delta)  # one plugin per module; a new family is one more module here
AOT_ONLY = (mamba2_cuda.COEFFICIENTS, mamba2_cuda.STEP)  # plugins without a JIT implementation

__all__ = [
    "NAMESPACE",
    "FAMILIES",
    "AOT_ONLY",
    "KNOWN_GOOD_TRITON",
    "CompiledKernel",
    "KernelSpec",
    "TensorInfo",
    "compile_ptx",
    "gated_delta",
    "mamba2",
    "mamba2_cuda",
]
