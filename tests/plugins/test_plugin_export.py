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
    ],
)
def test_export_argument_errors_name_the_option(tmp_path, argv, message, capsys):
    args = MAMBA2 + ["--out-dir", str(tmp_path)]
    for flag, value in zip(argv[::2], argv[1::2]):
        args[args.index(flag) + 1] = value
    assert message in _usage_error(args, capsys)


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
