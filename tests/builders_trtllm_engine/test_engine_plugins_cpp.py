"""The C++ engine plugins (plugins/cpp/replayssm_engine_plugins.cpp) against the Python side.

Always (CPU, no compiler): the C++ source is parsed and each plugin's serialized fields, its
creator's field list and the fields its ``createPlugin`` reads are the names, types and order of
``hook.route_plugin_fields`` / ``hook.block_plugin_fields``; the plugin names, versions and
namespace are ``hook``'s.

With g++ and TensorRT 10's public headers (``TRT_HEADERS_DIR``, a folder with ``NvInferRuntime.h``;
e.g. NVIDIA/TensorRT ``include/`` at tag v10.13.3, the TensorRT of TensorRT-LLM 1.2.x), else
skipped:

- ``g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror`` of the plugin source, with the stand-in
  CUDA headers of ``plugins/cpp/stubs`` (declarations only; no CUDA toolkit here);
- a CPU harness (engine_plugins_harness.cpp) compiled with the plugin source: host stand-ins for
  libnvinfer's registry and logger and for the CUDA calls (copies are memcpy; ``cuLaunchKernel``
  records its arguments and runs nothing). It checks the registration on load, ``createPlugin``
  from the hook's fields and again from the plugin's own serialized fields, the refusals, Route's
  enqueue, and the block plugin's kernel arguments, grid and context copy against the launch
  table. No GPU kernel runs and no TensorRT library is involved: these check the C++ logic only.
"""

import os
import re
import shutil
import subprocess

import pytest

import engine_standins as S
from trtllm_replayssm_builders.trtllm_engine import hook
from trtllm_replayssm_plugins.mamba2_block_launch import (
    ARG_CONST,
    ARG_INPUT,
    ARG_OUTPUT,
    ARG_PHASE,
    ARG_ROWS,
    ARG_STATE,
    ENGINE_INPUTS,
)
from trtllm_replayssm_plugins.ptx import MAX_SHARED_MEM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "plugins", "cpp", "replayssm_engine_plugins.cpp")
STUBS = os.path.join(ROOT, "plugins", "cpp", "stubs")
HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_plugins_harness.cpp")
HEADERS_ENV = "TRT_HEADERS_DIR"
KINDS = {"kINT32": "int32", "kINT64": "int64", "kCHAR": "char"}
TYPE_CODES = {"int32": 5, "char": 6, "int64": 10}  # nvinfer1::PluginFieldType values (NvInferPluginBase.h)


def _settings(max_batch_size=16, dtype="bfloat16"):
    return hook.EngineBuildSettings(max_batch_size, 1, True, True, True, False, 1, 1, dtype, "Mamba2", 16)


def _plan(dtype="bfloat16"):
    return hook.plan_layer(0, S.Mamba2(256, 256, d_state=16, ngroups=2), _settings(dtype=dtype))


PTX = ".version 8.7\n.target sm_90\n.address_size 64\n.visible .entry replay_entry()\n{\n\tret;\n}\n"


def _block_fields(plan, ptx=PTX, kernel_name="replay_entry", shared_mem=1024):
    return hook.block_plugin_fields(plan, S.Compiled(plan.table.spec, ptx, kernel_name, shared_mem))


# ----------------------------------------------------------------------------- the source, parsed
def _sections(src):
    """Top-level C++ classes of the source: name -> text up to the next class or section rule."""
    parts = re.split(r"^(?=class \w+|// -{20,})", src, flags=re.M)
    out = {}
    for part in parts:
        m = re.match(r"class (\w+)", part)
        if m:
            out[m.group(1)] = part
    return out


def _plugin_fields(text):
    """(name, kind) of each PluginField(...) with a literal name, in order."""
    return [(n, KINDS[k]) for n, k in re.findall(r'PluginField\("(\w+)", [^;]*?PluginFieldType::(\w+)', text)]


def _read_fields(text):
    """(name, kind) of each field createPlugin reads (FieldReader::get), in order."""
    return [(n, KINDS[k]) for n, k in re.findall(r'fields\.get\("(\w+)", PluginFieldType::(\w+)', text)]


def _only_fields(text):
    m = re.search(r"onlyFields\(\{([^}]*)\}\)", text)
    return re.findall(r'"(\w+)"', m.group(1)) if m else None


def _constant(src, name):
    return re.search(rf'constexpr char const\* {name} = "(\w*)";', src).group(1)


@pytest.fixture(scope="module")
def src():
    with open(SOURCE) as f:
        return f.read()


def test_plugin_and_creator_fields_are_the_python_sides(src):
    """Each plugin's getFieldsToSerialize, its creator's getFieldNames, the fields createPlugin
    reads and accepts: the names, types and order of hook.route_plugin_fields /
    hook.block_plugin_fields (what the build hook passes to createPlugin)."""
    sections = _sections(src)
    plan = _plan()
    python = {
        "Mamba2Route": [(f.name, f.kind) for f in hook.route_plugin_fields(plan)],
        "Mamba2ReplayBlock": [(f.name, f.kind) for f in _block_fields(plan)],
    }
    for plugin, want in python.items():
        serialize = sections[plugin][sections[plugin].index("getFieldsToSerialize") :]
        assert _plugin_fields(serialize) == want, plugin
        creator = sections[f"{plugin}Creator"]
        assert "public IPluginCreatorV3One" in creator
        assert _plugin_fields(creator) == want, f"{plugin}Creator getFieldNames"
        assert _read_fields(creator) == want, f"{plugin}Creator createPlugin"
        assert _only_fields(creator) == [n for n, _ in want], f"{plugin}Creator onlyFields"


def test_plugin_names_versions_namespace_are_the_python_sides(src):
    sections = _sections(src)
    assert _constant(src, "kNamespace") == hook.PLUGIN_NAMESPACE
    for (name, version), prefix in ((hook.ROUTE_PLUGIN, "kRoute"), (hook.BLOCK_PLUGIN, "kBlock")):
        assert (_constant(src, f"{prefix}Name"), _constant(src, f"{prefix}Version")) == (name, version)
        for cls in (name, f"{name}Creator"):
            assert f"getPluginName() const noexcept override {{ return {prefix}Name; }}" in sections[cls], cls
            assert f"getPluginVersion() const noexcept override {{ return {prefix}Version; }}" in sections[cls], cls
            assert "getPluginNamespace() const noexcept override { return kNamespace; }" in sections[cls], cls
    assert re.search(r"constexpr int32_t kBlockInputs = (\d+);", src).group(1) == str(len(ENGINE_INPUTS))


def test_launch_table_kinds_and_limits_are_the_python_sides(src):
    """The C++ ArgKind values are mamba2_block_launch's ARG_*; its shared-memory limit is ptx.py's."""
    kinds = dict(re.findall(r"^\s+(k\w+) = (\d+),?$", re.search(r"enum ArgKind[^}]*\}", src).group(0), flags=re.M))
    python = {"kInput": ARG_INPUT, "kState": ARG_STATE, "kOutput": ARG_OUTPUT, "kConst": ARG_CONST}
    python.update(kRows=ARG_ROWS, kPhase=ARG_PHASE)
    assert {k: int(v) for k, v in kinds.items()} == python
    assert re.search(r"constexpr int32_t kMaxSharedBytes = 48 \* 1024;", src) and MAX_SHARED_MEM == 48 * 1024


def test_registration_is_on_load_under_the_namespace(src):
    """Both creators register from a static initializer with the namespace they report (LD_PRELOAD
    and dlopen both register them); no loadLibrary entry points that would register them twice."""
    reg = _sections(src)["Registration"]
    assert "registry->registerCreator(mRoute, kNamespace)" in reg
    assert "registry->registerCreator(mBlock, kNamespace)" in reg
    assert re.search(r"^Registration gRegistration;", src, flags=re.M)
    assert not re.search(r'extern "C"[^;{]*\b(getCreators|getPluginCreators|setLoggerFinder)\b', src)


# ----------------------------------------------------------------------------- compiled checks
def _toolchain():
    gxx = shutil.which("g++")
    headers = os.environ.get(HEADERS_ENV)
    if gxx is None:
        pytest.skip("g++ not found")
    if not headers or not os.path.isfile(os.path.join(headers, "NvInferRuntime.h")):
        pytest.skip(f"${HEADERS_ENV} is {headers!r}; expected a folder with TensorRT 10's NvInferRuntime.h")
    return gxx, headers


def _trt_version(headers):
    with open(os.path.join(headers, "NvInferVersion.h")) as f:
        text = f.read()
    parts = [re.search(rf"#define TRT_{p}_ENTERPRISE (\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return tuple(int(m.group(1)) for m in parts if m)


def _flags(headers):
    return ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-isystem", STUBS, "-isystem", headers]


def test_plugin_source_compiles_against_tensorrt10_headers():
    gxx, headers = _toolchain()
    assert _trt_version(headers)[:1] == (10,), f"{headers}: TensorRT {_trt_version(headers)}; expected 10.x"
    proc = subprocess.run([gxx, *_flags(headers), "-fsyntax-only", SOURCE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    gxx, headers = _toolchain()
    exe = str(tmp_path_factory.mktemp("cpp") / "engine_plugins_harness")
    proc = subprocess.run([gxx, *_flags(headers), HARNESS, "-o", exe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _write_fields(path, fields):
    lines = []
    for f in fields:
        if f.kind == "char":
            data = f.value.encode()
            lines.append(f"{f.name} char {len(data)} {data.hex()}")
        else:
            lines.append(f"{f.name} {f.kind} {len(f.value)} {' '.join(str(int(v)) for v in f.value)}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(exe, *args):
    proc = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout.splitlines()


def _serialized_line(f):
    if f.kind == "char":
        data = f.value.encode()
        return f"serialized {f.name} {TYPE_CODES['char']} {len(data)} {data.hex()}"
    return f"serialized {f.name} {TYPE_CODES[f.kind]} {len(f.value)} " + " ".join(str(int(v)) for v in f.value)


def test_registration_on_load(harness):
    out = _run(harness, "registry")
    assert [line for line in out if line.startswith("registered")] == [
        f"registered {hook.PLUGIN_NAMESPACE} {hook.PLUGIN_NAMESPACE} {n} {v} PLUGIN CREATOR_V3ONE"
        for n, v in (hook.ROUTE_PLUGIN, hook.BLOCK_PLUGIN)
    ]
    plan = _plan()
    want = [f"fieldname {hook.ROUTE_PLUGIN[0]} {f.name} {TYPE_CODES[f.kind]}" for f in hook.route_plugin_fields(plan)] + [
        f"fieldname {hook.BLOCK_PLUGIN[0]} {f.name} {TYPE_CODES[f.kind]}" for f in _block_fields(plan)
    ]
    assert [line for line in out if line.startswith("fieldname")] == want
    assert not [line for line in out if line.startswith(("unexpected", "log"))]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_create_serialize_and_recreate_from_the_hooks_fields(harness, tmp_path, dtype):
    plan = _plan(dtype)
    for (name, _), fields in (
        (hook.ROUTE_PLUGIN, hook.route_plugin_fields(plan)),
        (hook.BLOCK_PLUGIN, _block_fields(plan)),
    ):
        out = _run(harness, "create", name, _write_fields(tmp_path / f"{name}.txt", fields))
        assert out[0] == f"created {hook.PLUGIN_NAMESPACE} {name} 1"
        assert [line for line in out if line.startswith("serialized")] == [_serialized_line(f) for f in fields]
        assert out[-2:] == ["roundtrip same", "clone ok"]
        assert not [line for line in out if line.startswith("log")]


def _replace(fields, name, **change):
    return tuple(hook.PluginFieldSpec(**{**f.__dict__, **change}) if f.name == name else f for f in fields)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "Mamba2ReplayBlock createPlugin: field shared_mem is missing"),
        ("wrong_type", "Mamba2ReplayBlock createPlugin: field launch_table has type int32; expected int64"),
        ("extra", "Mamba2ReplayBlock createPlugin: field act_dtype is not one of this plugin's fields"),
        ("twice", "Mamba2ReplayBlock createPlugin: field kernel_name is given twice; expected once"),
        ("short_table", "Mamba2ReplayBlock createPlugin: field launch_table has"),
        ("bad_kind", "Mamba2ReplayBlock createPlugin: field launch_table row 0 (9, 0, 0): expected kind 0 to 5"),
        ("bad_input", "Mamba2ReplayBlock createPlugin: field launch_table row 0 (0, 9, 0): expected an input index"),
        ("shared", "Mamba2ReplayBlock createPlugin: field shared_mem is 49153 (1 values); expected one value"),
        ("empty_ptx", "Mamba2ReplayBlock createPlugin: field ptx has 0 values; expected at least 1"),
        ("route_negative", "Mamba2Route createPlugin: field scratch_slot is -1 (1 values); expected one value >= 0"),
    ],
)
def test_create_refuses_fields_it_cannot_use(harness, tmp_path, case, message):
    plan = _plan()
    fields, name = _block_fields(plan), hook.BLOCK_PLUGIN[0]
    table = list(plan.table.flat())
    if case == "missing":
        fields = fields[:-1]
    elif case == "wrong_type":
        fields = _replace(fields, "launch_table", kind="int32")
    elif case == "extra":
        fields = fields + (hook.PluginFieldSpec("act_dtype", "char", "bf16"),)
    elif case == "twice":
        fields = fields + (fields[1],)
    elif case == "short_table":
        fields = _replace(fields, "launch_table", value=tuple(table[:-1]))
    elif case == "bad_kind":
        fields = _replace(fields, "launch_table", value=tuple([table[0], 9, 0, 0] + table[4:]))
    elif case == "bad_input":
        fields = _replace(fields, "launch_table", value=tuple([table[0], ARG_INPUT, 9, 0] + table[4:]))
    elif case == "shared":
        fields = _replace(fields, "shared_mem", value=(49153,))
    elif case == "empty_ptx":
        fields = _replace(fields, "ptx", value="")
    elif case == "route_negative":
        fields, name = (hook.PluginFieldSpec("scratch_slot", "int32", (-1,)),), hook.ROUTE_PLUGIN[0]
    out = _run(harness, "create", name, _write_fields(tmp_path / "fields.txt", fields))
    assert out[-1] == "created null"
    logs = [line for line in out if line.startswith("log 1 ")]
    assert len(logs) == 1 and logs[0].startswith(f"log 1 {hook.PLUGIN_NAMESPACE}::{message}"), out


def test_route_enqueue(harness, tmp_path):
    """Context: slot_mapping copied; generation: every row to the scratch slot."""
    plan = _plan()
    path = _write_fields(tmp_path / "route.txt", hook.route_plugin_fields(plan))
    scratch = plan.layout.scratch_slot
    assert _run(harness, "route", path, 0, 3)[-2:] == ["enqueue 0", "out 10 11 12"]
    assert _run(harness, "route", path, 1, 3)[-2:] == ["enqueue 0", f"out {scratch} {scratch} {scratch}"]


_INPUT_SIZES = {"rnn_state_ptr": 8, "host_request_types": 4, "slot_mapping": 4, "A": 4, "D": 4, "dt_bias": 4}


@pytest.mark.parametrize("dtype, act, size", [("bfloat16", "bf16", 2), ("float16", "f16", 2), ("float32", "f32", 4)])
@pytest.mark.parametrize("phase", [0, 1])
def test_block_enqueue_launches_the_table(harness, tmp_path, dtype, act, size, phase):
    """The kernel arguments cuLaunchKernel gets, decoded by the table's kinds, are what the launch
    table says: inputs at their element offsets, the staged state pointer in the workspace, the
    output, constants, rows, and rows + 1 in a context step; the grid (grid_x, nheads, rows);
    the PTX and kernel name from the fields; a context step also copies y_stock into y."""
    plan = _plan(dtype)
    g = plan.geometry
    rows = 5
    path = _write_fields(tmp_path / "block.txt", _block_fields(plan, shared_mem=2048))
    out = _run(harness, "block", path, phase, rows, act, g.conv_dim, g.in_proj_width, g.nheads, g.d_inner)
    want = []
    for i, (kind, a, b) in enumerate(plan.table.args):
        if kind == ARG_INPUT:
            want.append(f"arg {i} ptr in{a} {b * _INPUT_SIZES.get(ENGINE_INPUTS[a], size)}")
        elif kind == ARG_STATE:
            want.append(f"arg {i} ptr ws 0")
        elif kind == ARG_OUTPUT:
            want.append(f"arg {i} ptr out0 0")
        elif kind == ARG_CONST:
            want.append(f"arg {i} i32 {a}")
        elif kind == ARG_ROWS:
            want.append(f"arg {i} i32 {rows}")
        elif kind == ARG_PHASE:
            want.append(f"arg {i} i32 {rows + 1 if phase == 0 else rows}")
    assert [line for line in out if line.startswith("arg ")] == want
    threads = plan.table.flat()[-1]
    assert f"launch grid {plan.table.grid_x} {plan.table.grid_y} {rows} block {threads} 1 1 shared 2048" in out
    assert out[0] == "configure 0"
    assert out[1].startswith("log 1 replayssm::Mamba2ReplayBlock: 8 inputs and 1 outputs; expected 9")
    assert out[2:5] == ["configure_wrong 1", "workspace 8", "formats 1111111111"]
    assert out[-5:] == [
        "enqueue 0",
        "module ptx",
        "function replay_entry",
        "staged rnn_state_ptr",
        f"y {'y_stock' if phase == 0 else 'untouched'}",
    ]
