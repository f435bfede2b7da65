"""Enables ReplaySSM in every Python process of a TensorRT-LLM deployment that has
``TRTLLM_REPLAYSSM=1``: put this directory first on ``PYTHONPATH``
(``trtllm_replayssm_builders.trtllm.STARTUP_DIR``). Processes without the variable are left
alone. The next ``sitecustomize`` on ``sys.path`` (a distribution's own) still runs first.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


class _RefuseTensorRTLLM:
    """Makes ``import tensorrt_llm`` fail with the setup error: Python only prints exceptions
    raised in sitecustomize, which would leave TensorRT-LLM running without ReplaySSM."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "tensorrt_llm":
            raise ImportError(
                f"TRTLLM_REPLAYSSM=1, but ReplaySSM could not be set up: {type(self.error).__name__}: {self.error}"
            ) from self.error
        return None


_run_next_sitecustomize()
if os.environ.get("TRTLLM_REPLAYSSM", "").strip() == "1":
    try:
        # Importing the package with the variable set arms the hook that enables ReplaySSM once
        # tensorrt_llm is imported.
        import trtllm_replayssm_builders.trtllm  # noqa: F401
    except Exception as error:  # noqa: BLE001 - re-raised at `import tensorrt_llm`
        sys.meta_path.insert(0, _RefuseTensorRTLLM(error))
