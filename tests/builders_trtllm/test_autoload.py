"""Enabling by environment: the import hook, the startup sitecustomize, real subprocesses."""

import os
import subprocess
import sys
import textwrap

import pytest

from standins import write_package
from trtllm_replayssm_builders.trtllm import STARTUP_DIR
from trtllm_replayssm_builders.trtllm.api import REQUIREMENTS
from trtllm_replayssm_builders.trtllm.autoload import after_import

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An importable top-level package ``hooked_pkg`` whose __init__ sets ``ready``."""
    (tmp_path / "hooked_pkg").mkdir()
    (tmp_path / "hooked_pkg" / "__init__.py").write_text("ready = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "hooked_pkg"
    sys.modules.pop("hooked_pkg", None)


def test_after_import_runs_callback_after_package_init(package):
    seen = []
    after_import(package, lambda: seen.append(sys.modules[package].ready))
    assert seen == []
    import hooked_pkg  # noqa: F401

    assert seen == [True]
    after_import(package, lambda: seen.append("now"))  # already imported: at once
    assert seen == [True, "now"]


def test_after_import_callback_error_fails_the_import(package):
    def boom():
        raise RuntimeError("incompatible")

    after_import(package, boom)
    with pytest.raises(RuntimeError, match="incompatible"):
        import hooked_pkg  # noqa: F401
    with pytest.raises(ValueError, match="expected a top-level package"):
        after_import("a.b", boom)


def _run(tmp_path, code, env_extra, *, trtllm=None):
    """Runs ``code`` with the startup dir first on PYTHONPATH, the checkout's builders/ as
    trtllm_replayssm_builders, and optionally a stand-in tensorrt_llm."""
    link = tmp_path / "pkgs"
    link.mkdir(exist_ok=True)
    if not (link / "trtllm_replayssm_builders").exists():
        os.symlink(os.path.join(ROOT, "builders"), link / "trtllm_replayssm_builders")
    paths = [STARTUP_DIR, str(link), ROOT]
    if trtllm is not None:
        paths.append(str(trtllm))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTLLM_REPLAYSSM")}
    env.update(PYTHONPATH=os.pathsep.join(paths), **env_extra)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300
    )


def test_startup_without_variable_imports_nothing(tmp_path):
    proc = _run(
        tmp_path,
        """
        import sys
        assert "trtllm_replayssm_builders" not in sys.modules
        assert "torch" not in sys.modules
    """,
        {},
    )
    assert proc.returncode == 0, proc.stderr


def test_startup_enables_when_tensorrt_llm_is_imported(tmp_path):
    write_package(tmp_path / "trt", REQUIREMENTS)
    proc = _run(
        tmp_path,
        """
        import sys
        from trtllm_replayssm_builders.trtllm import replayssm_status
        assert replayssm_status() is None          # armed, not yet enabled
        import tensorrt_llm
        status = replayssm_status()
        assert status.config.buffer_len == 8 and status.config.families == ("mamba2", "gdn")
        from tensorrt_llm._torch.modules.mamba.mamba2_metadata import Mamba2Metadata
        assert Mamba2Metadata.prepare.__wrapped__ is not None
        print(status.summary())
    """,
        {"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_BUFFER_LEN": "8", "TRTLLM_REPLAYSSM_FAMILIES": "mamba2,gdn"},
        trtllm=tmp_path / "trt",
    )
    assert proc.returncode == 0, proc.stderr
    assert "L = 8, families mamba2, gdn" in proc.stdout


def test_startup_incompatible_tensorrt_llm_fails_its_import(tmp_path):
    write_package(tmp_path / "trt", [r for r in REQUIREMENTS if r.name != "Mamba2Mixer.forward"], version="1.2.0")
    proc = _run(tmp_path, "import tensorrt_llm", {"TRTLLM_REPLAYSSM": "1"}, trtllm=tmp_path / "trt")
    assert proc.returncode != 0
    assert "IncompatibleTensorRTLLM" in proc.stderr and "Mamba2Mixer.forward: missing" in proc.stderr
    assert "TensorRT-LLM 1.2.0" in proc.stderr


def test_startup_bad_setting_fails_tensorrt_llm_import(tmp_path):
    write_package(tmp_path / "trt", REQUIREMENTS)
    proc = _run(
        tmp_path, "import tensorrt_llm", {"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_BUFFER_LEN": "0"}, trtllm=tmp_path / "trt"
    )
    assert proc.returncode != 0
    assert "ReplaySSM could not be set up: ValueError" in proc.stderr
    assert "buffer_len is 0" in proc.stderr


def test_importing_package_without_variable_imports_no_tensorrt_llm(tmp_path):
    proc = _run(
        tmp_path,
        """
        import sys
        import trtllm_replayssm_builders.trtllm
        assert not [m for m in sys.modules if m.split(".")[0] == "tensorrt_llm"]
    """,
        {},
    )
    assert proc.returncode == 0, proc.stderr


def test_env_and_explicit_enable_in_one_process(tmp_path):
    """The environment's hook fires inside enable_replayssm's own `import tensorrt_llm`: equal
    settings install once, different settings are refused."""
    write_package(tmp_path / "trt", REQUIREMENTS)
    env = {"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_BUFFER_LEN": "8"}
    proc = _run(
        tmp_path,
        """
        import trtllm_replayssm_builders.trtllm as t
        status = t.enable_replayssm(buffer_len=8)
        assert status is t.replayssm_status()
        assert sum(p.endswith("Mamba2Metadata.prepare") for p in status.patched) == 1
        from tensorrt_llm._torch.modules.mamba.mamba2_metadata import Mamba2Metadata
        assert not hasattr(Mamba2Metadata.prepare.__wrapped__, "__wrapped__")   # wrapped once
        assert t.disable_replayssm() and not hasattr(Mamba2Metadata.prepare, "__wrapped__")
    """,
        env,
        trtllm=tmp_path / "trt",
    )
    assert proc.returncode == 0, proc.stderr
    proc = _run(
        tmp_path,
        """
        import trtllm_replayssm_builders.trtllm as t
        t.enable_replayssm(buffer_len=16)
    """,
        env,
        trtllm=tmp_path / "trt",
    )
    assert proc.returncode != 0
    assert "already enabled with ReplaySSMConfig(buffer_len=16" in proc.stderr
    assert "asked for ReplaySSMConfig(buffer_len=8" in proc.stderr
