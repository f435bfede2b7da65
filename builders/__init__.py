"""trtllm_replayssm_builders: model-builder hooks that route hybrid models' SSM layers through
ReplaySSM.

Installed as ``trtllm_replayssm_builders`` (setup.py maps it onto ``builders/``). It imports the
core package ``trtllm_replayssm``; the core never imports it.

Subpackages:
    hf: Hugging Face ``transformers`` models (``enable_replayssm`` / ``disable_replayssm``),
        the ``trtllm-replayssm demo`` subcommand (:mod:`.cli`) and random-weight models.
    trtllm: TensorRT-LLM (PyTorch backend) hooks.
"""
