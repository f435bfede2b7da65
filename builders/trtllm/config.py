"""ReplaySSM settings for TensorRT-LLM: the arguments of ``enable_replayssm`` and their
environment-variable form (read by every process that imports the package, MPI workers
included).

Environment variables (all optional except the first):

- ``TRTLLM_REPLAYSSM=1``: enable at import (``0`` or unset: do nothing).
- ``TRTLLM_REPLAYSSM_BUFFER_LEN``: L, records per slot (default 16).
- ``TRTLLM_REPLAYSSM_FAMILIES``: comma-separated subset of ``mamba2,gdn,kda`` (default all).
- ``TRTLLM_REPLAYSSM_DELTA_RULE_RECORDS``: ``activation`` (default) or ``float32``.
- ``TRTLLM_REPLAYSSM_ROUNDING_SEED``: an int in [0, 2^31): stochastic rounding at flush (default:
  unset, round to nearest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from trtllm_replayssm.cache import MAX_L
from trtllm_replayssm.checks import is_rounding_seed
from trtllm_replayssm.models import SSM_KINDS

__all__ = [
    "ReplaySSMConfig",
    "config_from_env",
    "env_requests_enable",
    "ENV_ENABLE",
    "ENV_BUFFER_LEN",
    "ENV_FAMILIES",
    "ENV_DELTA_RULE_RECORDS",
    "ENV_ROUNDING_SEED",
    "DELTA_RULE_RECORDS",
]

ENV_ENABLE = "TRTLLM_REPLAYSSM"
ENV_BUFFER_LEN = "TRTLLM_REPLAYSSM_BUFFER_LEN"
ENV_FAMILIES = "TRTLLM_REPLAYSSM_FAMILIES"
ENV_DELTA_RULE_RECORDS = "TRTLLM_REPLAYSSM_DELTA_RULE_RECORDS"
ENV_ROUNDING_SEED = "TRTLLM_REPLAYSSM_ROUNDING_SEED"
DELTA_RULE_RECORDS = ("activation", "float32")


@dataclass(frozen=True)
class ReplaySSMConfig:
    """What ReplaySSM replaces in a TensorRT-LLM process.

    Attributes:
        buffer_len: L, input records per sequence and layer, 1 <= L <= 64; a flush every L
            decode steps.
        families: layer families whose non-speculative decode runs on the replay ops, a
            non-empty subset of ``("mamba2", "gdn", "kda")`` in that order.
        delta_rule_records: dtype of the GDN / KDA d and k records: ``"activation"`` (the
            model's dtype) or ``"float32"``, which keeps them unrounded; with an fp32 SSM state
            bf16 records dominate the error (README, GDN and KDA accuracy). Mamba-2's x and B
            records are inputs and always held exactly in the activation dtype.
        rounding_seed: None (a flush rounds the checkpoint to nearest) or an int in [0, 2^31):
            each flush rounds it stochastically (unbiased; a replay step's draws are a function of
            the seed, the slot, the head and the flushing token, so CUDA-graph replays repeat
            them). The
            checkpoint is TensorRT-LLM's SSM state, so this needs
            ``kv_cache_config.mamba_ssm_cache_dtype`` bfloat16 or float16 (checked when a cache
            manager is created: a float32 state is stored unrounded).
    """

    buffer_len: int = 16
    families: Tuple[str, ...] = SSM_KINDS
    delta_rule_records: str = "activation"
    rounding_seed: Optional[int] = None

    def __post_init__(self) -> None:
        owner = "ReplaySSMConfig"
        L = self.buffer_len
        if not isinstance(L, int) or isinstance(L, bool) or not 1 <= L <= MAX_L:
            raise ValueError(f"{owner}: buffer_len is {L!r}; expected an int in [1, {MAX_L}]")
        families = self.families
        if isinstance(families, str) or not isinstance(families, (tuple, list)) or not families:
            raise ValueError(f"{owner}: families is {families!r}; expected a non-empty tuple of {', '.join(SSM_KINDS)}")
        unknown = [f for f in families if f not in SSM_KINDS]
        if unknown or len(set(families)) != len(families):
            raise ValueError(f"{owner}: families is {tuple(families)!r}; expected distinct names from {', '.join(SSM_KINDS)}")
        object.__setattr__(self, "families", tuple(f for f in SSM_KINDS if f in families))
        if self.delta_rule_records not in DELTA_RULE_RECORDS:
            raise ValueError(
                f"{owner}: delta_rule_records is {self.delta_rule_records!r}; expected one of {', '.join(DELTA_RULE_RECORDS)}"
            )
        seed = self.rounding_seed
        if seed is not None and not is_rounding_seed(seed):
            raise ValueError(f"{owner}: rounding_seed is {seed!r}; expected None or an int in [0, 2^31)")


def env_requests_enable(environ: Mapping[str, str]) -> bool:
    """True when ``TRTLLM_REPLAYSSM`` is ``1``; ValueError for any value other than 0/1/empty."""
    value = environ.get(ENV_ENABLE, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{ENV_ENABLE} is {value!r}; expected 1 (enable) or 0")
    return value == "1"


def config_from_env(environ: Mapping[str, str]) -> ReplaySSMConfig:
    """The settings the environment asks for (defaults where a variable is unset).

    Raises:
        ValueError: a malformed value, naming the variable and what it expects.
    """
    kwargs = {}
    raw_len = environ.get(ENV_BUFFER_LEN, "").strip()
    if raw_len:
        if not raw_len.isdigit():
            raise ValueError(f"{ENV_BUFFER_LEN} is {raw_len!r}; expected an int in [1, {MAX_L}]")
        kwargs["buffer_len"] = int(raw_len)
    raw_families = environ.get(ENV_FAMILIES, "").strip()
    if raw_families:
        kwargs["families"] = tuple(f.strip() for f in raw_families.split(",") if f.strip())
    raw_records = environ.get(ENV_DELTA_RULE_RECORDS, "").strip()
    if raw_records:
        kwargs["delta_rule_records"] = raw_records
    raw_seed = environ.get(ENV_ROUNDING_SEED, "").strip()
    if raw_seed:
        if not raw_seed.isdigit():
            raise ValueError(f"{ENV_ROUNDING_SEED} is {raw_seed!r}; expected an int in [0, 2^31) (unset: round to nearest)")
        kwargs["rounding_seed"] = int(raw_seed)
    try:
        return ReplaySSMConfig(**kwargs)
    except ValueError as e:
        raise ValueError(
            f"from the environment ({ENV_BUFFER_LEN}={raw_len!r}, "
            f"{ENV_FAMILIES}={raw_families!r}, "
            f"{ENV_DELTA_RULE_RECORDS}={raw_records!r}, "
            f"{ENV_ROUNDING_SEED}={raw_seed!r}): {e}"
        ) from None
