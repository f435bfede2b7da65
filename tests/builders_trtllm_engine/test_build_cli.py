"""``trtllm-replayssm build`` (builders/cli.py: add_build): its own options, the trtllm-build
arguments passed through unchanged, and the errors where TensorRT-LLM is missing. The
subcommand is added as the installed entry point would add it (the editable install here may
predate it); TensorRT-LLM is absent, so the wrapped trtllm-build itself never runs."""

import importlib.util
import os
import sys

import pytest

from trtllm_replayssm import cli
from trtllm_replayssm_builders import cli as builder_cli
from trtllm_replayssm_builders.trtllm_engine import adapter
from trtllm_replayssm_builders.trtllm_engine.hook import EngineFlowError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRTLLM_ARGS = ["--checkpoint_dir", "ckpt", "--output_dir", "engine", "--max_batch_size", "64", "--gemm_plugin", "auto"]


class _EntryPoint:
    name = "build"

    @staticmethod
    def load():
        return builder_cli.add_build


@pytest.fixture(autouse=True)
def build_subcommand(monkeypatch):
    monkeypatch.setattr(cli.importlib.metadata, "entry_points", lambda group: [_EntryPoint()])
    monkeypatch.delenv(builder_cli.PLUGIN_LIBRARY_ENV, raising=False)


@pytest.fixture
def tensorrt_llm_found(monkeypatch):
    """find_spec answers as if tensorrt_llm were installed (the adapter is then replaced)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "tensorrt_llm" else real(name, *a))


@pytest.fixture
def captured(monkeypatch, tensorrt_llm_found):
    calls = []

    def run(args, *, buffer_len, plugin_lib):
        calls.append((list(args), buffer_len, plugin_lib))
        return 0

    monkeypatch.setattr(adapter, "run_trtllm_build", run)
    return calls


def _usage_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_trtllm_build_arguments_pass_through_in_order(captured):
    argv = ["build", "--checkpoint_dir", "ckpt", "--replayssm-buffer-len", "8", *TRTLLM_ARGS[2:]]
    assert cli.main(argv) == 0
    assert captured == [(["--checkpoint_dir", "ckpt", *TRTLLM_ARGS[2:]], 8, None)]


def test_defaults_and_the_plugin_library(captured, monkeypatch):
    monkeypatch.setenv(builder_cli.PLUGIN_LIBRARY_ENV, "/opt/libreplayssm_engine_plugins.so")
    assert cli.main(["build", *TRTLLM_ARGS]) == 0
    assert captured[-1] == (TRTLLM_ARGS, 16, "/opt/libreplayssm_engine_plugins.so")
    assert cli.main(["build", "--replayssm-plugin-lib", "/x.so", "--model_config=c.json"]) == 0
    assert captured[-1] == (["--model_config=c.json"], 16, "/x.so")
    assert builder_cli.PLUGIN_LIBRARY_ENV == adapter.PLUGIN_LIBRARY_ENV


def test_without_tensorrt_llm_the_error_names_it(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorrt_llm" else real(name, *a))
    err = _usage_error(["build", *TRTLLM_ARGS], capsys)
    assert "build: tensorrt_llm is not importable; expected TensorRT-LLM 1.2.1" in err


def test_an_import_error_of_the_adapter_is_a_usage_error(tensorrt_llm_found, monkeypatch, capsys):
    """find_spec sees a package, but importing it fails: the adapter's ImportError, exit 2."""
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)
    err = _usage_error(["build", *TRTLLM_ARGS], capsys)
    assert "import tensorrt_llm failed" in err and "expected TensorRT-LLM 1.2.1" in err


def test_a_hook_that_cannot_engage_exits_1(monkeypatch, tensorrt_llm_found, capsys):
    def refuse(args, **kw):
        raise EngineFlowError("run_trtllm_build: the ReplaySSM hook rewrote 0 models; expected ...")

    monkeypatch.setattr(adapter, "run_trtllm_build", refuse)
    assert cli.main(["build", *TRTLLM_ARGS]) == 1
    assert "trtllm-replayssm build: error: run_trtllm_build: the ReplaySSM hook rewrote 0 models" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--replayssm-buffer-len", "65", *TRTLLM_ARGS], "--replayssm-buffer-len 65: expected at most 64"),
        (
            ["--replayssm-buffer-len", "0", *TRTLLM_ARGS],
            "argument --replayssm-buffer-len: expected a positive integer, got '0'",
        ),
        ([*TRTLLM_ARGS, "--workers", "2"], "trtllm-build arguments: --workers 2: expected 1"),
        (["--max_batch_size", "8"], "expected --checkpoint_dir DIR or --model_config FILE among the trtllm-build arguments"),
    ],
)
def test_usage_errors(argv, message, captured, capsys):
    assert message in _usage_error(["build", *argv], capsys)
    assert captured == []


def test_other_subcommands_still_refuse_unknown_arguments(capsys):
    err = _usage_error(["plan", "--model", "nemotron-3-super-120b", "--max_batch_size", "8"], capsys)
    assert "unrecognized arguments: --max_batch_size 8" in err


def test_help_names_the_options_and_imports_no_tensorrt_llm(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["build", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm build")
    assert "--replayssm-buffer-len L" in out and "--replayssm-plugin-lib PATH" in out and "trtllm-build" in out
    assert "tensorrt_llm" not in sys.modules or sys.modules["tensorrt_llm"] is None


def test_setup_registers_the_subcommand():
    setup = open(os.path.join(ROOT, "setup.py")).read()
    assert '"build=trtllm_replayssm_builders.cli:add_build"' in setup
    assert '"trtllm-engine": ["tensorrt_llm==1.2.1"]' in setup
