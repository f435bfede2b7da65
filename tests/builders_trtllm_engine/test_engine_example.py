"""examples/trtllm_engine (not run here: no TensorRT-LLM, Triton or GPU): the scripts parse, and
the build flags and the Triton config agree with what the engine flow needs."""

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(ROOT, "examples", "trtllm_engine")


def _read(*parts):
    return open(os.path.join(EX, *parts)).read()


@pytest.mark.parametrize("script", ["build.sh", "serve.sh"])
def test_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", os.path.join(EX, script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _config_parameters(text):
    return dict(re.findall(r'key: "(\w+)"\s*value: \{ string_value: "([^"]*)" \}', text))


def test_triton_config_fits_the_engine():
    config = _read("triton", "tensorrt_llm", "config.pbtxt")
    build = _read("build.sh")
    assert re.search(r'^backend: "tensorrtllm"$', config, re.M)
    batch = int(re.search(r"^max_batch_size: (\d+)$", config, re.M).group(1))
    assert f"MAX_BATCH=${{MAX_BATCH:-{batch}}}" in build
    assert f"preferred_batch_size: [ {batch} ]" in config
    params = _config_parameters(config)
    assert params == {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": "@ENGINE_DIR@",
        "max_beam_width": "1",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "enable_chunked_context": "false",
        "enable_kv_cache_reuse": "false",
        "exclude_input_in_output": "true",
    }
    assert "@ENGINE_DIR@" in _read("serve.sh") and "LD_PRELOAD=" in _read("serve.sh")


def test_build_flags_are_the_ones_the_hook_needs():
    build = _read("build.sh")
    cmd = build[build.index("trtllm-replayssm build") :].split("\n\n")[0]
    flags = dict(re.findall(r"(--[\w-]+) (\S+)", cmd))
    assert flags["--replayssm-buffer-len"] == '"${L}"'
    for flag, value in (
        ("--paged_state", "enable"),
        ("--remove_input_padding", "enable"),
        ("--mamba_conv1d_plugin", "auto"),
        ("--paged_kv_cache", "disable"),
        ("--max_beam_width", "1"),
        ("--workers", "1"),
    ):
        assert flags[flag] == value, flag
    assert flags["--max_batch_size"] == '"${MAX_BATCH}"'
    assert 'pip install "tensorrt_llm==1.2.1"' in build
