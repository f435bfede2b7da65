"""TensorRT-LLM (PyTorch backend) hooks: non-speculative decode of Mamba-2, GDN and KDA layers by
ReplaySSM, records counted in the Mamba cache manager's bytes per slot.

    from trtllm_replayssm_builders.trtllm import enable_replayssm
    enable_replayssm(buffer_len=16)          # before the LLM is created, in every process
    llm = LLM(model=..., kv_cache_config=KvCacheConfig(use_kv_cache_manager_v2=True, ...))

or, for processes you do not control (MPI workers, trtllm-serve, Triton), the environment:
``TRTLLM_REPLAYSSM=1`` (see :mod:`.config`) with ``PYTHONPATH`` starting with
:data:`STARTUP_DIR`, whose ``sitecustomize`` imports this package. Importing this package with
``TRTLLM_REPLAYSSM=1`` enables the hooks: at once if ``tensorrt_llm`` is already imported, else
right after it is (:mod:`.autoload`), so that a bad setting or an incompatible TensorRT-LLM fails
that ``import tensorrt_llm`` with the reason.

Supported TensorRT-LLM: :data:`.api.PINNED_RELEASE`; every name used is checked at enable time
(:func:`.api.require_api`) and a mismatch refuses with the list of what is missing.
"""

from __future__ import annotations

import os

from typing import Optional, Sequence

from trtllm_replayssm.models import SSM_KINDS

from .api import PINNED_RELEASE, IncompatibleTensorRTLLM
from .autoload import after_import
from .config import ReplaySSMConfig, config_from_env, env_requests_enable

__all__ = [
    "enable_replayssm",
    "disable_replayssm",
    "replayssm_status",
    "ReplaySSMConfig",
    "IncompatibleTensorRTLLM",
    "PINNED_RELEASE",
    "STARTUP_DIR",
]

STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")


def enable_replayssm(
    buffer_len: int = 16,
    families: Sequence[str] = SSM_KINDS,
    delta_rule_records: str = "activation",
    rounding_seed: Optional[int] = None,
):
    """Routes the non-speculative decode of the given layer families through ReplaySSM.

    Call it before the ``LLM`` (and so its model and cache managers) is created, in every
    process that builds a model. Idempotent for the same settings.

    Args:
        buffer_len: L, records per sequence and layer (1..64); a flush every L steps.
        families: subset of ``("mamba2", "gdn", "kda")``: Nemotron-H's ``Mamba2Mixer``,
            Qwen3-Next / Qwen3.5's ``Qwen3NextGatedDeltaNet``, Kimi's ``KimiKDALinearAttention``.
        delta_rule_records: ``"activation"`` or ``"float32"`` GDN / KDA d and k records
            (float32 with an fp32 SSM state: see :class:`.config.ReplaySSMConfig`).
        rounding_seed: None, or an int in [0, 2^31): every flush rounds the checkpoint (the
            engine's SSM state) stochastically; needs ``kv_cache_config.mamba_ssm_cache_dtype``
            bfloat16 or float16, checked when each cache manager is created. The checkpoint
            dtype is TensorRT-LLM's (``mamba_ssm_cache_dtype``: auto, float16, bfloat16,
            float32); an fp8 SSM state cannot hold ReplaySSM's fp8 checkpoint (it has no row
            scales) and is refused with the reason.
    Returns:
        ReplaySSMStatus: the TensorRT-LLM version, what was patched, hooked layers (filled as
        models are built; ``.summary()``).
    Raises:
        ImportError: TensorRT-LLM is not installed.
        IncompatibleTensorRTLLM: the installed TensorRT-LLM lacks a name the hooks need (the
            message lists each); nothing is patched.
        ValueError: bad arguments, or already enabled with other settings.
    """
    from .adapter import install

    return install(
        ReplaySSMConfig(
            buffer_len=buffer_len,
            families=tuple(families),
            delta_rule_records=delta_rule_records,
            rounding_seed=rounding_seed,
        )
    )


def disable_replayssm() -> bool:
    """Restores TensorRT-LLM's own decode. Only between LLM instances: a sequence mid-decode
    would continue from its checkpoint without its records. Returns False when not enabled."""
    from .adapter import uninstall

    return uninstall()


def replayssm_status():
    """The status of the hooks in this process (:class:`.adapter.ReplaySSMStatus`), or None."""
    from .adapter import installed

    return installed()


def _enable_from_env() -> None:
    """``TRTLLM_REPLAYSSM=1``: enable with the environment's settings once tensorrt_llm is
    imported (settings are checked now)."""
    if not env_requests_enable(os.environ):
        return
    config = config_from_env(os.environ)
    after_import(
        "tensorrt_llm",
        lambda: enable_replayssm(
            buffer_len=config.buffer_len,
            families=config.families,
            delta_rule_records=config.delta_rule_records,
            rounding_seed=config.rounding_seed,
        ),
    )


_enable_from_env()
