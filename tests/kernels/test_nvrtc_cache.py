"""The on-disk cache of NVRTC compiles (CPU: NVRTC runs on the host): an entry is written after a
compile and read back instead of compiling, any change of source, header, defines, architecture or
output kind misses it, an empty TRTLLM_REPLAYSSM_CACHE_DIR keeps nothing, and an unwritable
directory warns and still compiles."""

import os
import warnings

import pytest

from trtllm_replayssm.kernels import nvrtc

KERNEL = '#include "common.cuh"\nextern "C" __global__ void k(float* p) { p[0] = VALUE + twice(X); }\n'
HEADER = "__device__ inline float twice(float v) { return 2.0f * v; }\n"


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A kernel and a header in their own source directory; the in-process cache cleared before and after."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text(KERNEL)
    (src / "common.cuh").write_text(HEADER)
    monkeypatch.setattr(nvrtc, "_SOURCE_DIR", str(src))
    nvrtc.compile_program.cache_clear()
    yield src
    nvrtc.compile_program.cache_clear()


def _compile(value=1, arch="sm_90", output="ptx"):
    nvrtc.compile_program.cache_clear()  # the disk, not the process, is under test
    return nvrtc.compile_program("k.cu", arch, (("VALUE", value), ("X", 3)), output)


def _entries(directory):
    return sorted(n for n in os.listdir(directory) if not n.startswith(".")) if os.path.isdir(directory) else []


def test_a_compile_is_kept_and_read_back_without_nvrtc(sources, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRTLLM_REPLAYSSM_CACHE_DIR", str(cache))
    ptx = _compile()
    assert b".entry k(" in ptx and len(_entries(cache)) == 1
    with open(cache / _entries(cache)[0], "rb") as f:
        assert f.read() == ptx

    def no_nvrtc():
        raise AssertionError("NVRTC called for a kept program")

    monkeypatch.setattr(nvrtc, "_bindings", no_nvrtc)
    assert _compile() == ptx  # read back
    with pytest.raises(AssertionError, match="NVRTC called"):
        _compile(value=2)  # teeth: another define is another program


@pytest.mark.parametrize("change", ["define", "arch", "output", "source", "header"])
def test_any_input_change_misses_the_kept_entry(sources, tmp_path, monkeypatch, change):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRTLLM_REPLAYSSM_CACHE_DIR", str(cache))
    _compile()
    if change == "source":
        (sources / "k.cu").write_text(KERNEL.replace("VALUE +", "VALUE -"))
    if change == "header":
        (sources / "common.cuh").write_text(HEADER.replace("2.0f", "3.0f"))
    kw = {"define": dict(value=2), "arch": dict(arch="sm_80"), "output": dict(output="cubin")}.get(change, {})
    _compile(**kw)
    assert len(_entries(cache)) == 2


def test_an_empty_directory_setting_keeps_nothing(sources, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLLM_REPLAYSSM_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert nvrtc.compile_cache_dir() is None
    assert b".entry k(" in _compile()
    assert not (tmp_path / "xdg").exists()


def test_the_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TRTLLM_REPLAYSSM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert nvrtc.compile_cache_dir() == os.path.join(str(tmp_path), "trtllm_replayssm", "nvrtc")


def test_an_unwritable_directory_warns_once_and_compiles(sources, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TRTLLM_REPLAYSSM_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(nvrtc, "_CACHE_WARNED", set())
    with pytest.warns(RuntimeWarning, match="cannot keep compiled programs in .*a_file/cache"):
        assert b".entry k(" in _compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert b".entry k(" in _compile(value=2)  # warned once per directory


def test_a_program_by_path_compiles_with_the_headers_beside_it(sources, tmp_path, monkeypatch):
    """An exported revision's source (an absolute path) includes its own headers, not the package's
    of the same name, and is kept under its own key: p[0] = 1 + twice(3) is 7 with the package's
    header and 10 with the revision's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRTLLM_REPLAYSSM_CACHE_DIR", str(cache))
    other = tmp_path / "revision"
    other.mkdir()
    (other / "k.cu").write_text(KERNEL)
    (other / "common.cuh").write_text(HEADER.replace("2.0f", "3.0f"))
    assert nvrtc.cuda_headers(str(other / "k.cu")) == (str(other / "common.cuh"),)
    ptx = _compile()
    nvrtc.compile_program.cache_clear()
    revision = nvrtc.compile_program(str(other / "k.cu"), "sm_90", (("VALUE", 1), ("X", 3)), "ptx")
    assert b" 1088421888;" in ptx and b" 1092616192;" not in ptx  # the bits of 7.0f
    assert b" 1092616192;" in revision and b" 1088421888;" not in revision  # 10.0f
    assert len(_entries(cache)) == 2
