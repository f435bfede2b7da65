"""The engine-flow adapter (builders/trtllm_engine/adapter.py) where TensorRT-LLM is absent or is
not the release it was written for: it refuses with a message naming what it expected and got.
Its TensorRT-LLM side (the rewrite on a real network, the plugin layers) was not run here."""

import sys
import types

import pytest

from trtllm_replayssm_builders.trtllm_engine import adapter
from trtllm_replayssm_builders.trtllm_engine.hook import EngineFlowError


@pytest.fixture
def no_tensorrt_llm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # `import tensorrt_llm` raises ImportError


def test_import_refuses_without_tensorrt_llm(no_tensorrt_llm):
    with pytest.raises(ImportError, match=r"trtllm_engine: import tensorrt_llm failed \(.*\); expected TensorRT-LLM 1\.2\.1"):
        adapter.import_tensorrt_llm()


@pytest.mark.parametrize(
    "call",
    [
        lambda: adapter.enable_replayssm_engine(object(), object(), buffer_len=16),
        lambda: adapter.run_trtllm_build(["--checkpoint_dir", "c"], buffer_len=16),
    ],
    ids=["enable", "build"],
)
def test_entry_points_refuse_without_tensorrt_llm(no_tensorrt_llm, call):
    with pytest.raises(ImportError, match="expected TensorRT-LLM 1.2.1"):
        call()


def test_import_lists_every_missing_name(monkeypatch):
    """A stand-in ``tensorrt_llm`` module without the names the hook uses (not a package)."""
    monkeypatch.setitem(sys.modules, "tensorrt_llm", types.ModuleType("tensorrt_llm"))
    sys.modules["tensorrt_llm"].__version__ = "1.1.0"
    with pytest.raises(EngineFlowError) as e:
        adapter.import_tensorrt_llm()
    msg = str(e.value)
    assert msg.startswith("import_tensorrt_llm: TensorRT-LLM 1.1.0 lacks what the engine flow uses (written for 1.2.1):")
    assert "  tensorrt_llm.models.MambaForCausalLM: missing" in msg
    assert "  tensorrt_llm.layers.ssm.Mamba2.forward: missing" in msg
    assert "  tensorrt_llm.commands.build.build: missing" in msg


def test_plugin_library_path_is_required(monkeypatch, tmp_path):
    monkeypatch.delenv(adapter.PLUGIN_LIBRARY_ENV, raising=False)
    with pytest.raises(
        EngineFlowError, match=r"load_plugin_library: path is None; expected the plugin library built from plugins/cpp"
    ):
        adapter.load_plugin_library()
    missing = str(tmp_path / "libreplayssm_engine_plugins.so")
    with pytest.raises(EngineFlowError, match="path is '.*libreplayssm_engine_plugins.so'"):
        adapter.load_plugin_library(missing)


class _Registry:
    def __init__(self, names):
        self.names, self.asked = names, []

    def get_creator(self, name, version, namespace):
        self.asked.append((name, version, namespace))
        return object() if (name, version, namespace) in self.names else None

    def load_library(self, path):  # the creators register on load: IPluginRegistry::loadLibrary must not be used
        raise AssertionError("load_library called")


def _fake_tensorrt(monkeypatch, registry):
    trt = types.ModuleType("tensorrt")
    trt.get_plugin_registry = lambda: registry
    monkeypatch.setitem(sys.modules, "tensorrt", trt)


@pytest.mark.parametrize("registered", [2, 1])
def test_plugin_library_is_dlopened_and_its_creators_checked(monkeypatch, tmp_path, registered):
    """dlopen (RTLD_GLOBAL, after importing tensorrt) registers the creators (the library's static
    initializer); both must then be in TensorRT's registry under the replayssm namespace."""
    import ctypes

    lib = tmp_path / "libreplayssm_engine_plugins.so"
    lib.write_bytes(b"")
    opened = []
    monkeypatch.setattr(ctypes, "CDLL", lambda path, mode=0: opened.append((path, mode)))
    names = [("Mamba2Route", "1", "replayssm"), ("Mamba2ReplayBlock", "1", "replayssm")][:registered]
    registry = _Registry(names)
    _fake_tensorrt(monkeypatch, registry)
    if registered == 2:
        assert adapter.load_plugin_library(str(lib)) == str(lib)
    else:
        with pytest.raises(EngineFlowError, match=r"registers no replayssm::Mamba2ReplayBlock version 1; expected"):
            adapter.load_plugin_library(str(lib))
    assert opened == [(str(lib), ctypes.RTLD_GLOBAL)]
    assert registry.asked[0] == ("Mamba2Route", "1", "replayssm")
