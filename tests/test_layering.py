"""Import layering: the reference needs no Triton; the core package pulls in no TensorRT side."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_reference_imports_without_triton():
    proc = _run("""
        import sys
        sys.modules["triton"] = None  # any `import triton` now raises ImportError
        import trtllm_replayssm.reference
        loaded = [m for m in sys.modules if m.startswith("triton.") or m.startswith("trtllm_replayssm.kernels")]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_core_package_imports_no_plugin_builder_or_tensorrt():
    proc = _run("""
        import sys
        import trtllm_replayssm, trtllm_replayssm.cli, trtllm_replayssm.memory
        banned = ("trtllm_replayssm_plugins", "trtllm_replayssm_builders", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_plugin_package_imports_no_builder_or_tensorrt():
    """plugins -> core only; TensorRT is imported when a plugin is registered, not on import."""
    proc = _run(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "tests", "plugins")!r})
        import plugin_cases  # trtllm_replayssm_plugins from plugins/ when not installed
        import trtllm_replayssm_plugins.tensorrt_plugin, trtllm_replayssm_plugins.network
        import trtllm_replayssm_plugins.export
        banned = ("trtllm_replayssm_builders", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_core_cli_parser_names_no_builder():
    """The core CLI reaches builders only through entry points (group trtllm_replayssm.cli):
    with none installed, building every parser imports no builder."""
    proc = _run("""
        import importlib.metadata, sys
        importlib.metadata.entry_points = lambda group: []
        from trtllm_replayssm.cli import build_parser
        build_parser()
        loaded = [m for m in sys.modules if m.split(".")[0] == "trtllm_replayssm_builders"]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_hf_builders_import_no_transformers():
    """builders.hf -> core only: it recognises transformers mixers by class name, so importing it
    (and the demo subcommand's parser) needs no transformers."""
    proc = _run(f"""
        import importlib.util, sys
        sys.modules["transformers"] = None  # any `import transformers` now raises ImportError
        spec = importlib.util.spec_from_file_location(
            "trtllm_replayssm_builders", {os.path.join(ROOT, "builders", "__init__.py")!r},
            submodule_search_locations=[{os.path.join(ROOT, "builders")!r}])
        sys.modules["trtllm_replayssm_builders"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["trtllm_replayssm_builders"])
        import argparse
        import trtllm_replayssm_builders.hf, trtllm_replayssm_builders.hf.demo
        from trtllm_replayssm_builders.cli import add_demo
        add_demo(argparse.ArgumentParser().add_subparsers())
        banned = ("trtllm_replayssm_plugins", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr
