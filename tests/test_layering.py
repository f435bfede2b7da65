"""Import layering: the reference needs no Triton; the core package pulls in no TensorRT side."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


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
