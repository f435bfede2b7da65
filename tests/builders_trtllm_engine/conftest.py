"""Engine-flow tests: CPU only, no TensorRT, no TensorRT-LLM. The plugins and builders packages
are loaded from the checkout when not installed, under their installed names."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "plugins"))

import plugin_cases  # noqa: E402

plugin_cases.import_plugins_package()
if importlib.util.find_spec("trtllm_replayssm_builders") is None:
    _b = os.path.join(ROOT, "builders")
    _spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_builders", os.path.join(_b, "__init__.py"), submodule_search_locations=[_b]
    )
    sys.modules["trtllm_replayssm_builders"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["trtllm_replayssm_builders"])
