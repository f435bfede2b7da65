"""Fixtures of the plugin tests."""

import pytest

import plugin_cases  # noqa: F401  (makes trtllm_replayssm_plugins importable)
from trtllm_replayssm_plugins import tensorrt_plugin


@pytest.fixture
def fresh(monkeypatch):
    """monkeypatch, with the plugins not yet registered in this process (each test installs its
    own fake TensorRT and registers into it)."""
    monkeypatch.setattr(tensorrt_plugin, "_REGISTERED", False)
    return monkeypatch
