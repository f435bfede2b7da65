"""The TensorRT-LLM examples cannot run here; their syntax and the settings ReplaySSM requires
are checked."""

import os
import py_compile
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "trtllm")


def test_llm_api_example_compiles():
    py_compile.compile(os.path.join(EXAMPLES, "llm_api.py"), doraise=True)


@pytest.mark.parametrize("script", ["serve.sh", "mpirun_tp.sh"])
def test_shell_examples_parse_and_export_the_variables(script):
    path = os.path.join(EXAMPLES, script)
    subprocess.run(["bash", "-n", path], check=True)
    text = open(path, encoding="utf-8").read()
    assert "export TRTLLM_REPLAYSSM=1" in text and "STARTUP_DIR" in text


@pytest.mark.parametrize("name", ["extra_llm_api_options.yaml", "triton/tensorrt_llm/1/model.yaml"])
def test_yaml_examples_use_v2_manager_without_block_reuse(name):
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    kv = config["kv_cache_config"]
    assert kv["use_kv_cache_manager_v2"] is True and kv["enable_block_reuse"] is False
    assert config.get("pipeline_parallel_size", 1) == 1
