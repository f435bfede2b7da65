"""One helper that defines every ``torch.ops.replayssm.*`` custom op: schema, CPU and CUDA
implementations and the fake, from one typed prototype.

An op is registered straight with the dispatcher (``torch.library.Library.define`` and
``impl``), not through ``torch.library.custom_op``, whose Python wrapper adds per-call work to
every eager step (vLLM's ``direct_register_custom_op`` makes the same choice). The ops still
trace under ``torch.compile`` (through the fake) and record into CUDA graphs.

The prototype's parameters are the op's arguments in order, all positional (custom ops take no
keyword-only tensors); the reference and the launcher receive them by name and take only the
names they declare (the references need no ``arrivals`` counter).
"""

from __future__ import annotations

import importlib
import inspect

from typing import Callable, Dict, Optional, Sequence

import torch

from torch import Tensor

__all__ = ["define_op", "LAUNCHERS", "by_name", "new_out"]

_LIBRARY = torch.library.Library("replayssm", "FRAGMENT")

LAUNCHERS: Dict[str, str] = {}  # op name -> "module:function" of its CUDA launcher


def by_name(target: Callable, params: Sequence[str], defaults: Sequence = ()) -> Callable[[tuple], None]:
    """A caller of ``target`` with an op's positional arguments, each passed by its name;
    ``target``'s parameters that the op lacks must have defaults (a launcher's ``config``).
    ``defaults``: the op's trailing defaults (the dispatcher leaves out trailing arguments equal
    to their defaults)."""
    accepted = inspect.signature(target).parameters
    missing = [p.name for p in accepted.values() if p.name not in params and p.default is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"define_op: {target.__name__} needs {missing}, which the op's prototype lacks")
    picks = [(name, i) for i, name in enumerate(params) if name in accepted]
    first_default = len(params) - len(defaults)

    def call(args: tuple) -> None:
        full = tuple(args) + tuple(defaults[len(args) - first_default :])
        with torch.no_grad():  # the ops have no autograd: in-place writes to views made under no_grad
            target(**{name: full[i] for name, i in picks})

    return call


def define_op(name: str, *, mutates_args: Sequence[str], reference: Callable, launcher: str):
    """Decorator: registers ``replayssm::<name>`` with the schema of the decorated prototype.

    Args:
        name: the op's name in the ``replayssm`` namespace.
        mutates_args: the prototype's parameters the op writes.
        reference: the CPU implementation (:mod:`trtllm_replayssm.reference`).
        launcher: ``"module:function"`` under :mod:`trtllm_replayssm.kernels`, the CUDA
            implementation; imported at the first CUDA call (the CPU path needs no Triton).
    Returns:
        A decorator returning ``torch.ops.replayssm.<name>`` (the prototype's body never runs).
    """

    def define(prototype: Callable):
        signature = inspect.signature(prototype).parameters
        params = tuple(signature)
        defaults = tuple(p.default for p in signature.values() if p.default is not inspect.Parameter.empty)
        cpu = by_name(reference, params, defaults)
        cuda = None

        def run_cuda(*args) -> None:
            nonlocal cuda
            if cuda is None:
                module, function = launcher.split(":")
                cuda = by_name(
                    getattr(importlib.import_module(f"..kernels.{module}", __package__), function), params, defaults
                )
            cuda(args)

        LAUNCHERS[name] = launcher
        _LIBRARY.define(name + torch.library.infer_schema(prototype, mutates_args=mutates_args))
        _LIBRARY.impl(name, lambda *args: cpu(args), "CPU")
        _LIBRARY.impl(name, run_cuda, "CUDA")
        torch.library.register_fake(f"replayssm::{name}", lambda *args: None, lib=_LIBRARY)
        return getattr(torch.ops.replayssm, name)

    return define


def new_out(like: Tensor, out: Optional[Tensor]) -> Tensor:
    """``out``, or a fresh zeroed tensor like ``like``: the ops leave padding rows (and tokens
    past a row's ``num_tokens``) unwritten, so a fresh output reads zero there."""
    return torch.zeros_like(like) if out is None else out
