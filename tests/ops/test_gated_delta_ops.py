"""The public GDN / KDA ops and caches on the CPU: dispatch to the references, argument
validation (nothing written on a bad call), padding rows, torch.compile and torch.library.opcheck."""

import pytest
import torch

from torch.library import opcheck

from gated_delta_cases import DeltaGeometry, make_step
from op_checks import assert_raises_untouched as _assert_raises_untouched
from op_checks import assert_unchanged as _assert_unchanged
from op_checks import ids as _ids
from op_checks import snapshot as _snapshot
from op_checks import strided as _strided
from mamba2_cases import DTYPES
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache
from trtllm_replayssm.ops import gdn_decode_step, gdn_gate, gdn_replay_step, kda_decode_step, kda_gate, kda_replay_step
from trtllm_replayssm.reference.gated_delta import delta_rule_gate, gated_delta_decode_step_ref, gated_delta_replay_step_ref

G = DeltaGeometry(2, 4, 8, 6)
L = 4
NUM_SLOTS = 6
SLOTS = [3, -1, 0, 5]  # cursors 3 (a flush), 0 and 1 (appends), and a padding row
FIELDS = ("checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals")
FAMILIES = {
    "gdn": (GDNReplayCache, gdn_replay_step, gdn_decode_step),
    "kda": (KDAReplayCache, kda_replay_step, kda_decode_step),
}


def _tensors(cache) -> list:
    return [getattr(cache, name) for name in FIELDS]


def _cache(family: str, state: str = "f32", record: str = "f32", L: int = L):
    cache = FAMILIES[family][0].allocate(
        NUM_SLOTS, G.k_heads, G.v_heads, G.head_k_dim, G.head_v_dim, L, state_dtype=DTYPES[state], record_dtype=DTYPES[record]
    )
    cache.checkpoint.copy_(torch.randn(cache.checkpoint.shape))
    cache.d_records.copy_(torch.randn(cache.d_records.shape))
    cache.k_records.copy_(torch.randn(cache.k_records.shape))
    cache.g_records.uniform_(-0.3, -0.01)
    cache.cursor.copy_(torch.arange(NUM_SLOTS, dtype=torch.int32) % cache.L)
    return cache


def _kwargs(family: str, act: str = "f32") -> dict:
    inp = make_step(G, len(SLOTS), DTYPES[act], "cpu", per_channel=family == "kda")
    return dict(
        **inp,
        slot_ids=torch.tensor(SLOTS, dtype=torch.int32),
        scale=None,
        use_qk_l2norm=True,
        out=torch.full_like(inp["v"], 42.0),
    )


# --------------------------------------------------------------------------- dispatch

CASES = [("f32", "f32", "f32"), ("f32", "bf16", "bf16"), ("bf16", "bf16", "f32"), ("f64", "f64", "f64")]


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize("state, act, record", CASES, ids=lambda c: c)
def test_gated_delta_replay_step_equals_reference_bitwise(family, state, act, record):
    cache = _cache(family, state, record)
    ref = _snapshot(_tensors(cache))
    for _ in range(L + 1):  # every live row appends and flushes at least once
        kw = _kwargs(family, act)
        out_ref = kw["out"].clone()
        y = FAMILIES[family][1](cache, **kw)
        gated_delta_replay_step_ref(*ref[:5], **{**kw, "out": out_ref, "scale": G.head_k_dim**-0.5})
        assert y is kw["out"] and torch.equal(y, out_ref)
        _assert_unchanged(_tensors(cache), ref)


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_gated_delta_decode_step_equals_reference_bitwise(family):
    s = torch.randn(NUM_SLOTS, G.v_heads, G.head_v_dim, G.head_k_dim)
    s_ref = s.clone()
    for _ in range(3):
        kw = _kwargs(family)
        out_ref = kw["out"].clone()
        y = FAMILIES[family][2](s, **{**kw, "scale": 0.25})
        gated_delta_decode_step_ref(s_ref, **{**kw, "out": out_ref, "scale": 0.25})
        assert torch.equal(y, out_ref) and torch.equal(s, s_ref)


def test_gate_helpers_match_reference():
    a, b, A_log, bias = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4), torch.randn(4)
    for got, want in zip(gdn_gate(a, b, A_log, bias), delta_rule_gate(a, b, A_log, bias)):
        assert torch.equal(got, want)
    ak, bias_k = torch.randn(3, 4, 8), torch.randn(32)
    for got, want in zip(kda_gate(ak, b, A_log, bias_k), delta_rule_gate(ak, b, A_log, bias_k)):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match="^kda_gate: a"):
        kda_gate(a, b, A_log)
    with pytest.raises(ValueError, match="^gdn_gate: dt_bias"):
        gdn_gate(a, b, A_log, torch.randn(5))


# --------------------------------------------------------------------------- validation

BAD_STEP_ARGS = [
    pytest.param(lambda k: {"q": k["q"][..., :-1]}, ValueError, "q", id="q-shape"),
    pytest.param(lambda k: {"k": _strided(k["k"])}, ValueError, "k", id="k-strided"),
    pytest.param(lambda k: {"k": k["k"].half()}, TypeError, "k", id="k-dtype"),
    pytest.param(lambda k: {"v": k["v"][:, :-1]}, ValueError, "v", id="v-heads"),
    pytest.param(lambda k: {"g": k["g"][:1]}, ValueError, "g", id="g-batch"),
    pytest.param(
        lambda k: {"g": k["g"].sum(-1) if k["g"].dim() == 3 else k["g"][..., None]}, ValueError, "g", id="g-other-family"
    ),
    pytest.param(lambda k: {"beta": k["beta"][:, :-1]}, ValueError, "beta", id="beta-shape"),
    pytest.param(lambda k: {"out": k["out"].double()}, TypeError, "out", id="out-dtype"),
    pytest.param(lambda k: {"scale": -1.0}, TypeError, "scale", id="scale-negative"),
    pytest.param(lambda k: {"scale": torch.tensor(0.5)}, TypeError, "scale", id="scale-tensor"),
    pytest.param(lambda k: {"use_qk_l2norm": 1}, TypeError, "use_qk_l2norm", id="l2norm-int"),
    pytest.param(lambda k: {"slot_ids": k["slot_ids"].long()}, TypeError, "slot_ids", id="slot_ids-int64"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, NUM_SLOTS, 5)}, ValueError, "slot_ids", id="slot_ids-range"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, 3, 5)}, ValueError, "slot_ids", id="slot_ids-duplicate"),
]


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize(
    "override, exc, name",
    BAD_STEP_ARGS
    + [
        pytest.param(
            lambda k: {"cache": _cache("kda" if isinstance(k["cache"], GDNReplayCache) else "gdn")},
            TypeError,
            "cache",
            id="cache-other-family",
        ),
        pytest.param(lambda k: {"cache": tuple(_tensors(k["cache"]))}, TypeError, "cache", id="cache-tuple"),
    ],
)
def test_gated_delta_replay_step_bad_input_raises_before_writing(family, override, exc, name):
    kw = {"cache": _cache(family), **_kwargs(family)}
    _assert_raises_untouched(FAMILIES[family][1], kw, override, exc, name, f"{family}_replay_step")


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize(
    "override, exc, name",
    BAD_STEP_ARGS
    + [
        pytest.param(lambda k: {"state": k["state"][0]}, ValueError, "state", id="state-3d"),
        pytest.param(lambda k: {"state": k["state"][:, :3]}, ValueError, "q", id="state-heads-vs-k_heads"),
    ],
)
def test_gated_delta_decode_step_bad_input_raises_before_writing(family, override, exc, name):
    kw = {"state": torch.randn(NUM_SLOTS, G.v_heads, G.head_v_dim, G.head_k_dim), **_kwargs(family)}
    _assert_raises_untouched(FAMILIES[family][2], kw, override, exc, name, f"{family}_decode_step")


# --------------------------------------------------------------------------- cache


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_gated_delta_cache_allocate_and_admit(family):
    cls = FAMILIES[family][0]
    c = cls.allocate(5, 2, 6, 16, 24, 8, state_dtype=torch.bfloat16, record_dtype=torch.float32)
    assert c.checkpoint.shape == (5, 6, 24, 16) and c.checkpoint.dtype == torch.bfloat16
    assert c.d_records.shape == (5, 6, 8, 24) and c.k_records.shape == (5, 2, 8, 16)
    assert c.g_records.shape == ((5, 6, 8, 16) if family == "kda" else (5, 6, 8))
    assert (c.k_heads, c.v_heads, c.head_k_dim, c.head_v_dim, c.L) == (2, 6, 16, 24, 8)
    assert c.record_dtype == torch.float32 and c.g_records.dtype == torch.float32
    c.cursor.fill_(3)
    state = torch.randn(2, 6, 24, 16)
    c.admit(torch.tensor([4, 1]), state)
    assert torch.equal(c.checkpoint[[4, 1]], state.to(torch.bfloat16))
    assert c.cursor.tolist() == [3, 0, 3, 3, 0]
    before = _snapshot(_tensors(c))
    with pytest.raises(ValueError, match=f"^{cls.__name__}.admit: state"):
        c.admit(torch.tensor([0]), torch.randn(1, 6, 16, 24))  # [K, V] layout: rejected
    with pytest.raises(ValueError, match=f"^{cls.__name__}.admit: slot_ids"):
        c.admit(torch.tensor([5]))
    _assert_unchanged(_tensors(c), before)


@pytest.mark.parametrize(
    "family, state, records, g",
    [
        ("kda", torch.float32, torch.bfloat16, torch.float16),  # KDA's g in fp16 beside 16-bit records
        ("kda", torch.bfloat16, torch.float16, torch.float16),
        ("kda", torch.float8_e4m3fn, torch.bfloat16, torch.float16),
        ("kda", torch.bfloat16, torch.float32, torch.float32),  # fp32 beside fp32 records
        ("kda", torch.float64, torch.float64, torch.float64),
        ("gdn", torch.bfloat16, torch.bfloat16, torch.float32),  # GDN's scalar g: always fp32
        ("gdn", torch.float64, torch.float64, torch.float64),
    ],
)
def test_gated_delta_cache_g_record_dtype(family, state, records, g):
    """KDA's per-channel g records are fp16 beside 16-bit d and k records (half a record's bytes
    otherwise), fp32 beside fp32 ones; GDN's are fp32; both fp64 with a fp64 checkpoint. A cache
    built with the other dtype is refused, naming g_records and the dtype it expects."""
    cls = FAMILIES[family][0]
    assert cls.g_record_dtype(state, records) == g
    c = cls.allocate(3, 2, 4, 16, 16, 4, state_dtype=state, record_dtype=records)
    assert c.g_records.dtype == g
    wrong = torch.float32 if g != torch.float32 else torch.float16
    fields = {f: getattr(c, f) for f in ("checkpoint", "d_records", "k_records", "cursor", "arrivals", "checkpoint_scale")}
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: g_records .*{str(g).split('.')[-1]}"):
        cls(g_records=c.g_records.to(wrong), **fields)


@pytest.mark.parametrize(
    "kw, exc, name",
    [({"v_heads": 5}, ValueError, "k_heads"), ({"L": 65}, ValueError, "L"), ({"head_k_dim": 0}, ValueError, "head_k_dim")],
)
def test_gated_delta_cache_allocate_rejects_bad_geometry(kw, exc, name):
    args = dict(num_slots=2, k_heads=2, v_heads=4, head_k_dim=8, head_v_dim=8, L=4, **{})
    args.update(kw)
    with pytest.raises(exc, match=rf"^GDNReplayCache.allocate: {name}"):
        GDNReplayCache.allocate(**args)


def test_gated_delta_cache_constructor_rejects_inconsistent_tensors():
    c = _cache("kda")
    with pytest.raises(ValueError, match="^KDAReplayCache: g_records"):
        KDAReplayCache(c.checkpoint, c.d_records, c.k_records, c.g_records[..., 0].contiguous(), c.cursor, c.arrivals)
    with pytest.raises(TypeError, match="^GDNReplayCache: g_records"):
        GDNReplayCache(
            c.checkpoint, c.d_records, c.k_records, torch.zeros(6, 4, 4, dtype=torch.bfloat16), c.cursor, c.arrivals
        )
    with pytest.raises(TypeError, match="^KDAReplayCache: k_records"):
        KDAReplayCache(c.checkpoint, c.d_records, c.k_records.half(), c.g_records, c.cursor, c.arrivals)


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_gated_delta_ops_padding_rows(family):
    cache = _cache(family)
    kw = _kwargs(family)
    pad = kw["slot_ids"] < 0
    y = FAMILIES[family][1](cache, **kw)
    assert torch.all(y[pad] == 42.0) and not torch.any(y[~pad] == 42.0)
    kw = {**kw, "slot_ids": _ids(-1, -1, -1, -1)}
    before = _snapshot(_tensors(cache))
    fresh = FAMILIES[family][1](cache, **{**kw, "out": None})
    assert not fresh.any()
    _assert_unchanged(_tensors(cache), before)


# --------------------------------------------------------------------------- compile, opcheck


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_gated_delta_replay_step_compiled_equals_eager(family):
    fn = FAMILIES[family][1]

    def step(cache, q, k, v, g, beta, slot_ids, out):
        return fn(cache, q, k, v, g, beta, slot_ids=slot_ids, out=out)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    eager_cache = _cache(family)
    compiled_cache = type(eager_cache)(*_snapshot(_tensors(eager_cache)))
    for _ in range(L + 1):
        kw = _kwargs(family)
        args = [kw[n] for n in ("q", "k", "v", "g", "beta", "slot_ids")]
        y_eager = step(eager_cache, *args, kw["out"].clone())
        y_compiled = compiled(compiled_cache, *args, kw["out"].clone())
        assert torch.equal(y_compiled, y_eager)
        _assert_unchanged(_tensors(compiled_cache), _tensors(eager_cache))


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize("op", ["replay", "decode"])
def test_gated_delta_custom_ops_opcheck(family, op):
    kw = _kwargs(family)
    step = tuple(kw[n] for n in ("q", "k", "v", "g", "beta", "slot_ids")) + (0.3, True, kw["out"])
    if op == "replay":
        opcheck(torch.ops.replayssm.gated_delta_replay_step.default, tuple(_tensors(_cache(family))) + step)
    else:
        state = torch.randn(NUM_SLOTS, G.v_heads, G.head_v_dim, G.head_k_dim)
        opcheck(torch.ops.replayssm.gated_delta_decode_step.default, (state,) + step)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("state", [torch.float8_e4m3fn, torch.bfloat16], ids=["fp8", "bf16"])
def test_replay_step_rounding_seed_on_the_reference(per_channel, state):
    """fp8 and bf16 checkpoints with a rounding seed on the op's CPU path: the same seed, the same
    bits; another seed, other bits at the flush rows; a bad seed raises before anything is written."""
    from gated_delta_cases import DeltaFamily

    fam = DeltaFamily(G, per_channel=per_channel)
    base = fam.allocate(3, 4, state, torch.float32, "cpu")
    base.admit(torch.arange(3), torch.randn(3, *base.checkpoint.shape[1:]))
    base.cursor.copy_(torch.tensor([3, 1, 3], dtype=torch.int32))
    inp = fam.make_step(3, torch.float32, "cpu")
    step = kda_replay_step if per_channel else gdn_replay_step
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    slots = torch.arange(3, dtype=torch.int32)
    runs = []
    for seed in (2, 2, 3):
        c = base.clone()
        step(c, *args, slot_ids=slots, rounding_seed=seed)
        runs.append(c.checkpoint.view(torch.uint8))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    assert torch.equal(runs[0][1], base.checkpoint[1].view(torch.uint8))  # cursor 1: no flush
    c = base.clone()
    with pytest.raises(ValueError, match=r"rounding_seed is 'x'; expected None or an int"):
        step(c, *args, slot_ids=slots, rounding_seed="x")
    assert torch.equal(c.checkpoint.view(torch.uint8), base.checkpoint.view(torch.uint8))
