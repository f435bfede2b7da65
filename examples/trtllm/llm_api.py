"""ReplaySSM in TensorRT-LLM through the LLM API (PyTorch backend).

    python examples/trtllm/llm_api.py --model nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16
    mpirun -n 2 trtllm-llmapi-launch python examples/trtllm/llm_api.py --model ... --tp 2
                                                  (see mpirun_tp.sh for the environment)

ReplaySSM is enabled in this process by ``enable_replayssm`` and, for the MPI worker processes
that ``LLM(tensor_parallel_size=N)`` spawns, by ``TRTLLM_REPLAYSSM=1`` with the startup
directory on PYTHONPATH, which this script sets before TensorRT-LLM is imported so the workers
inherit it. ``--baseline`` runs the same prompts with TensorRT-LLM's own decode.

Not executed here: TensorRT-LLM cannot be installed in the development environment. What ran
here is the adapter against stand-ins of the pinned TensorRT-LLM classes
(tests/builders_trtllm/test_adapter.py) and this file's syntax.
"""

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        required=True,
        help="HF id or local path of a hybrid model (Nemotron-H / Nemotron 3, Qwen3-Next / Qwen3.5, Kimi Linear)",
    )
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size (default: 1)")
    parser.add_argument("--buffer-len", type=int, default=16, help="ReplaySSM L (default: 16)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--baseline", action="store_true", help="TensorRT-LLM's own decode")
    args = parser.parse_args()
    if args.baseline and os.environ.get("TRTLLM_REPLAYSSM") == "1":
        parser.error("--baseline with TRTLLM_REPLAYSSM=1 in the environment; unset it")

    if not args.baseline:
        from trtllm_replayssm_builders.trtllm import STARTUP_DIR, enable_replayssm

        # Inherited by the MPI workers LLM() spawns; must be set before tensorrt_llm imports.
        os.environ["TRTLLM_REPLAYSSM"] = "1"
        os.environ["TRTLLM_REPLAYSSM_BUFFER_LEN"] = str(args.buffer_len)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [STARTUP_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        status = enable_replayssm(buffer_len=args.buffer_len)

    from tensorrt_llm import LLM, SamplingParams
    from tensorrt_llm.llmapi import KvCacheConfig

    llm = LLM(
        model=args.model,
        tensor_parallel_size=args.tp,
        # ReplaySSM keeps its records in the V2 Mamba cache manager's pool and does not
        # support prefix-cache snapshots of decoding sequences.
        kv_cache_config=KvCacheConfig(use_kv_cache_manager_v2=True, enable_block_reuse=False, free_gpu_memory_fraction=0.85),
    )
    prompts = ["The capital of France is", "Write a haiku about state-space models:"]
    for output in llm.generate(prompts, SamplingParams(max_tokens=args.max_tokens, temperature=0.0)):
        print(repr(output.prompt), "->", repr(output.outputs[0].text))
    if not args.baseline:
        print(status.summary())
    llm.shutdown()


if __name__ == "__main__":
    main()
