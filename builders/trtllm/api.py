"""The TensorRT-LLM API the ReplaySSM hooks depend on, pinned, and the enable-time check.

TensorRT-LLM cannot be installed where this package is developed, so the hooks are written
against source that was read, not run. :data:`REQUIREMENTS` lists every module, class, method
and parameter the adapter (:mod:`.adapter`) touches; :func:`check_api` compares them with the
installed TensorRT-LLM before anything is patched, and :func:`require_api` refuses with the
list of what is missing. ``builders/trtllm/README.md`` shows the same table (a test keeps the
two equal).

Pinned release: :data:`PINNED_RELEASE`. The source files were read at the commits in
:data:`SOURCE_COMMITS` (the newest stored versions of those files; the release tree itself could
not be checked out here).
"""

from __future__ import annotations

import importlib
import inspect

from dataclasses import dataclass, fields, is_dataclass
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from trtllm_replayssm.models import GDN, KDA, MAMBA2

__all__ = [
    "Requirement",
    "REQUIREMENTS",
    "INSTANCE_ATTRIBUTES",
    "PINNED_RELEASE",
    "SOURCE_COMMITS",
    "IncompatibleTensorRTLLM",
    "requirements_for",
    "check_api",
    "require_api",
    "require_instance_attributes",
]

# GitHub release v1.3.0rc26 (2026-09-09, tag commit c295dd9): PyTorch backend only, Mamba cache
# managers split into kv_cache/mamba_cache_manager/{common, legacy, mamba_cache_manager_v2}.
PINNED_RELEASE = "1.3.0rc26 (tag v1.3.0rc26, commit c295dd9)"

# path -> commit of the stored version that was read.
SOURCE_COMMITS = {
    "tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager/common.py": "28295084972c5ab61ef010a050a18f53f5d72810",
    "tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager/mamba_cache_manager_v2.py": "28295084972c5ab61ef010a050a18f53f5d72810",
    "tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager/legacy.py": "28295084972c5ab61ef010a050a18f53f5d72810",
    "tensorrt_llm/_torch/modules/mamba/cache_manager.py": "28295084972c5ab61ef010a050a18f53f5d72810",
    "tensorrt_llm/_torch/modules/kimi_kda/cache_manager.py": "28295084972c5ab61ef010a050a18f53f5d72810",
    "tensorrt_llm/_torch/modules/mamba/mamba2_mixer.py": "(stored version, id 56391490162)",
    "tensorrt_llm/_torch/modules/mamba/mamba2_metadata.py": "04fa7c4c7fa50f02992d7f5a2e3cb85a020f1629",
    "tensorrt_llm/_torch/modules/mamba/gdn_mixer.py": "0d4bd901fb04656bf6b43236a6e4ddaa2994dad2",
    "tensorrt_llm/_torch/modules/kimi_kda/kimi_kda_mixer.py": "0790edf6d3530e40d21d6a1155b516aef9b6f51b",
    "tensorrt_llm/_torch/modules/kimi_kda/kimi_k3_mamba_metadata.py": "0af95ace32922563f05fd7ba101dc334c57e6f02",
}

_V2 = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager.mamba_cache_manager_v2"
_COMMON = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager.common"
_METADATA = "tensorrt_llm._torch.modules.mamba.mamba2_metadata"
_MAMBA2 = "tensorrt_llm._torch.modules.mamba.mamba2_mixer"
_GDN = "tensorrt_llm._torch.modules.mamba.gdn_mixer"
_KDA = "tensorrt_llm._torch.modules.kimi_kda.kimi_kda_mixer"


@dataclass(frozen=True)
class Requirement:
    """One name the hooks use.

    Attributes:
        module: the module's import path.
        name: attribute path inside it (``Class.method``).
        params: parameter names its signature must have, in this order (others may sit
            between them); empty: only existence is checked.
        fields: dataclass field names it must have.
        family: ``None`` for the cache side (always needed), else the layer family that uses it.
        use: what the hooks do with it.
    """

    module: str
    name: str
    params: Tuple[str, ...] = ()
    fields: Tuple[str, ...] = ()
    family: Optional[str] = None
    use: str = ""

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


REQUIREMENTS: Tuple[Requirement, ...] = (
    # -- cache side: records live with the V2 Mamba cache manager -----------------------------
    Requirement("tensorrt_llm.runtime.kv_cache_manager_v2", "DataRole", use="names the record buffers inside V2 pool pages"),
    Requirement(
        "tensorrt_llm.runtime.kv_cache_manager_v2",
        "BufferConfig",
        ("role", "size"),
        use="declares record bytes per slot and layer to the V2 pool",
    ),
    Requirement(_COMMON, "MambaAuxCacheExtension", use="base class of the ReplaySSM cache extension"),
    *(
        Requirement(_COMMON, f"MambaAuxCacheExtension.{m}", p, use="overridden by the extension")
        for m, p in (
            ("validate", ("self", "context")),
            ("buffer_configs", ("self", "context", "layer_id")),
            ("bytes_per_slot", ("self", "context", "layer_id")),
            ("bind", ("self", "context", "manager")),
            ("get_layer_cache", ("self", "layer_idx")),
            ("reset_slots", ("self", "slots", "host_slots")),
            ("on_state_transfer_complete", ("self", "request_ids", "manager")),
            ("iter_buffers", ("self",)),
            ("shutdown", ("self",)),
        )
    ),
    Requirement(
        _COMMON,
        "MambaCacheBuildContext",
        fields=(
            "mamba_pp_layers",
            "conv_state_shape",
            "ssm_state_shape",
            "conv_state_dtype",
            "ssm_state_dtype",
            "slot_capacity",
            "spec_config",
            "backend",
            "conv_section_dims",
            "conv_state_layout",
        ),
        use="per-rank geometry, dtypes and slot count the records are sized from",
    ),
    Requirement(
        _COMMON,
        "MambaStateUpdateStrategy.reset_slots",
        ("self", "slots", "host_slots"),
        use="wrapped per manager: fresh generation slots reset the cursors",
    ),
    Requirement(
        _COMMON,
        "MambaStateUpdateStrategy.relocate_slots",
        ("self", "old_slots", "new_slots"),
        use="wrapped per manager: cursors follow a relocated live slot",
    ),
    Requirement(
        _COMMON,
        "register_mamba_aux_cache_estimator",
        ("key", "estimator"),
        use="adds record bytes to the KV-cache budget estimate",
    ),
    Requirement(
        _V2,
        "MambaHybridCacheManagerV2.__init__",
        (
            "self",
            "mamba_layer_mask",
            "kv_cache_config",
            "max_batch_size",
            "mapping",
            "spec_config",
            "is_draft",
            "conv_state_layout",
            "aux_cache_extensions",
        ),
        use="wrapped: appends the ReplaySSM extension to aux_cache_extensions; max_batch_size: "
        "the batch its measured route advice is looked up at",
    ),
    Requirement(
        _V2,
        "MambaHybridCacheManagerV2._get_state_buffer",
        ("self", "local_layer_idx", "role", "dtype", "state_shape"),
        use="slot views of the record buffers inside the V2 pool",
    ),
    Requirement(
        _V2, "MambaHybridCacheManagerV2.get_aux_cache_extension", ("self", "key"), use="mixers find their layer's records"
    ),
    Requirement(
        _V2,
        "MambaHybridCacheManagerV2.get_state_update_strategy",
        ("self",),
        use="the strategy whose slot resets and relocations are observed",
    ),
    Requirement(
        _V2,
        "MambaHybridCacheManagerV2.get_state_indices",
        ("self", "request_ids", "is_padding"),
        use="slots of requests whose state arrived by disaggregated transfer",
    ),
    Requirement(
        _METADATA,
        "Mamba2Metadata.prepare",
        ("self", "attn_metadata"),
        use="wrapped: marks CUDA-graph padding rows in a graph-stable buffer",
    ),
    Requirement(_METADATA, "CUDA_GRAPH_DUMMY_REQUEST_ID", use="request id of CUDA-graph padding rows"),
    # -- Mamba-2 (Nemotron-H / Nemotron 3) ------------------------------------------------------
    Requirement(
        _MAMBA2,
        "Mamba2Mixer.__init__",
        ("self", "layer_idx", "config"),
        family=MAMBA2,
        use="wrapped: registers the layer, swaps the instance's _stp_ssu_func",
    ),
    Requirement(
        _MAMBA2,
        "Mamba2Mixer._select_mamba_kernels",
        ("self", "quant_config", "spec_config", "head_dim"),
        family=MAMBA2,
        use="sets _stp_ssu_func, the non-speculative single-token SSM update",
    ),
    Requirement(
        _MAMBA2,
        "Mamba2Mixer.forward",
        ("self", "hidden_states", "attn_metadata", "mamba_metadata", "spec_metadata"),
        family=MAMBA2,
        use="wrapped: hands the step's records and padding rows to the SSU",
    ),
    # -- Gated DeltaNet (Qwen3-Next / Qwen3.5) --------------------------------------------------
    Requirement(
        _GDN,
        "Qwen3NextGatedDeltaNet.__init__",
        ("self", "model_config", "layer_idx"),
        family=GDN,
        use="wrapped: registers the layer",
    ),
    Requirement(
        _GDN,
        "Qwen3NextGatedDeltaNet.forward_core",
        ("self", "mixed_qkv", "a", "b", "attn_metadata", "mamba_metadata", "spec_metadata", "output"),
        family=GDN,
        use="wrapped: step context; mixed prefill+decode batches flush decode rows first",
    ),
    Requirement(
        _GDN,
        "Qwen3NextGatedDeltaNet.forward_decode",
        (
            "self",
            "conv_states",
            "ssm_states",
            "query_start_loc_long",
            "spec_metadata",
            "intermediate_conv_states",
            "intermediate_ssm_states",
            "is_target_verify",
            "output",
        ),
        family=GDN,
        use="replaced for non-speculative decode (speculative verify: original)",
    ),
    Requirement(
        _GDN,
        "causal_conv1d_update",
        ("conv_state_indices",),
        family=GDN,
        use="the conv update our GDN decode calls, as TensorRT-LLM's does",
    ),
    # -- Kimi Delta Attention (Kimi Linear) -----------------------------------------------------
    Requirement(
        _KDA, "KimiKDALinearAttention.__init__", ("self", "cfg", "layer_idx"), family=KDA, use="wrapped: registers the layer"
    ),
    Requirement(
        _KDA,
        "KimiKDALinearAttention._forward_impl",
        ("self", "hidden_states", "attn_metadata", "output"),
        family=KDA,
        use="wrapped: step context",
    ),
    Requirement(
        _KDA,
        "KimiKDALinearAttention.forward_decode",
        (
            "self",
            "x2d",
            "conv_pool",
            "ssm_pool",
            "slot_indices",
            "mamba_metadata",
            "layer_cache",
            "ssm_state_indices",
            "output",
        ),
        family=KDA,
        use="replaced for single-token decode",
    ),
    Requirement(
        _KDA,
        "KimiKDALinearAttention._output_gate",
        ("self", "x", "o", "onorm_g"),
        family=KDA,
        use="gated output norm after our step",
    ),
    Requirement(
        _KDA,
        "KimiKDALinearAttention._store_core",
        ("self", "core", "output"),
        family=KDA,
        use="writes the core into a breakable-CUDA-graph buffer",
    ),
)


# Attributes a hooked mixer instance must have once built (set in its __init__, so they cannot be
# checked before a model exists); checked by the __init__ wrappers.
INSTANCE_ATTRIBUTES = {
    MAMBA2: ("layer_idx", "A", "D", "dt_bias", "_stp_ssu_func"),
    GDN: (
        "layer_idx",
        "conv1d",
        "activation",
        "key_dim_per_tp",
        "num_k_heads_per_tp",
        "num_v_heads_per_tp",
        "head_k_dim",
        "head_v_dim",
        "A_log",
        "dt_bias",
    ),
    KDA: (
        "layer_idx",
        "gate_lower_bound",
        "proj_size",
        "num_heads",
        "head_dim",
        "q_proj",
        "k_proj",
        "v_proj",
        "q_conv1d",
        "k_conv1d",
        "v_conv1d",
        "f_a_proj",
        "f_b_proj",
        "b_proj",
        "A_log",
        "dt_bias",
    ),
}


class IncompatibleTensorRTLLM(RuntimeError):
    """The installed TensorRT-LLM lacks a name or parameter the hooks need."""


def requirements_for(families: Iterable[str]) -> Tuple[Requirement, ...]:
    """The cache-side requirements and those of the given layer families."""
    families = set(families)
    return tuple(r for r in REQUIREMENTS if r.family is None or r.family in families)


def _resolve(module, path: str):
    obj = module
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _param_problem(obj, params: Sequence[str]) -> Optional[str]:
    try:
        names = list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return "has no inspectable signature"
    missing = [p for p in params if p not in names]
    if missing:
        return f"lacks parameter(s) {', '.join(missing)} (has: {', '.join(names)})"
    positions = [names.index(p) for p in params]
    if positions != sorted(positions):
        return f"has parameters {', '.join(params)} in another order (has: {', '.join(names)})"
    return None


def check_api(
    requirements: Sequence[Requirement], import_module: Callable[[str], object] = importlib.import_module
) -> List[str]:
    """One line per unmet requirement (empty when all are met); imports, never patches.

    Args:
        requirements: what to check (e.g. :func:`requirements_for`).
        import_module: how a module path is imported (tests pass stand-ins).
    """
    problems, modules = [], {}
    for req in requirements:
        if req.module not in modules:
            try:
                modules[req.module] = import_module(req.module)
            except Exception as e:  # noqa: BLE001 - any import failure is reported, not raised
                modules[req.module] = e
        module = modules[req.module]
        if isinstance(module, Exception):
            problems.append(f"{req.qualname}: module {req.module} does not import ({type(module).__name__}: {module})")
            continue
        try:
            obj = _resolve(module, req.name)
        except AttributeError:
            problems.append(f"{req.qualname}: missing")
            continue
        if req.params:
            problem = _param_problem(obj, req.params)
            if problem:
                problems.append(f"{req.qualname}: {problem}")
        if req.fields:
            have = [f.name for f in fields(obj)] if is_dataclass(obj) else []
            missing = [f for f in req.fields if f not in have]
            if missing:
                problems.append(f"{req.qualname}: lacks field(s) {', '.join(missing)}")
    return problems


def _installed_version(import_module: Callable[[str], object]) -> str:
    try:
        return str(getattr(import_module("tensorrt_llm"), "__version__", "of unknown version"))
    except Exception as e:  # noqa: BLE001
        raise ImportError(
            f"ReplaySSM for TensorRT-LLM: tensorrt_llm does not import "
            f"({type(e).__name__}: {e}); install TensorRT-LLM {PINNED_RELEASE}"
        ) from e


def require_api(families: Iterable[str], import_module: Callable[[str], object] = importlib.import_module) -> str:
    """Checks the installed TensorRT-LLM for ``families``; returns its version.

    Raises:
        ImportError: tensorrt_llm itself does not import.
        IncompatibleTensorRTLLM: names or parameters are missing; the message lists each one
            and the release the hooks are pinned to. Nothing has been patched.
    """
    version = _installed_version(import_module)
    problems = check_api(requirements_for(families), import_module)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise IncompatibleTensorRTLLM(
            f"ReplaySSM cannot hook TensorRT-LLM {version}: the hooks are written for "
            f"{PINNED_RELEASE} and need these names, which this installation lacks or "
            f"spells differently:\n{lines}\nNothing was patched. Install the pinned release, "
            f"or disable the families involved (families=..., TRTLLM_REPLAYSSM_FAMILIES)."
        )
    return version


def require_instance_attributes(obj, family: str) -> None:
    """Raises IncompatibleTensorRTLLM naming the attributes of :data:`INSTANCE_ATTRIBUTES` that
    a freshly built mixer lacks."""
    missing = [a for a in INSTANCE_ATTRIBUTES[family] if not hasattr(obj, a)]
    if missing:
        raise IncompatibleTensorRTLLM(
            f"ReplaySSM cannot hook {type(obj).__name__}: the built layer lacks attribute(s) "
            f"{', '.join(missing)}, which the hooks for {PINNED_RELEASE} read"
        )
