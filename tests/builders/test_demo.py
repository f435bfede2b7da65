"""``trtllm-replayssm demo``: the model demo's figures and its subcommand (an entry point of the
installed package that the core CLI loads): its model names (plan's presets), text, JSON and
argument errors."""

import json
import os
import subprocess
import sys

import pytest

from trtllm_replayssm import cli
from trtllm_replayssm_builders import cli as demo_cli
from trtllm_replayssm_builders.cli import DEMO_ALIASES, DEMO_MODELS, add_demo
from trtllm_replayssm_builders.hf.demo import run_model_demo
from trtllm_replayssm_builders.hf.random_models import FAMILIES, SIZES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("family", FAMILIES)
def test_run_model_demo_figures(family):
    fig = run_model_demo(family, size="tiny", buffer_len=4, batch=3, progress=False)
    assert (fig["new_tokens"], fig["decode_steps"], fig["flushes"]) == (17, 16, 4)
    assert fig["prompt_lengths"] == [16, 12, 8]
    assert fig["first_divergence"] is None
    assert fig["tokens_equal"] == fig["tokens_total"] == 3 * 17
    assert fig["logits_rel_err"] <= 1e-4
    # Measured bytes equal the planner's: 16 decode steps = 4 windows of L, so every row flushed
    # four times; the host rewrites every state every step.
    plan = fig["plan"]
    assert fig["host_written"] == pytest.approx(3 * plan["conventional_written"])
    assert fig["replay_written"] == pytest.approx(3 * plan["replay_written"])
    assert fig["replay_written"] < fig["host_written"]
    assert plan["replay_bytes"] > plan["conventional_bytes"]  # the records
    assert fig["host_step_ms"] > 0 and fig["replay_step_ms"] > 0


def test_run_model_demo_refuses_a_run_that_did_not_replay(monkeypatch):
    """Teeth: a hook that leaves every call to the host path decodes on the host path with identical logits;
    the demo must refuse to report that as a ReplaySSM run."""
    from trtllm_replayssm_builders.hf.hook import ReplaySSMHook

    def host_path(self, layer, original, hidden_states, cache, attention_mask, kwargs):
        given = {} if cache is None else {layer.cache_argument: cache}
        return original(layer.mixer, hidden_states, attention_mask=attention_mask, **given, **kwargs)

    monkeypatch.setattr(ReplaySSMHook, "_forward", host_path)
    with pytest.raises(
        RuntimeError, match=r"ran the replay op a different number of times \(layer: calls\): \{0: 0, 1: 0, 2: 0, 3: 0\}"
    ):
        run_model_demo("mamba2", size="tiny", buffer_len=4, batch=2, progress=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        pytest.param(dict(batch=0), "batch is 0", id="batch"),
        pytest.param(dict(new_tokens=1), "new_tokens is 1", id="new_tokens"),
        pytest.param(dict(size="huge"), "size is 'huge'", id="size"),
    ],
)
def test_run_model_demo_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_model_demo("mamba2", progress=False, **kwargs)


class _DemoEntryPoint:
    """What importlib.metadata yields for setup.py's ``demo=trtllm_replayssm_builders.cli:add_demo``."""

    name = "demo"

    @staticmethod
    def load():
        return add_demo


@pytest.fixture
def demo_entry_point(monkeypatch):
    monkeypatch.setattr(
        cli.importlib.metadata, "entry_points", lambda group: [_DemoEntryPoint()] if group == cli.EXTENSION_GROUP else []
    )


def test_demo_model_names_are_plans_presets_and_the_families_without_one():
    """One naming scheme: every preset of plan / bench is a demo model (the demo builds its
    family); each random-model family is reachable; the old family names still work."""
    from trtllm_replayssm.models import PRESETS, from_hf_config

    assert set(PRESETS) <= set(DEMO_MODELS)
    assert set(DEMO_MODELS.values()) == set(FAMILIES)
    assert set(DEMO_MODELS) - set(PRESETS) == {"mamba2", "qwen3-next"}
    for name in PRESETS:  # the preset's model_type is the demo family (MoE or not)
        model_type = PRESETS[name].get("text_config", PRESETS[name])["model_type"]
        assert model_type.replace("_moe", "").replace("_text", "") == DEMO_MODELS[name], name
        assert from_hf_config(PRESETS[name]).family  # a preset plan reads
    assert set(DEMO_ALIASES) == set(FAMILIES) - {"mamba2"}
    assert all(DEMO_MODELS[DEMO_ALIASES[f]] == f for f in DEMO_ALIASES)
    # The names the parser knows without importing torch are the random models'.
    assert set(demo_cli._SIZES) == set(SIZES)
    from trtllm_replayssm.demo import DTYPE_NAMES

    assert demo_cli._DTYPES == tuple(DTYPE_NAMES)


def test_cli_demo_takes_a_plan_preset_and_builds_its_family(demo_entry_point, capsys):
    assert (
        cli.main(
            [
                "demo",
                "--model",
                "kimi-linear-48b",
                "--size",
                "tiny",
                "--L",
                "4",
                "--batch",
                "2",
                "--new-tokens",
                "6",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("trtllm-replayssm demo: Kimi Linear with random weights (")
    assert "M parameters; the family of kimi-linear-48b, at demo size), cpu, f32, seed 0" in out.splitlines()[0]


def test_cli_demo_leaves_cpu_decode_times_out_and_says_why(demo_entry_point, capsys):
    assert (
        cli.main(
            ["demo", "--model", "mamba2", "--size", "tiny", "--L", "4", "--batch", "2", "--new-tokens", "6", "--device", "cpu"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("trtllm-replayssm demo: Mamba2 with random weights (") and "the family of" not in out
    assert (
        "decode time per step: not shown on a CPU, where the host decodes with transformers' "
        "pure-PyTorch path and ReplaySSM with its PyTorch reference" in " ".join(out.split())
    )
    assert "(median)" not in out and " ms" not in out


def test_cli_demo_json(demo_entry_point, capsys):
    assert (
        cli.main(
            [
                "demo",
                "--model",
                "nemotron_h",
                "--size",
                "tiny",
                "--L",
                "4",
                "--batch",
                "2",
                "--new-tokens",
                "6",
                "--device",
                "cpu",
                "--dtype",
                "fp32",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["config"] == {
        "model": "nemotron-3-super-120b",
        "family": "nemotron_h",
        "size": "tiny",
        "device": "cpu",
        "dtype": "f32",
        "seed": 0,
        "L": 4,
    }
    assert d["tokens_equal"] == d["tokens_total"] == 12 and d["first_divergence"] is None
    assert d["host_step_ms"] is None and d["replay_step_ms"] is None  # CPU: left out
    assert d["plan"]["replay_written"] < d["plan"]["conventional_written"]


def test_cli_demo_subcommand_prints_the_figures(monkeypatch, capsys):
    monkeypatch.setattr(
        cli.importlib.metadata, "entry_points", lambda group: [_DemoEntryPoint()] if group == cli.EXTENSION_GROUP else []
    )
    assert cli.main(["demo", "--model", "qwen3_5", "--size", "tiny", "--L", "4", "--batch", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trtllm-replayssm demo: Qwen3.5 with random weights")
    assert "ReplaySSM on Qwen3_5ForCausalLM: 6 Gated DeltaNet layers" in out
    assert "agreement: 34/34 tokens equal (identical)" in out
    for line in ("state bytes written per decode step", "decode time per step", "planner"):
        assert line in out


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["demo", "--model", "mamba1"], "invalid choice", id="model"),
        pytest.param(["demo", "--L", "65"], "at most 64", id="L65"),
        pytest.param(["demo", "--new-tokens", "1"], "expected at least 2", id="new_tokens"),
        pytest.param(["demo", "--batch", "abc"], "argument --batch: expected a positive integer, got 'abc'", id="batch-abc"),
        pytest.param(
            ["demo", "--device", "tpu"], "argument --device: expected cpu, cuda or cuda:N, got 'tpu'", id="device-tpu"
        ),
        pytest.param(
            ["demo", "--device", "meta"], "argument --device: expected cpu, cuda or cuda:N, got 'meta'", id="device-meta"
        ),
        pytest.param(["demo", "--dtype", "fp8"], "argument --dtype: expected one of f32, bf16, f16, got 'fp8'", id="dtype"),
    ],
)
def test_cli_demo_usage_errors_exit_2(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(
        cli.importlib.metadata, "entry_points", lambda group: [_DemoEntryPoint()] if group == cli.EXTENSION_GROUP else []
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def _installed_demo_entry_point() -> bool:
    import importlib.metadata

    return any(
        ep.name == "demo" and ep.value == "trtllm_replayssm_builders.cli:add_demo"
        for ep in importlib.metadata.entry_points(group=cli.EXTENSION_GROUP)
    )


@pytest.mark.skipif(
    not _installed_demo_entry_point(), reason="needs the package installed (pip install -e .) for its entry point"
)
def test_main_module_demo_runs_installed():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trtllm_replayssm",
            "demo",
            "--model",
            "mamba2",
            "--size",
            "tiny",
            "--L",
            "4",
            "--device",
            "cpu",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "agreement: 68/68 tokens equal (identical)" in proc.stdout


def test_cli_demo_without_transformers_says_how_to_install(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else find_spec(name, *a))
    monkeypatch.setattr(
        cli.importlib.metadata, "entry_points", lambda group: [_DemoEntryPoint()] if group == cli.EXTENSION_GROUP else []
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--device", "cpu"])
    assert exit_info.value.code == 2
    assert "pip install 'trtllm_replayssm[hf]'" in capsys.readouterr().err
