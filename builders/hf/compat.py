"""What the Hugging Face hook needs to know about the installed ``transformers``.

* :data:`TESTED_TRANSFORMERS`: the releases CI runs the hook's tests on (the oldest supported
  and the newest on the registry when the range was last extended); a release outside the range
  warns at enable time.
* How a mixer's ``forward`` receives the host cache: ``cache_params=`` up to 5.23, ``cache=``
  from 5.24 (the old name stays a deprecated alias there). :func:`cache_argument` reads it from
  the signature, so the hook passes the cache back under the name the mixer takes.
* :func:`host_cache`: the cache object among a forward's arguments, under any of the names
  transformers has used for it.
* :func:`count_decoded_token`: from 5.25 a linear-attention cache layer counts its tokens, and a
  conv state updated in place (the host's single-token decode, and the hook's) must add one.
* :func:`bind_torch_paths`: on a machine without a GPU, the GDN / KDA modelling modules must be
  imported with flash-linear-attention hidden, or they bind its Triton kernels, which need one.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import warnings

from typing import Optional

__all__ = [
    "TESTED_TRANSFORMERS",
    "CACHE_ARGUMENTS",
    "transformers_version",
    "check_transformers_version",
    "cache_argument",
    "unknown_cache_arguments",
    "host_cache",
    "count_decoded_token",
    "bind_torch_paths",
]

# (oldest, newest) transformers release the hook is tested on; CI runs tests/builders on both.
TESTED_TRANSFORMERS = ("5.17.0", "5.25.0")

# Names under which transformers has passed the host cache to a mixer's forward, newest first.
CACHE_ARGUMENTS = ("cache", "cache_params")

# Model family -> transformers modelling module that binds flash-linear-attention kernels.
_FLA_MODELLING = {
    "qwen3_next": "qwen3_next.modeling_qwen3_next",
    "qwen3_5": "qwen3_5.modeling_qwen3_5",
    "kimi_linear": "kimi_linear.modeling_kimi_linear",
}


def transformers_version() -> str:
    """The installed transformers' version string."""
    import transformers

    return transformers.__version__


def check_transformers_version(version: Optional[str] = None) -> bool:
    """Warns (UserWarning) when ``version`` (default: the installed one) lies outside
    :data:`TESTED_TRANSFORMERS`, naming the tested range. Returns True when inside."""
    from packaging.version import Version  # a dependency of transformers

    version = version or transformers_version()
    low, high = TESTED_TRANSFORMERS
    # By release numbers: a pre-release or dev build of a tested release counts as tested.
    if Version(low).release <= Version(version).release[:3] <= Version(high).release:
        return True
    warnings.warn(
        f"enable_replayssm: transformers {version} is outside the tested range "
        f"{low} to {high}; the hook checks every decode step and raises if it cannot "
        f"engage, but this release was not tested",
        UserWarning,
        stacklevel=3,
    )
    return False


def cache_argument(mixer) -> str:
    """The name of the host-cache parameter of ``type(mixer).forward`` (``"cache"`` or
    ``"cache_params"``). Raises ValueError naming the mixer and the transformers version when the
    forward takes neither."""
    parameters = inspect.signature(type(mixer).forward).parameters
    for name in CACHE_ARGUMENTS:
        if name in parameters:
            return name
    raise ValueError(
        f"enable_replayssm: {type(mixer).__name__}.forward{inspect.signature(type(mixer).forward)} "
        f"(transformers {transformers_version()}) takes none of "
        f"{', '.join(CACHE_ARGUMENTS)}; the hook does not know how this release passes "
        f"the host cache (tested: {' to '.join(TESTED_TRANSFORMERS)})"
    )


def count_decoded_token(cache, layer_index: int) -> None:
    """Counts one decoded token in ``cache``'s layer ``layer_index`` after its conv state was
    updated in place, as the host's own single-token decode does. From transformers 5.25 a
    linear-attention layer keeps the sequence length (``Cache.get_seq_length`` reads it when
    that layer comes first) and ``Cache.increase_count(layer_idx, state_idx)`` advances it for
    conv state 0; earlier releases keep no such count (their ``Cache`` has no
    ``increase_count``) and there is nothing to advance. Mutates the cache's counter."""
    increase_count = getattr(cache, "increase_count", None)
    if increase_count is not None:
        increase_count(layer_index, 0)


def _is_host_cache(value) -> bool:
    """A transformers ``Cache`` of linear-attention layers (duck-typed: the hook needs exactly
    ``layers`` and ``has_previous_state``)."""
    return hasattr(value, "has_previous_state") and hasattr(value, "layers")


def unknown_cache_arguments(arguments: dict) -> list:
    """Names of the keyword ``arguments`` that hold a host cache under a name other than
    :data:`CACHE_ARGUMENTS` (a renamed argument the hook would otherwise not see)."""
    return [k for k, v in arguments.items() if k not in CACHE_ARGUMENTS and _is_host_cache(v)]


def host_cache(arguments: dict):
    """The host cache among a forward's keyword ``arguments``: the value of the first of
    :data:`CACHE_ARGUMENTS` or ``past_key_values`` that is set, else any value that looks like
    one (so that a renamed argument is still found). None when there is none."""
    for name in (*CACHE_ARGUMENTS, "past_key_values"):
        if arguments.get(name) is not None:
            return arguments[name]
    return next((v for v in arguments.values() if _is_host_cache(v)), None)


def bind_torch_paths(family: str) -> None:
    """Imports ``family``'s modelling module with flash-linear-attention hidden, so that its GDN /
    KDA functions bind their PyTorch paths (fla's Triton kernels need a GPU). Call it before the
    module is first imported, on a machine where the model will run on the CPU; a family without
    fla kernels, or a machine without fla, needs nothing.

    Raises:
        RuntimeError: the module was already imported with fla's kernels bound (nothing can
            rebind them in this process).
    """
    name = _FLA_MODELLING.get(family)
    if name is None or importlib.util.find_spec("fla") is None:
        return
    module_name = f"transformers.models.{name}"
    module = sys.modules.get(module_name)
    if module is not None:
        if _binds_fla(module):
            raise RuntimeError(
                f"{module_name} was imported in this process while "
                f"flash-linear-attention was importable, so its GDN / KDA functions "
                f"run fla's Triton kernels, which need a GPU; run on a CUDA device, "
                f"or build the CPU model before anything imports that module"
            )
        return
    fla = sys.modules.get("fla")
    sys.modules["fla"] = None  # `import fla` raises ImportError while the module binds
    try:
        importlib.import_module(module_name)
    finally:
        if fla is None:
            del sys.modules["fla"]
        else:
            sys.modules["fla"] = fla


def _binds_fla(module) -> bool:
    """Whether any function of ``module`` closes over a function defined in fla (how
    transformers' ``use_kernel_func_from_hub_with_fallback`` keeps the bound implementation)."""
    for value in vars(module).values():
        for cell in getattr(value, "__closure__", None) or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if (getattr(content, "__module__", "") or "").split(".")[0] == "fla":
                return True
    return False
