"""Run a callback once a package has finished importing: how ``TRTLLM_REPLAYSSM=1`` enables the
hooks in processes that import this package before TensorRT-LLM (``sitecustomize`` in
:data:`~trtllm_replayssm_builders.trtllm.STARTUP_DIR`, MPI workers, trtllm-serve, Triton).

:func:`after_import` puts a one-shot finder at the front of ``sys.meta_path``; when the package
is imported it lets the regular finders locate it, and wraps the loader so the callback runs
right after the package's ``__init__`` has executed. An exception from the callback propagates
out of that ``import`` statement.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from typing import Callable

__all__ = ["after_import"]


class _ThenCall(importlib.abc.Loader):
    """The package's own loader, plus the callback after ``exec_module``."""

    def __init__(self, loader, callback: Callable[[], None]) -> None:
        self._loader, self._callback = loader, callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name):  # resource readers and the like: the real loader's
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Calls ``callback()`` right after top-level package ``name`` is imported; now, if it
    already is. One pending hook per name (a second call replaces the first's callback)."""
    if "." in name:
        raise ValueError(f"after_import: name is {name!r}; expected a top-level package")
    if name in sys.modules:
        callback()
        return
    for finder in list(sys.meta_path):
        if isinstance(finder, _AfterImport) and finder.name == name:
            sys.meta_path.remove(finder)
    sys.meta_path.insert(0, _AfterImport(name, callback))
