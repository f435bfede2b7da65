"""trtllm-replayssm CLI: the layer demo's figures, ``plan``, extension subcommands,
``python -m trtllm_replayssm``, ``--help`` (fast: no torch), the shared argument types and their
messages, ``--json``. ``bench`` has its own file (tests/test_bench.py)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from trtllm_replayssm import cli
from trtllm_replayssm.cli import main
from trtllm_replayssm.demo import CPU_GEOMETRY, run_mamba2_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_run_mamba2_demo_figures_f32():
    nheads, head_dim, d_state, ngroups = CPU_GEOMETRY
    fig = run_mamba2_demo(
        nheads=nheads,
        head_dim=head_dim,
        d_state=d_state,
        ngroups=ngroups,
        L=4,
        batch=4,
        steps=40,
        device="cpu",
        progress=False,
    )
    assert fig["rel_err"] < 1e-5, fig
    assert fig["warmup_steps"] == 0 + 1 + 2 + 3
    # Cursors spread over all of [0, 4): each row flushes once every 4 steps.
    assert fig["flushes"] == 40 * 4 // 4
    assert fig["replay_written"] < fig["conventional_written"]
    assert fig["conventional_written"] == fig["state_bytes"] == nheads * head_dim * d_state * 4
    # With the cursors spread evenly, the measured writes are the model's figures exactly.
    assert fig["replay_written"] == pytest.approx(fig["model_replay_written"])
    assert fig["conventional_written"] == pytest.approx(fig["model_conventional_written"])


def test_run_mamba2_demo_rejects_zero_steps():
    with pytest.raises(ValueError, match="steps"):
        run_mamba2_demo(nheads=2, head_dim=4, d_state=4, ngroups=1, steps=0, progress=False)


def test_main_module_layer_demo_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "trtllm_replayssm", "layer-demo", "--steps", "20", "--L", "4"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "max relative error" in proc.stdout
    assert "flushes" in proc.stdout


@pytest.mark.parametrize("argv", [["--help"], ["layer-demo", "--help"]], ids=["top", "layer-demo"])
def test_main_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm")
    assert "layer-demo" in out


def test_main_runs_subcommands_of_installed_extensions(monkeypatch, capsys):
    """An entry point of group trtllm_replayssm.cli adds a subcommand; the core names none."""

    def add_hello(subparsers):
        p = subparsers.add_parser("hello", help="an extension's subcommand")
        p.add_argument("--name", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    class EntryPoint:
        name = "hello"

        @staticmethod
        def load():
            return add_hello

    def entry_points(group):
        assert group == cli.EXTENSION_GROUP == "trtllm_replayssm.cli"
        return [EntryPoint()]

    monkeypatch.setattr(cli.importlib.metadata, "entry_points", entry_points)
    assert main(["hello", "--name", "ReplaySSM"]) == 0
    assert capsys.readouterr().out == "hello ReplaySSM\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["layer-demo", "--nheads", "8", "--ngroups", "3"], "must divide", id="ngroups"),
        pytest.param(["layer-demo", "--L", "65"], "at most 64", id="L65"),
        pytest.param(["layer-demo", "--steps", "0"], "argument --steps: expected a positive integer, got '0'", id="steps0"),
        pytest.param(
            ["layer-demo", "--batch", "abc"], "argument --batch: expected a positive integer, got 'abc'", id="batch-abc"
        ),
        pytest.param(
            ["layer-demo", "--state-dtype", "f64"],
            "argument --state-dtype: expected one of f32, bf16, f16, got 'f64'",
            id="dtype",
        ),
        pytest.param(
            ["layer-demo", "--device", "meta"], "argument --device: expected cpu, cuda or cuda:N, got 'meta'", id="device-meta"
        ),
        pytest.param(
            ["layer-demo", "--device", "tpu"], "argument --device: expected cpu, cuda or cuda:N, got 'tpu'", id="device-tpu"
        ),
        pytest.param([], "required", id="no-subcommand"),
    ],
)
def test_main_usage_error_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_main_layer_demo_cuda_unavailable_exits_2(device, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["layer-demo", "--device", device])
    assert exit_info.value.code == 2
    assert f"--device {device}: CUDA is not available" in capsys.readouterr().err


# --------------------------------------------------------------------------- plan


def _plan_json(argv, capsys):
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_json_nemotron_super_figures(capsys):
    d = _plan_json(["--model", "nemotron-3-super-120b", "--kv-dtype", "fp8"], capsys)
    assert d["model"]["layer_counts"] == {"mamba2": 40, "moe": 40, "attention": 8}
    assert d["model"]["ssm_per_attention"] == 5.0
    layer = d["ssm_layers"][0]["bytes_per_sequence"]
    assert layer["conventional"]["state"] == 4 * 2**20
    assert layer["conventional_spec"]["state"] == 5 * 4 * 2**20  # 1 + T snapshots, T = 4
    assert d["attention_layers"][0]["kv_bytes_per_token"] == 512
    assert d["kv_bytes_per_token"] == 8 * 512
    modes = d["modes"]
    assert modes["conventional"]["traffic_per_step"]["state_read"] == 40 * 4 * 2**20
    assert modes["replay_spec"]["max_concurrency"] > 3 * modes["conventional_spec"]["max_concurrency"]
    assert d["budget"]["cache_bytes"] == int(141 * 2**30 * 0.9)


def test_plan_options_reach_the_planner(capsys):
    d = _plan_json(
        [
            "--model",
            "qwen3.5-122b-a10b",
            "--tp",
            "4",
            "--gpu-mem",
            "80GB",
            "--free-fraction",
            "0.5",
            "--weights-gib",
            "40",
            "--max-seq-len",
            "1024",
            "--buffer-len",
            "8",
            "--spec-tokens",
            "2",
            "--accepted",
            "1.5",
            "--state-dtype",
            "bf16",
            "--record-dtype",
            "fp32",
            "--conv-dtype",
            "fp16",
            "--padding-slots",
            "0",
        ],
        capsys,
    )
    assert d["model"]["tp_size"] == 4
    assert d["ssm_layers"][0]["geometry"]["v_heads"] == 16
    assert d["config"] == {
        "buffer_len": 8,
        "spec_tokens": 2,
        "accepted": 1.5,
        "state_dtype": "bf16",
        "record_dtype": "fp32",
        "conv_dtype": "fp16",
        "kv_dtype": "bf16",
    }
    assert d["budget"]["gpu_mem_bytes"] == 80 * 10**9
    assert d["budget"]["weights_per_rank"] == 10 * 2**30
    assert d["budget"]["cache_bytes"] == int((80 * 10**9 - 10 * 2**30) * 0.5)
    # 12 attention layers, K and V of 1 KV head per rank (2 / 4, replicated), bf16.
    assert d["modes"]["replay"]["kv_bytes_per_sequence"] == 1024 * 12 * 2 * 1 * 256 * 2
    assert d["ssm_layers"][0]["bytes_per_sequence"]["replay"]["state"] == 16 * 128 * 128 * 2


def test_plan_reads_a_config_file(tmp_path, capsys):
    from trtllm_replayssm.models import PRESETS

    path = tmp_path / "config.json"
    path.write_text(json.dumps(PRESETS["kimi-linear-48b"]))
    from_file = _plan_json(["--model", str(path)], capsys)
    preset = _plan_json(["--model", "kimi-linear-48b"], capsys)
    assert from_file["modes"] == preset["modes"]


def test_plan_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm plan") and "--kv-dtype" in out


def test_plan_table(capsys):
    assert main(["plan", "--model", "nemotron-3-nano-4b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trtllm-replayssm plan: nemotron-3-nano-4b (NemotronH), TP 1")
    for label in ("conventional spec", "replay spec", "max seqs", "= KV tokens", "mamba2 x21"):
        assert label in out


def test_main_module_plan_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "trtllm_replayssm", "plan", "--model", "qwen3.5-4b", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["family"] == "Qwen3-Next/Qwen3.5"


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(
            ["--model", "nemotron-4"],
            "neither a preset nor a file; expected a preset \\(nemotron-3-nano-4b",
            id="unknown-preset",
        ),
        pytest.param(
            ["--model", "nemotron-3-super-120b", "--tp", "3"], "nheads = 128 is not divisible by tp_size = 3", id="tp3"
        ),
        pytest.param(["--model", "qwen3.5-4b", "--gpu-mem", "12XB"], "is not a size", id="gpu-mem"),
        pytest.param(["--model", "qwen3.5-4b", "--spec-tokens", "32"], "expected B >= T", id="B<T"),
        pytest.param(["--model", "qwen3.5-4b", "--weights-gib", "200"], "leave nothing", id="weights"),
        pytest.param(
            ["--model", "qwen3.5-4b", "--kv-dtype", "int4"],
            "argument --kv-dtype: expected one of fp8, bf16, fp16, fp32, got 'int4'",
            id="kv-dtype",
        ),
        pytest.param(["--model", "qwen3.5-4b", "--tp", "x"], "argument --tp: expected a positive integer, got 'x'", id="tp-x"),
        pytest.param(
            ["--model", "nemotron-3-super-120b", "--max-seq-len", "99999999999"],
            "no sequence can fit: one sequence's KV cache, 99,999,999,999 tokens \\(--max-seq-len\\) x 8.00 KiB, "
            "takes 745.06 TiB, more than the whole GPU \\(141.00 GiB, --gpu-mem\\); expected --max-seq-len at most "
            "18,481,152",
            id="max-seq-len",
        ),
        pytest.param([], "--model", id="no-model"),
    ],
)
def test_plan_usage_error_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", *argv])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_plan_malformed_config_exits_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--model", str(path)])
    assert exit_info.value.code == 2
    assert "expected one of: NemotronH" in capsys.readouterr().err


# --------------------------------------------------------------------------- startup and shared types


def test_help_imports_no_torch_triton_or_transformers():
    """Parsers build without torch (it takes seconds to import): --help answers at once, with
    the installed extensions' subcommands too; a handler imports what it runs."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import contextlib, io, sys
        from trtllm_replayssm.cli import main
        for argv in (["--help"], ["plan", "--help"], ["bench", "--help"], ["layer-demo", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    main(argv)
                except SystemExit as e:
                    assert e.code == 0, (argv, e.code)
        import trtllm_replayssm
        loaded = [m for m in ("torch", "triton", "transformers") if m in sys.modules]
        assert not loaded, loaded
        print("ok")
    """),
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def test_package_names_load_on_first_use():
    import trtllm_replayssm
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.ops import mamba2_replay_step

    assert trtllm_replayssm.Mamba2ReplayCache is Mamba2ReplayCache
    assert trtllm_replayssm.mamba2_replay_step is mamba2_replay_step
    assert "mamba2_decode_step" in dir(trtllm_replayssm)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = trtllm_replayssm.nope


def test_cli_constants_match_the_package():
    """The CLI keeps MAX_L and the demo's dtype names without importing torch; they must be the
    package's."""
    from trtllm_replayssm.cache import MAX_L
    from trtllm_replayssm.demo import DTYPE_NAMES, torch_dtype

    assert cli.MAX_L == MAX_L
    assert cli._LAYER_DTYPES == tuple(DTYPE_NAMES)
    assert [torch_dtype(n) for n in DTYPE_NAMES] == [torch.float32, torch.bfloat16, torch.float16]


def test_top_level_help_names_every_family_and_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for word in ("Mamba-2", "Gated DeltaNet", "Kimi Delta Attention", "Qwen3.5", "Kimi Linear", "layer-demo", "plan", "bench"):
        assert word in out, word


@pytest.mark.parametrize("text, value", [("7", 7), (" 12", 12)])
def test_positive_int_accepts(text, value):
    assert cli.positive_int(text) == value


@pytest.mark.parametrize("text", ["0", "-3", "abc", "1.5", ""])
def test_positive_int_names_what_it_got(text):
    with pytest.raises(cli.argparse.ArgumentTypeError, match=f"expected a positive integer, got {re.escape(repr(text))}"):
        cli.positive_int(text)


@pytest.mark.parametrize(
    "text, ok",
    [("cpu", True), ("cuda", True), ("cuda:1", True), ("meta", False), ("tpu", False), ("cuda:x", False), ("mps", False)],
)
def test_device_arg(text, ok):
    if ok:
        assert cli.device_arg(text) == text
    else:
        with pytest.raises(cli.argparse.ArgumentTypeError, match="expected cpu, cuda or cuda:N"):
            cli.device_arg(text)


def test_dtype_arg_accepts_every_spelling_and_answers_with_the_options_own():
    demo, plan = cli.dtype_arg("f32", "bf16", "f16"), cli.dtype_arg("fp32", "bf16", "fp16")
    for text in ("f32", "fp32", "float32", "FP32"):
        assert demo(text) == "f32" and plan(text) == "fp32"
    assert demo("float16") == "f16" and plan("half") == "fp16" and demo("bfloat16") == "bf16"
    with pytest.raises(cli.argparse.ArgumentTypeError, match="expected one of fp32, bf16, fp16, got 'fp8'"):
        plan("fp8")


def test_out_dir(tmp_path):
    assert cli.out_dir(str(tmp_path)) == str(tmp_path)
    assert cli.out_dir(str(tmp_path / "new")) == str(tmp_path / "new")
    assert not (tmp_path / "new").exists()  # created when the command writes
    (tmp_path / "f").write_text("")
    with pytest.raises(cli.argparse.ArgumentTypeError, match="is a file; expected a directory"):
        cli.out_dir(str(tmp_path / "f"))
    with pytest.raises(cli.argparse.ArgumentTypeError, match="its parent .* does not exist"):
        cli.out_dir(str(tmp_path / "a" / "b"))
    assert cli.make_out_dir(str(tmp_path / "new")) and (tmp_path / "new").is_dir()
    assert not cli.make_out_dir(str(tmp_path / "new"))


# --------------------------------------------------------------------------- layer-demo text and JSON


def _layer_demo(argv, capsys):
    assert main(["layer-demo", "--device", "cpu", "--L", "16", *argv]) == 0
    return capsys.readouterr().out


def test_layer_demo_explains_measured_vs_model_bytes(capsys):
    """Cursors over 0..3 only (batch 4 < L 16) and 30 steps: 1 flush in 8 / 30 rows-steps, not
    1 in 16; the text says so and how to make them agree."""
    out = _layer_demo(["--batch", "4", "--steps", "30"], capsys)
    measured = int(re.search(r"replay, measured +([0-9,]+) B", out).group(1).replace(",", ""))
    model = int(re.search(r"replay, model +([0-9,]+) B", out).group(1).replace(",", ""))
    assert measured != model
    assert (
        "(measured != model: this run flushed 6 times in 120 row-steps, 1 in 20.00, where the "
        "model counts 1 in L = 16; they agree when --batch or --steps is a multiple of L)" in out
    )


@pytest.mark.parametrize(
    "argv", [["--batch", "4", "--steps", "32"], ["--batch", "16", "--steps", "5"]], ids=["steps-multiple", "batch-multiple"]
)
def test_layer_demo_measured_equals_model_when_batch_or_steps_is_a_multiple_of_L(argv, capsys):
    out = _layer_demo(argv, capsys)
    measured = re.search(r"replay, measured +([0-9,]+) B", out).group(1)
    assert re.search(r"replay, model +" + measured + " B", out)
    assert "measured != model" not in out


def test_layer_demo_json(capsys):
    d = json.loads(_layer_demo(["--batch", "2", "--steps", "8", "--state-dtype", "fp32", "--json"], capsys))
    assert d["config"] == {
        "device": "cpu",
        "nheads": 8,
        "head_dim": 16,
        "d_state": 32,
        "ngroups": 2,
        "L": 16,
        "batch": 2,
        "steps": 8,
        "state_dtype": "f32",
        "act_dtype": "f32",
        "seed": 0,
    }
    assert d["rel_err"] < 1e-5 and d["steps"] == 8
    for key in ("flushes", "conventional_written", "replay_written", "model_replay_written"):
        assert key in d


# --------------------------------------------------------------------------- plan checks


def _pure_mamba2_config(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "mamba2",
                "num_heads": 80,
                "head_dim": 64,
                "state_size": 128,
                "n_groups": 1,
                "conv_kernel": 4,
                "num_hidden_layers": 64,
            }
        )
    )
    return str(path)


def test_plan_warns_when_no_sequence_fits(tmp_path, capsys):
    """No attention layer, so no KV to blame: a GPU of 1 MiB holds no sequence's SSM caches."""
    assert main(["plan", "--model", _pure_mamba2_config(tmp_path), "--gpu-mem", "1MiB"]) == 0
    captured = capsys.readouterr()
    assert "max seqs" in captured.out
    warning = captured.err.strip()
    assert warning.startswith(
        "trtllm-replayssm plan: warning: no sequence fits in modes conventional, "
        "conventional_spec, replay, replay_spec (max seqs 0): one sequence takes"
    )
    assert "and the caches get 921.60 KiB" in warning and len(captured.err.splitlines()) == 1
    d = _plan_json(["--model", _pure_mamba2_config(tmp_path), "--gpu-mem", "1MiB"], capsys)
    assert d["warnings"] and d["warnings"][0].startswith("no sequence fits")


def test_plan_without_problems_has_no_warning(capsys):
    assert main(["plan", "--model", "qwen3.5-4b"]) == 0
    assert capsys.readouterr().err == ""
    assert _plan_json(["--model", "qwen3.5-4b"], capsys)["warnings"] == []


def test_plan_accepts_the_demos_dtype_spellings(capsys):
    d = _plan_json(["--model", "qwen3.5-4b", "--state-dtype", "f32", "--record-dtype", "float16", "--kv-dtype", "fp8"], capsys)
    assert (d["config"]["state_dtype"], d["config"]["record_dtype"], d["config"]["kv_dtype"]) == ("fp32", "fp16", "fp8")


def test_plan_long_max_seq_len_keeps_its_columns_apart(capsys):
    """The longest context the check lets through (its KV cache fills the GPU): each column of
    the per-sequence table stays apart."""
    assert main(["plan", "--model", "nemotron-3-super-120b", "--max-seq-len", "18481152"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Per sequence, all layers"))
    for line in lines[start + 2 : start + 6]:
        assert re.fullmatch(r"  [a-z ]+?( +[0-9.,]+ [KMGT]?i?B){3} +[0-9,]+ +(-|[0-9.]+x) +[0-9,]+", line), line


def test_plan_prints_the_measured_route_advice(capsys):
    assert main(["plan", "--model", "kimi-linear-48b", "--batch", "16"]) == 0
    out = capsys.readouterr().out
    assert "Measured speed of the ReplaySSM routes at batch 16 (advice only: nothing is switched)" in out
    assert (
        "  kda replay step L 16, fp32 checkpoint, batch 16: 1.26x the conventional step "
        '(H200 2026-12-07, docs/benchmarks.md "Checkpoint dtypes: speed"); recommended: replay'
    ) in out
    assert (
        "  kda verify T 4, B 16, fp32 checkpoint, batch 16: 2.15x 4 serial steps "
        '(H200 2026-12-06, docs/benchmarks.md "Speculative verify"); recommended: replay'
    ) in out


def test_plan_with_fp32_records_prints_no_figure_of_bf16_records(capsys):
    assert main(["plan", "--model", "qwen3.5-122b-a10b", "--record-dtype", "fp32", "--batch", "16"]) == 0
    out = capsys.readouterr().out
    assert (
        "  gdn replay step L 16, fp32 checkpoint, fp32 records, batch 16: not measured (measured with bf16 records "
        "only: fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16, fp8 at L 16 vs fp32); no recommendation"
    ) in out
    assert "x the conventional step" not in out and "recommended:" not in out


def test_plan_route_advice_defaults_to_max_seqs_and_reaches_json(capsys):
    assert main(["plan", "--model", "nemotron-3-super-120b", "--weights-gib", "90", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["advice_batch"] is None
    replay = d["route_advice"][0]
    assert (replay["mode"], replay["batch"]) == ("replay", d["modes"]["replay"]["max_concurrency"])
    assert replay["recommendation"] == "replay" and f"nearest measured batch {replay['measured_batch']}" in replay["text"]


def test_plan_batch_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--model", "qwen3.5-4b", "--batch", "0"])
    assert exit_info.value.code == 2
    assert "--batch: expected a positive integer, got '0'" in capsys.readouterr().err


def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback():
    """`trtllm-replayssm plan ... | head`: the pipe's reader is gone before the plan is printed
    (closed here before the child has imported torch); the command exits 1, quietly."""
    child = subprocess.Popen(
        [sys.executable, "-m", "trtllm_replayssm", "plan", "--model", "nemotron-3-super-120b"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child.stdout.close()
    _, err = child.communicate(timeout=300)
    assert child.returncode == 1, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
