"""``python -m trtllm_replayssm_plugins.export``: its output directory and argument errors (usage
errors, exit 2, no traceback), and the files it writes (a subprocess with Triton as the compiler)."""

import json
import os
import subprocess
import sys

import pytest

from plugin_cases import SUBPROCESS_PRELUDE, subprocess_env
from trtllm_replayssm_plugins import export

MAMBA2 = ["mamba2", "--nheads", "8", "--head-dim", "16", "--d-state", "16", "--ngroups", "2", "--L", "4", "--arch", "90"]


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        export.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_export_out_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "ptx"
    path.write_text("")
    err = _usage_error(MAMBA2 + ["--out-dir", str(path)], capsys)
    assert f"argument --out-dir: {str(path)!r} is a file; expected a directory" in err


def test_export_does_not_create_a_missing_tree(tmp_path, capsys):
    err = _usage_error(MAMBA2 + ["--out-dir", str(tmp_path / "a" / "b" / "ptx")], capsys)
    assert f"its parent {str(tmp_path / 'a' / 'b')!r} does not exist" in err and "mkdir -p" in err
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["--L", "0"], "argument --L: expected a positive integer, got '0'", id="L0"),
        pytest.param(["--arch", "sm90"], "argument --arch: expected a positive integer, got 'sm90'", id="arch"),
        pytest.param(["--ngroups", "3"], "ngroups = 3 must divide nheads = 8", id="ngroups"),
        pytest.param(
            ["--rounding-seed", "5"],
            "mamba2_replay_step: rounding_seed is 5 (checkpoint: f32); expected -1 (off): stochastic rounding takes",
            id="seed-f32",
        ),
        pytest.param(
            ["--state-dtype", "fp8", "--rounding-seed", "-3"],
            "rounding_seed is -3; expected -1 (round to nearest) or an int in [0, 2^31)",
            id="seed-negative",
        ),
        pytest.param(
            ["--state-dtype", "fp8", "--arch", "80"],
            "mamba2_replay_step: arch is 80 with an fp8 (e4m3) checkpoint; expected 89 or newer",
            id="fp8-sm80",
        ),
        pytest.param(["--state-dtype", "f64"], "argument --state-dtype: invalid choice: 'f64'", id="f64"),
        pytest.param(
            ["--kernel", "cuda", "--state-dtype", "f32", "--head-dim", "64", "--d-state", "128"],
            "--kernel cuda: the step kernel needs",
            id="cuda-f32",
        ),
        pytest.param(
            ["--kernel", "cuda", "--rounding-seed", "4"],
            "--kernel cuda: the CUDA step has no stochastic rounding",
            id="cuda-seed",
        ),
        pytest.param(
            ["--kernel", "cuda", "--state-dtype", "bf16", "--head-dim", "64", "--d-state", "128", "--arch", "100"],
            "--kernel cuda: --arch 100; the CUDA step's export is for sm_90a only",
            id="cuda-sm100",
        ),
        pytest.param(
            ["--kernel", "cuda", "--state-dtype", "bf16", "--d-state", "16"],
            "--kernel cuda: d_state 16; the CUDA step takes multiples of 64 up to 256",
            id="cuda-dstate",
        ),
    ],
)
def test_export_argument_errors_name_the_option(tmp_path, argv, message, capsys):
    args = MAMBA2 + ["--out-dir", str(tmp_path)]
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    assert message in _usage_error(args, capsys)
    assert os.listdir(tmp_path) == []


def test_export_creates_a_new_directory_and_says_so(tmp_path):
    out = tmp_path / "ptx"
    script = SUBPROCESS_PRELUDE + "from trtllm_replayssm_plugins import export; sys.exit(export.main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", script, *MAMBA2, "--out-dir", str(out)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines()[0] == f"created {out}"
    names = sorted(os.listdir(out))
    assert [n.rsplit(".", 1)[1] for n in names] == ["json", "ptx"]
    manifest = json.loads((out / names[0]).read_text())
    assert manifest["arch"] == 90


def test_export_fp8_with_stochastic_rounding(tmp_path):
    """--state-dtype fp8 --rounding-seed: the PTX takes checkpoint_scale (f32, in and out) and
    converts to e4m3; the manifest carries the seed as the runtime scalar sr_seed and the
    HAS_SCALE / SR constexprs."""
    script = SUBPROCESS_PRELUDE + "from trtllm_replayssm_plugins import export; sys.exit(export.main(sys.argv[1:]))"
    argv = ["gdn", "--k-heads", "2", "--v-heads", "4", "--head-k-dim", "32", "--head-v-dim", "32", "--L", "4"]
    argv += ["--arch", "90", "--state-dtype", "fp8", "--rounding-seed", "77", "--out-dir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv], env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (ptx,) = [n for n in os.listdir(tmp_path) if n.endswith(".ptx")]
    assert ptx.startswith("gated_delta_replay_step_sm90_gdn_sfp8_") and "_sr_" in ptx
    manifest = json.loads((tmp_path / (ptx[: -len(".ptx")] + ".json")).read_text())
    assert {s["name"]: s["value"] for s in manifest["scalars"]}["sr_seed"] == 77
    assert manifest["constexprs"]["HAS_SCALE"] is True and manifest["constexprs"]["SR"] is True
    params = {p["name"]: p for p in manifest["params"]}
    assert params["checkpoint_scale_in"]["type"] == params["checkpoint_scale_ptr"]["type"] == "*fp32"
    assert params["checkpoint_ptr"]["type"] == "*fp8e4nv"
    assert "cvt.rn.satfinite.e4m3x2.f32" in (tmp_path / ptx).read_text()


def test_export_cuda_writes_both_layers(tmp_path, capsys):
    """--kernel cuda: each layer's PTX (sm_90a) and manifest (entry, launch list, NVRTC)."""
    argv = ["mamba2", "--kernel", "cuda", "--nheads", "16", "--head-dim", "64",
            "--d-state", "128", "--ngroups", "2", "--L", "8", "--arch", "90", "--out-dir", str(tmp_path)]  # fmt: skip
    assert export.main(argv) == 0
    manifests = sorted(p for p in os.listdir(tmp_path) if p.endswith(".json"))
    assert [m.split("_sm90_")[0] for m in manifests] == ["mamba2_replay_coefficients", "mamba2_replay_step_cuda"]
    step = json.loads((tmp_path / manifests[1]).read_text())
    assert step["kernel_name"] == "mamba2_replay_step_aot" and step["compiler"].startswith("nvrtc ")
    assert [p["name"] for p in step["params"] if p["role"] == "scalar"] == ["batch", "num_slots"]
    assert step["grid"] == [3 * 132, 1, 1] and step["constexprs"]["AOT_ENTRIES"] == 2
    assert step["params"][0]["type"] == "*bf16"  # --kernel cuda: a bf16 checkpoint by default
    ptx = (tmp_path / manifests[1].replace(".json", ".ptx")).read_text()
    assert ".target sm_90a" in ptx and ".entry mamba2_replay_step_aot" in ptx
    assert "shared 0 B" in capsys.readouterr().out
