"""PTX export: Triton compiles the entry kernel offline (sm_90, sm_80, sm_100, no GPU); the PTX
entry then has exactly the plugin's launch list (Triton's hidden scratch parameters removed),
ptxas accepts it, and the launch needs nothing TensorRT cannot give. Triton's hidden parameters
are those KNOWN_GOOD_TRITON counts for the installed version."""

import json
import subprocess
import sys
import textwrap

import pytest
import triton

from plugin_cases import SUBPROCESS_PRELUDE, subprocess_env
from trtllm_replayssm_plugins import gated_delta, mamba2
from trtllm_replayssm_plugins.ptx import (
    KNOWN_GOOD_TRITON,
    MAX_SHARED_MEM,
    _strip_hidden_params,
    check_triton_version,
    compile_ptx,
    parse_ptx_entry,
)

# (family, attrs, dtypes, arches): Nemotron-3-Super (TP=1) at the large-batch configuration with
# z, Nemotron-3-Nano-4B geometry at the small-batch one (bf16 checkpoint), every flag off at L=1;
# a Qwen3.5-like GDN layer (TP=1) and a Kimi-Linear-like KDA layer with fp32 records. Then the
# fp8 checkpoint and stochastic rounding variants: Super fp8 + SR (sm_90, sm_100), Nano bf16 +
# SR, the GDN layer fp8, the KDA layer fp8 + SR (seed 0).
CASES = [
    (
        "mamba2",
        "M.for_layer(128, 64, 128, 8, 16, has_z=True, batch_hint=256)",
        dict(state_dtype="f32", act_dtype="bf16"),
        [90, 80, 100],
    ),
    (
        "mamba2",
        "M.for_layer(96, 80, 128, 8, 16, state_dtype='bf16', batch_hint=4)",
        dict(state_dtype="bf16", act_dtype="bf16", d_per_dim=True),
        [90],
    ),
    ("mamba2", "M(8, 64, 64, 8, 1, False, False, False, False, 16, 1, 1, 2)", dict(state_dtype="f16", act_dtype="f16"), [90]),
    (
        "gated_delta",
        "G.for_layer(16, 32, 128, 128, 16, per_channel=False, batch_hint=64)",
        dict(state_dtype="f32", act_dtype="bf16"),
        [90, 100],
    ),
    (
        "gated_delta",
        "G.for_layer(32, 32, 128, 128, 8, per_channel=True, batch_hint=16)",
        dict(state_dtype="f32", act_dtype="bf16", record_dtype="f32"),
        [90],
    ),
    (
        "mamba2",
        "M.for_layer(128, 64, 128, 8, 16, state_dtype='fp8', rounding_seed=12345, has_z=True, batch_hint=256)",
        dict(state_dtype="fp8", act_dtype="bf16"),
        [90, 100],
    ),
    (
        "mamba2",
        "M.for_layer(96, 80, 128, 8, 16, state_dtype='bf16', rounding_seed=3, batch_hint=4)",
        dict(state_dtype="bf16", act_dtype="bf16"),
        [90],
    ),
    (
        "gated_delta",
        "G.for_layer(16, 32, 128, 128, 16, per_channel=False, state_dtype='fp8', batch_hint=64)",
        dict(state_dtype="fp8", act_dtype="bf16"),
        [90],
    ),
    (
        "gated_delta",
        "G.for_layer(32, 32, 128, 128, 8, per_channel=True, state_dtype='fp8', rounding_seed=0, batch_hint=16)",
        dict(state_dtype="fp8", act_dtype="bf16", record_dtype="f32"),
        [90],
    ),
]
N_EXPORTS = sum(len(c[3]) for c in CASES)

_SCRIPT = SUBPROCESS_PRELUDE + textwrap.dedent("""
    import json, os, re, subprocess, sys
    import triton
    from trtllm_replayssm_plugins import gated_delta, mamba2
    from trtllm_replayssm_plugins.ptx import compile_ptx, parse_ptx_entry
    M, G = mamba2.Mamba2ReplayAttrs, gated_delta.GatedDeltaReplayAttrs
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    # The newest ptxas Triton bundles, ptxas-blackwell where there is one: Triton 3.9 writes PTX
    # ISA 9.4 for sm_90, which its other ptxas (CUDA 12.9) refuses.
    ptxas = [p for p in (os.path.join(bin_dir, n) for n in ("ptxas-blackwell", "ptxas")) if os.path.exists(p)]
    results = []
    for family_name, attrs_src, dtypes, arches in json.loads(sys.argv[1]):
        family = dict(mamba2=mamba2, gated_delta=gated_delta)[family_name]
        a = eval(attrs_src)
        infos = family.tensor_infos(a, **dtypes)
        family.check_inputs(a, infos)
        spec = family.kernel_spec(a, infos)
        for arch in arches:
            c = compile_ptx(spec, family.ENTRY, arch)
            e = parse_ptx_entry(c.ptx)
            assembled = None
            if ptxas:
                path = os.path.join(sys.argv[2], c.file_name)
                open(path, "w").write(c.ptx)
                r = subprocess.run([ptxas[0], f"--gpu-name={e.target}", path, "-o", path + ".cubin"],
                                   capture_output=True, text=True)
                assembled = r.returncode == 0 or r.stderr
            # How often the PTX names each runtime parameter besides its declaration.
            reads = {p.name: len(re.findall(rf"\\b{n}\\b", c.ptx)) - 1 for p, (_, n) in zip(spec.params, e.params)}
            results.append(dict(
                family=family_name, n_in=len(family.INPUTS), x=family.LIKE_INPUT[0], attrs=attrs_src, arch=arch, file=c.file_name, kernel_name=c.kernel_name,
                entry_name=e.name, entry_types=[t for t, _ in e.params], target=e.target,
                spec_types=[p.triton_type for p in spec.params], roles=[p.role for p in spec.params],
                shared=c.shared_mem, block=list(spec.block), hidden=c.hidden_params_removed,
                version_line=next(x for x in c.ptx.splitlines() if x.startswith(".version")),
                num_warps=a.num_warps, assembled=assembled, manifest=c.manifest(), reads=reads,
                has_scale=spec.constexprs["HAS_SCALE"], sr=spec.constexprs["SR"],
                cvt_e4m3=c.ptx.count("cvt.rn.satfinite.e4m3x2.f32"),
                philox=[bool(re.search(p, c.ptx)) for p in ("-766435501|0xD2511F53", "-845247145|0xCD9E8D57")]))
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptx")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(CASES), str(out)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_replay_step_ptx_entry_matches_the_plugin_launch_list(exported):
    assert len(exported) == N_EXPORTS == 13
    for r in exported:
        assert r["entry_name"] == r["kernel_name"] == f"_{r['family']}_replay_step_plugin_kernel"
        want = ["u64" if t.startswith("*") else "u32" for t in r["spec_types"]]
        assert r["entry_types"] == want, r["file"]
        assert r["roles"].count("input") == r["n_in"] and r["roles"].count("output") == 8
        assert r["hidden"] == KNOWN_GOOD_TRITON[".".join(triton.__version__.split(".")[:2])]
        assert r["file"].startswith(f"{r['family']}_replay_step_sm{r['arch']}_") and r["file"].endswith(".ptx")


def test_replay_step_ptx_targets_and_ptxas(exported):
    targets = {(r["family"], r["arch"]): r["target"] for r in exported}
    assert set(targets.values()) == {"sm_90a", "sm_80", "sm_100a"}
    assert all(t == {80: "sm_80", 90: "sm_90a", 100: "sm_100a"}[arch] for (_, arch), t in targets.items())
    for r in exported:
        if r["assembled"] is None:
            pytest.skip("Triton's bundled ptxas not found")
        assert r["assembled"] is True, f"{r['file']}: ptxas refused the exported PTX: {r['assembled']}"


def test_replay_step_ptx_launch_params(exported):
    for r in exported:
        assert 0 < r["shared"] <= MAX_SHARED_MEM
        assert r["block"] == [r["num_warps"] * 32, 1, 1]
        m = r["manifest"]
        assert r["version_line"] == f".version {m['ptx_isa']}" and m["compiler"] == f"triton {triton.__version__}"
        assert [p["role"] for p in m["params"]] == r["roles"]
        assert m["scalars"][0] == dict(name="num_slots", value=dict(input=0, axis=0))
        assert m["grid"][2] == dict(input=r["x"], axis=0)


def test_replay_step_ptx_fp8_and_stochastic_rounding(exported):
    """What the PTX does with the new specializations, told from the PTX itself: an fp8
    checkpoint's kernel converts to e4m3 (``cvt.rn.satfinite.e4m3x2.f32``, the flush's codes) and
    reads the checkpoint_scale output pointer (the row scales, loaded and stored in place), and
    only it; a kernel with SR holds Philox's round multipliers 0xD2511F53 and 0xCD9E8D57
    (``tl.randint``) and reads ``sr_seed``, and only it. The aliased inputs' pointers are never
    read (the entries use the output pointers of the same buffers)."""
    combos = set()
    for r in exported:
        fp8, sr = r["has_scale"], r["sr"]
        combos.add((fp8, sr))
        assert (r["cvt_e4m3"] > 0) is fp8, r["file"]
        assert (r["reads"]["checkpoint_scale_ptr"] > 0) is fp8, r["file"]
        assert r["philox"] == [sr, sr], r["file"]
        assert (r["reads"]["sr_seed"] > 0) is sr, r["file"]
        assert r["reads"]["checkpoint_scale_in"] == r["reads"]["checkpoint_in"] == 0, r["file"]
        assert ("_sr_" in r["file"]) is sr and ("_sfp8_" in r["file"]) is fp8, r["file"]
        scalars = {s["name"]: s["value"] for s in r["manifest"]["scalars"]}
        assert r["manifest"]["params"][-1]["name"] == "checkpoint_scale_ptr"
        assert r["manifest"]["params"][-1]["type"] == ("*fp32" if fp8 else "*i32")
        seed = eval(r["attrs"], dict(M=mamba2.Mamba2ReplayAttrs, G=gated_delta.GatedDeltaReplayAttrs)).rounding_seed
        assert scalars["sr_seed"] == max(seed, 0)
    assert combos == {(False, False), (True, True), (False, True), (True, False)}


# --------------------------------------------------------------------------- pure PTX helpers

_PTX = """//
.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(
\t.param .u64 .ptr .global .align 1 k_param_0,
\t.param .u32 k_param_1,
\t.param .u64 .ptr .global .align 1 k_param_2,
\t.param .u64 .ptr .global .align 1 k_param_3
)
.reqntid 32
{
\tld.param.b64 \t%rd1, [k_param_0];
\tld.param.b32 \t%r1, [k_param_1];
\tret;
}
"""


def test_parse_ptx_entry():
    e = parse_ptx_entry(_PTX)
    assert e.name == "k" and e.target == "sm_90a"
    assert e.params == (("u64", "k_param_0"), ("u32", "k_param_1"), ("u64", "k_param_2"), ("u64", "k_param_3"))
    with pytest.raises(ValueError, match="exactly one .visible .entry"):
        parse_ptx_entry(_PTX + _PTX.split(".address_size 64")[1])


def test_strip_hidden_params_removes_unreferenced_trailing_pointers():
    stripped = _strip_hidden_params(_PTX, parse_ptx_entry(_PTX), 2, 2)
    assert parse_ptx_entry(stripped).params == (("u64", "k_param_0"), ("u32", "k_param_1"))
    assert "k_param_2" not in stripped and "k_param_3" not in stripped


def test_strip_hidden_params_teeth():
    entry = parse_ptx_entry(_PTX)
    with pytest.raises(RuntimeError, match="expected 3 declared \\+ 2 hidden"):
        _strip_hidden_params(_PTX, entry, 3, 2)
    with pytest.raises(RuntimeError, match="hidden parameter k_param_1 is .u32"):
        _strip_hidden_params(_PTX, entry, 1, 3)
    used = _PTX.replace("\tret;", "\tld.param.b64 \t%rd2, [k_param_3];\n\tret;")
    with pytest.raises(RuntimeError, match="reads Triton's hidden parameter k_param_3"):
        _strip_hidden_params(used, parse_ptx_entry(used), 2, 2)


def test_triton_versions_known_to_fit():
    versions = ("3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0")
    assert [check_triton_version(v) for v in versions] == [1, 1, 2, 2, 2, 2, 2]
    for bad in ("3.2.0", "3.10.0", "4.0.0"):
        with pytest.raises(RuntimeError, match=f"Triton {bad} is not known to fit"):
            check_triton_version(bad)
    check_triton_version()  # the installed Triton (CI pins 3.6.0)


# Triton's own compile of the smallest entry (CASES[2]), with nothing stripped: the entry's
# parameters past the plugin's list, whether the body reads them, and the metadata's scratch sizes.
_RAW_SCRIPT = SUBPROCESS_PRELUDE + textwrap.dedent("""
    import json, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from trtllm_replayssm_plugins import mamba2
    from trtllm_replayssm_plugins.ptx import parse_ptx_entry
    a = mamba2.Mamba2ReplayAttrs(8, 64, 64, 8, 1, False, False, False, False, 16, 1, 1, 2)
    spec = mamba2.kernel_spec(a, mamba2.tensor_infos(a, state_dtype="f16", act_dtype="f16"))
    src = ASTSource(mamba2.ENTRY, dict(spec.signature), dict(spec.constexprs), spec.triton_attrs())
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": spec.num_warps})
    ptx = c.asm["ptx"]
    extra = parse_ptx_entry(ptx).params[len(spec.params):]
    print(json.dumps(dict(version=triton.__version__, types=[t for t, _ in extra],
                          uses=[len(re.findall(rf"\\b{n}\\b", ptx)) - 1 for _, n in extra],
                          scratch={k: v for k, v in c.metadata._asdict().items() if k.endswith("_scratch_size")})))
""")


def test_triton_hidden_params_match_the_table():
    """Without compile_ptx's checks: Triton's entry has as many trailing parameters past the
    plugin's list as KNOWN_GOOD_TRITON says and as its metadata names scratch buffers, all .u64,
    named nowhere but in their declarations, with scratch sizes 0. Fails for a Triton that adds
    a hidden parameter the table does not know, and shows what it added."""
    proc = subprocess.run(
        [sys.executable, "-c", _RAW_SCRIPT], env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    minor = ".".join(r["version"].split(".")[:2])
    assert KNOWN_GOOD_TRITON.get(minor) == len(r["types"]) == len(r["scratch"]), r
    assert r["types"] == ["u64"] * len(r["types"]) and not any(r["uses"]) and not any(r["scratch"].values()), r


def test_compile_ptx_refuses_the_interpreter():
    from plugin_cases import INTERPRET

    if not INTERPRET:
        pytest.skip("only meaningful under TRITON_INTERPRET=1")
    a = mamba2.Mamba2ReplayAttrs.for_layer(8, 16, 16, 2, 4)
    spec = mamba2.kernel_spec(a, mamba2.tensor_infos(a, state_dtype="f32", act_dtype="f32"))
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        compile_ptx(spec, mamba2.ENTRY, 90)
