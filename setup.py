"""trtllm_replayssm: ReplaySSM decoding for hybrid LLMs, as a TensorRT-LLM extension."""

from setuptools import find_packages, setup

setup(
    name="trtllm_replayssm",
    version="0.1.0",
    description="ReplaySSM decoding (checkpoint + input records) for Mamba-2 / GDN / KDA hybrid LLMs",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=(
        find_packages(include=["trtllm_replayssm", "trtllm_replayssm.*"])
        + ["trtllm_replayssm_plugins", "trtllm_replayssm_builders"]
        + [f"trtllm_replayssm_builders.{p}" for p in find_packages("builders")]
    ),
    # The TensorRT plugin (plugins/) and the model-builder hooks (builders/) install under
    # distinctive names.
    package_dir={"trtllm_replayssm_plugins": "plugins", "trtllm_replayssm_builders": "builders"},
    # torch: no upper pin, the machine's torch (CPU or CUDA build) stays in charge.
    # triton < 3.9: Triton 3.9 writes PTX ISA 9.4 for sm_90 (its CUDA 13.4 ptxas), which CUDA 13.0
    # drivers (R580, the H200 here) refuse to load, and TensorRT's AOT plugins take PTX only;
    # its interpreter also rejects a mask the GDN/KDA kernels build (plugins/ptx.py, docs/kernel-notes.md).
    # 3.7 and 3.8 are checked (KNOWN_GOOD_TRITON); CPU CI runs the newest allowed.
    # cuda-bindings + NVRTC (Linux): the CUDA C++ Mamba-2 step (trtllm_replayssm/kernels/nvrtc.py)
    # is compiled at run time. nvidia-cuda-nvrtc 13.0.*: 13.1 and later write a PTX ISA that
    # CUDA 13.0 drivers (R580, the H200 here) refuse in the plugin export; the op loads machine
    # code, which any 13.x driver takes. cuda-bindings >= 13: the CUDA 13 driver API.
    install_requires=[
        "torch>=2.4",
        "triton>=3.2,<3.9",
        "tqdm",
        "cuda-bindings>=13; sys_platform == 'linux'",
        "nvidia-cuda-nvrtc==13.0.*; sys_platform == 'linux'",
    ],
    extras_require={
        # transformers: tested 5.17.0 to 5.25.0 (builders/hf/compat.py TESTED_TRANSFORMERS; CI
        # runs the hook tests on both ends); a newer release warns at enable time, no pin.
        "test": ["pytest>=8", "transformers>=5.17"],
        "bench": ["matplotlib"],
        # ruff pinned: its formatter's output changes between releases; bump it together with
        # a `ruff format .` of the tree.
        "lint": ["ruff==0.17.6"],
        # AOT plugins (engine runs without Python) need TensorRT >= 10.9; JIT ones 10.6.
        "tensorrt": ["tensorrt>=10.9"],
        # Hugging Face hooks and the model demo (trtllm-replayssm demo); tested range as above.
        "hf": ["transformers>=5.17"],
        # TensorRT-LLM hooks, pinned to 1.3.0rc26; other versions are checked at enable time.
        "trtllm": ["tensorrt_llm>=1.3.0rc26"],
        # The trtllm-build engine flow (trtllm-replayssm build), pinned to the last release with
        # engine builds; its names are checked when the hook engages (builders/trtllm_engine).
        "trtllm-engine": ["tensorrt_llm==1.2.1"],
    },
    # The TensorRT-LLM hooks' startup directory (sitecustomize for TRTLLM_REPLAYSSM=1) and notes.
    package_data={
        "trtllm_replayssm_builders.trtllm": ["startup/sitecustomize.py", "README.md"],
        "trtllm_replayssm.kernels": ["cuda/*.cu", "cuda/*.cuh"],
    },
    entry_points={
        "console_scripts": ["trtllm-replayssm=trtllm_replayssm.cli:main"],
        # Subcommands other packages add to trtllm-replayssm (the core imports no builder).
        "trtllm_replayssm.cli": [
            "demo=trtllm_replayssm_builders.cli:add_demo",
            "build=trtllm_replayssm_builders.cli:add_build",
        ],
    },
)
