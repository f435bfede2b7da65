"""The public Mamba-2 ops and the replay cache on the CPU: dispatch to the references, argument
validation (nothing written on a bad call), padding rows, torch.compile and torch.library.opcheck."""

import pytest
import torch

from torch.library import opcheck

from mamba2_cases import DTYPES, Geometry, make_params, make_step
from op_checks import assert_raises_untouched as _assert_raises_untouched
from op_checks import assert_unchanged as _assert_unchanged
from op_checks import ids as _ids
from op_checks import snapshot as _snapshot
from op_checks import strided as _strided
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.ops import mamba2_decode_step, mamba2_replay_step
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref, mamba2_replay_step_ref

G = Geometry(4, 8, 16, 2)
L = 4
NUM_SLOTS = 6
# Live rows at cursors 3 (a flush), 0 and 1 (appends), and a padding row; see _cache.
SLOTS = [3, -1, 0, 5]
CACHE_FIELDS = ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals")


def _tensors(cache: Mamba2ReplayCache) -> list:
    return [getattr(cache, name) for name in CACHE_FIELDS]


def _fill(cache: Mamba2ReplayCache) -> Mamba2ReplayCache:
    """Random checkpoints and records; cursor of slot s is s mod L."""
    cache.checkpoint.copy_(torch.randn(cache.checkpoint.shape))
    cache.x_records.copy_(torch.randn(cache.x_records.shape))
    cache.B_records.copy_(torch.randn(cache.B_records.shape))
    cache.dt_records.uniform_(0.01, 0.05)
    cache.cursor.copy_(torch.arange(cache.num_slots, dtype=torch.int32) % cache.L)
    return cache


def _cache(state: str = "f32", act: str = "f32", L: int = L) -> Mamba2ReplayCache:
    return _fill(
        Mamba2ReplayCache.allocate(
            NUM_SLOTS, G.nheads, G.head_dim, G.d_state, G.ngroups, L, state_dtype=DTYPES[state], act_dtype=DTYPES[act]
        )
    )


def _direct_cache(L: int) -> Mamba2ReplayCache:
    """A float32 cache built from its tensors (bypassing ``allocate`` and its L check)."""
    n, h, p, d, g = NUM_SLOTS, G.nheads, G.head_dim, G.d_state, G.ngroups
    return _fill(
        Mamba2ReplayCache(
            checkpoint=torch.zeros(n, h, p, d),
            x_records=torch.zeros(n, h, L, p),
            dt_records=torch.zeros(n, h, L),
            B_records=torch.zeros(n, g, L, d),
            cursor=torch.zeros(n, dtype=torch.int32),
            arrivals=torch.zeros(n, dtype=torch.int32),
        )
    )


def _step_kwargs(act: str = "f32", *, D_per_dim: bool = False, with_z: bool = True) -> dict:
    """Valid keyword arguments of one step (all but the cache / state) for the rows of SLOTS."""
    p = make_params(G, "cpu", D_per_dim=D_per_dim)
    inp = make_step(G, len(SLOTS), DTYPES[act], "cpu", with_z=with_z)
    return dict(
        x=inp["x"],
        dt=inp["dt"],
        A=p.A,
        B=inp["B"],
        C=inp["C"],
        slot_ids=torch.tensor(SLOTS, dtype=torch.int32),
        D=p.D,
        z=inp["z"],
        dt_bias=p.dt_bias,
        dt_softplus=True,
        out=torch.full_like(inp["x"], 42.0),
    )


# --------------------------------------------------------------------------- dispatch

CASES = [
    pytest.param("f32", "f32", False, True, id="sf32-af32-Dhead-z"),
    pytest.param("f32", "bf16", True, False, id="sf32-abf16-Ddim"),
    pytest.param("f16", "f16", False, False, id="sf16-af16"),
    pytest.param("f64", "f64", True, True, id="sf64-af64-Ddim-z"),
]


@pytest.mark.parametrize("state, act, D_per_dim, with_z", CASES)
def test_mamba2_replay_step_equals_reference_bitwise(state, act, D_per_dim, with_z):
    cache = _cache(state, act)
    ref = _snapshot(_tensors(cache))
    for _ in range(L + 1):  # every live row appends and flushes at least once
        kw = _step_kwargs(act, D_per_dim=D_per_dim, with_z=with_z)
        out_ref = kw["out"].clone()
        y = mamba2_replay_step(cache, **kw)
        mamba2_replay_step_ref(*ref[:5], **{**kw, "out": out_ref})
        assert y is kw["out"]
        assert torch.equal(y, out_ref)
        _assert_unchanged(_tensors(cache), ref)


@pytest.mark.parametrize("state, act, D_per_dim, with_z", CASES)
def test_mamba2_decode_step_equals_reference_bitwise(state, act, D_per_dim, with_z):
    s = torch.randn(NUM_SLOTS, G.nheads, G.head_dim, G.d_state).to(DTYPES[state])
    s_ref = s.clone()
    for _ in range(3):
        kw = _step_kwargs(act, D_per_dim=D_per_dim, with_z=with_z)
        out_ref = kw["out"].clone()
        y = mamba2_decode_step(s, **kw)
        mamba2_decode_step_ref(s_ref, **{**kw, "out": out_ref})
        assert y is kw["out"]
        assert torch.equal(y, out_ref)
        assert torch.equal(s, s_ref)


# --------------------------------------------------------------------------- validation

# (overrides of the valid arguments k, exception, argument the message must name)
BAD_STEP_ARGS = [
    pytest.param(lambda k: {"x": k["x"][..., :-1]}, ValueError, "x", id="x-shape"),
    pytest.param(lambda k: {"x": _strided(k["x"])}, ValueError, "x", id="x-strided"),
    pytest.param(lambda k: {"dt": k["dt"][:, :-1]}, ValueError, "dt", id="dt-shape"),
    pytest.param(lambda k: {"A": k["A"].half()}, TypeError, "A", id="A-float16"),
    pytest.param(lambda k: {"B": torch.randn(len(SLOTS), 3, G.d_state)}, ValueError, "B", id="B-ngroups"),
    pytest.param(lambda k: {"C": k["C"][..., :-1]}, ValueError, "C", id="C-d_state"),
    pytest.param(lambda k: {"D": torch.randn(G.nheads + 1)}, ValueError, "D", id="D-shape"),
    pytest.param(lambda k: {"z": k["z"][:, :-1]}, ValueError, "z", id="z-shape"),
    pytest.param(lambda k: {"out": k["out"].double()}, TypeError, "out", id="out-dtype"),
    pytest.param(lambda k: {"slot_ids": k["slot_ids"].long()}, TypeError, "slot_ids", id="slot_ids-int64"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, NUM_SLOTS, 5)}, ValueError, "slot_ids", id="slot_ids-out-of-range"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, 3, 5)}, ValueError, "slot_ids", id="slot_ids-duplicate"),
    pytest.param(lambda k: {"dt_softplus": 1}, TypeError, "dt_softplus", id="dt_softplus-int"),
]

BAD_REPLAY_ARGS = BAD_STEP_ARGS + [
    pytest.param(lambda k: {"x": k["x"].half()}, TypeError, "x", id="x-dtype-vs-cache"),
    # The constructor accepts L = 65; the op rejects it (the kernel's window is 64 records).
    pytest.param(lambda k: {"cache": _direct_cache(65)}, ValueError, "cache", id="cache-L65"),
    pytest.param(lambda k: {"cache": tuple(_tensors(k["cache"]))}, TypeError, "cache", id="cache-not-a-cache"),
]

BAD_DECODE_ARGS = BAD_STEP_ARGS + [
    pytest.param(lambda k: {"state": list(k["state"])}, TypeError, "state", id="state-list"),
    pytest.param(lambda k: {"state": k["state"][0]}, ValueError, "state", id="state-3d"),
]


@pytest.mark.parametrize("override, exc, name", BAD_REPLAY_ARGS)
def test_mamba2_replay_step_bad_input_raises_before_writing(override, exc, name):
    kw = {"cache": _cache(), **_step_kwargs()}
    _assert_raises_untouched(mamba2_replay_step, kw, override, exc, name, "mamba2_replay_step")


@pytest.mark.parametrize("override, exc, name", BAD_DECODE_ARGS)
def test_mamba2_decode_step_bad_input_raises_before_writing(override, exc, name):
    kw = {"state": torch.randn(NUM_SLOTS, G.nheads, G.head_dim, G.d_state), **_step_kwargs()}
    _assert_raises_untouched(mamba2_decode_step, kw, override, exc, name, "mamba2_decode_step")


# --------------------------------------------------------------------------- cache


def test_mamba2_replay_cache_allocate_geometry():
    cache = Mamba2ReplayCache.allocate(5, 4, 8, 16, 2, 7, state_dtype=torch.float64, act_dtype=torch.float64)
    assert (cache.num_slots, cache.nheads, cache.head_dim, cache.d_state, cache.ngroups, cache.L) == (5, 4, 8, 16, 2, 7)
    assert (cache.state_dtype, cache.act_dtype) == (torch.float64, torch.float64)
    assert cache.dt_records.dtype == torch.float64  # float64 dt records with a float64 checkpoint
    assert cache.device == torch.device("cpu")
    assert all(not t.any() for t in _tensors(cache))
    bf16 = Mamba2ReplayCache.allocate(5, 4, 8, 16, 2, 7)
    assert (bf16.state_dtype, bf16.act_dtype, bf16.dt_records.dtype) == (torch.float32, torch.bfloat16, torch.float32)


@pytest.mark.parametrize(
    "kw, name",
    [
        pytest.param(dict(L=0), "L", id="L0"),
        pytest.param(dict(L=65), "L", id="L65"),
        pytest.param(dict(nheads=0), "nheads", id="nheads0"),
        pytest.param(dict(head_dim=2.0), "head_dim", id="head_dim-float"),
        pytest.param(dict(ngroups=True), "ngroups", id="ngroups-bool"),
    ],
)
def test_mamba2_replay_cache_allocate_rejects_bad_geometry(kw, name):
    args = dict(num_slots=2, nheads=4, head_dim=8, d_state=16, ngroups=2, L=4) | kw
    with pytest.raises(ValueError, match=rf"^Mamba2ReplayCache.allocate: {name} is"):
        Mamba2ReplayCache.allocate(**args)


def test_mamba2_replay_cache_admit_sets_given_slots_only():
    cache = _cache()
    cache.cursor.fill_(2)
    before = _snapshot(_tensors(cache))
    state = torch.randn(2, G.nheads, G.head_dim, G.d_state, dtype=torch.float64)
    cache.admit(torch.tensor([4, 1]), state)
    assert torch.equal(cache.checkpoint[4], state[0].float())
    assert torch.equal(cache.checkpoint[1], state[1].float())
    assert cache.cursor.tolist() == [2, 0, 2, 2, 0, 2]
    others = [0, 2, 3, 5]
    assert torch.equal(cache.checkpoint[others], before[0][others])
    _assert_unchanged(_tensors(cache)[1:4] + [cache.arrivals], before[1:4] + [before[5]])

    cache.admit(_ids(3))  # no state: a zero checkpoint
    assert not cache.checkpoint[3].any()
    assert cache.cursor.tolist() == [2, 0, 2, 0, 0, 2]
    assert torch.equal(cache.checkpoint[[0, 2, 5]], before[0][[0, 2, 5]])


def _state(n: int) -> torch.Tensor:
    return torch.randn(n, G.nheads, G.head_dim, G.d_state)


@pytest.mark.parametrize(
    "slot_ids, state, exc, name",
    [
        pytest.param([0, 1], _state(3), ValueError, "state", id="state-rows"),
        pytest.param([0], _state(1)[..., :-1], ValueError, "state", id="state-d_state"),
        pytest.param([0], _state(1).int(), TypeError, "state", id="state-int"),
        pytest.param([0], _state(1).tolist(), TypeError, "state", id="state-list"),
        pytest.param([0, NUM_SLOTS], _state(2), ValueError, "slot_ids", id="slot-out-of-range"),
        pytest.param([-1], _state(1), ValueError, "slot_ids", id="slot-negative"),
        pytest.param([2, 2], _state(2), ValueError, "slot_ids", id="slot-duplicate"),
        pytest.param([[0]], _state(1), ValueError, "slot_ids", id="slot-2d"),
        pytest.param([0.0], _state(1), ValueError, "slot_ids", id="slot-float"),
    ],
)
def test_mamba2_replay_cache_admit_bad_args_raise_before_writing(slot_ids, state, exc, name):
    cache = _cache()
    before = _snapshot(_tensors(cache))
    with pytest.raises(exc, match=rf"^Mamba2ReplayCache.admit: {name}\b"):
        cache.admit(torch.tensor(slot_ids), state)
    _assert_unchanged(_tensors(cache), before)


def _replace(**over):
    def fields(c: Mamba2ReplayCache) -> dict:
        return {name: getattr(c, name) for name in CACHE_FIELDS} | over

    return fields


@pytest.mark.parametrize(
    "fields, exc, name",
    [
        pytest.param(
            _replace(dt_records=torch.zeros(NUM_SLOTS, G.nheads, L + 1)), ValueError, "dt_records", id="dt_records-L"
        ),
        pytest.param(
            _replace(B_records=torch.zeros(NUM_SLOTS, G.ngroups, L - 1, G.d_state)), ValueError, "B_records", id="B_records-L"
        ),
        pytest.param(
            _replace(B_records=torch.zeros(NUM_SLOTS, 3, L, G.d_state)), ValueError, "ngroups", id="ngroups-not-dividing"
        ),
        pytest.param(_replace(cursor=torch.zeros(NUM_SLOTS, dtype=torch.int64)), TypeError, "cursor", id="cursor-int64"),
        pytest.param(
            _replace(arrivals=torch.zeros(NUM_SLOTS + 1, dtype=torch.int32)), ValueError, "arrivals", id="arrivals-shape"
        ),
        pytest.param(
            _replace(B_records=torch.zeros(NUM_SLOTS, G.ngroups, L, G.d_state, dtype=torch.float16)),
            TypeError,
            "B_records",
            id="B_records-dtype",
        ),
        pytest.param(
            _replace(x_records=torch.zeros(NUM_SLOTS, G.nheads, G.head_dim, L).mT),
            ValueError,
            "x_records",
            id="x_records-non-contiguous",
        ),
    ],
)
def test_mamba2_replay_cache_constructor_rejects_inconsistent_tensors(fields, exc, name):
    with pytest.raises(exc, match=rf"^Mamba2ReplayCache: {name}\b"):
        Mamba2ReplayCache(**fields(_direct_cache(L)))


# --------------------------------------------------------------------------- padding rows


@pytest.mark.parametrize("op", ["replay", "decode"])
def test_mamba2_ops_padding_rows_keep_out(op):
    target = _cache() if op == "replay" else torch.randn(NUM_SLOTS, G.nheads, G.head_dim, G.d_state)
    fn = mamba2_replay_step if op == "replay" else mamba2_decode_step
    kw = _step_kwargs()
    pad = kw["slot_ids"] < 0
    y = fn(target, **kw)
    assert torch.all(y[pad] == 42.0) and not torch.any(y[~pad] == 42.0)
    fresh = fn(target, **{**kw, "out": None})  # a fresh out reads zero in padding rows
    assert not fresh[pad].any()


@pytest.mark.parametrize("op", ["replay", "decode"])
def test_mamba2_ops_all_padding_changes_nothing(op):
    cache = _cache()
    target = cache if op == "replay" else cache.checkpoint
    fn = mamba2_replay_step if op == "replay" else mamba2_decode_step
    kw = {**_step_kwargs(), "slot_ids": _ids(-1, -1, -1, -1)}
    watched = _tensors(cache) + [kw["out"]]
    before = _snapshot(watched)
    fn(target, **kw)
    _assert_unchanged(watched, before)


# --------------------------------------------------------------------------- torch.compile


def test_mamba2_replay_step_compiled_equals_eager():
    """fullgraph tracing works: the slot-id value checks (a host read) are skipped while
    compiling, the shape/dtype checks are static and the op has a fake implementation."""

    def step(cache, x, dt, A, B, C, slot_ids, D, z, dt_bias, out):
        return mamba2_replay_step(cache, x, dt, A, B, C, slot_ids=slot_ids, D=D, z=z, dt_bias=dt_bias, out=out)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    eager_cache = _cache()
    compiled_cache = Mamba2ReplayCache(*_snapshot(_tensors(eager_cache)))
    for _ in range(L + 1):
        kw = _step_kwargs()
        del kw["dt_softplus"]
        out = kw.pop("out")
        y_eager = step(eager_cache, **kw, out=out.clone())
        y_compiled = compiled(compiled_cache, **kw, out=out.clone())
        assert torch.equal(y_compiled, y_eager)
        _assert_unchanged(_tensors(compiled_cache), _tensors(eager_cache))


# --------------------------------------------------------------------------- opcheck


def _opcheck_args(op: str, full: bool) -> tuple:
    """Positional arguments of the custom op, in its definition's order (ops/mamba2.py)."""
    kw = _step_kwargs(D_per_dim=full, with_z=full)
    step = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["slot_ids"])
    opt = (kw["D"], kw["z"], kw["dt_bias"]) if full else (None, None, None)
    tail = opt + (full, kw["out"])
    if op == "replay":
        return tuple(_tensors(_cache())) + step + tail
    return (torch.randn(NUM_SLOTS, G.nheads, G.head_dim, G.d_state),) + step + tail


@pytest.mark.parametrize("full", [True, False], ids=["D-z-dt_bias-softplus", "bare"])
@pytest.mark.parametrize("op", ["replay", "decode"])
def test_mamba2_custom_ops_opcheck(op, full):
    custom = {
        "replay": torch.ops.replayssm.mamba2_replay_step.default,
        "decode": torch.ops.replayssm.mamba2_decode_step.default,
    }[op]
    opcheck(custom, _opcheck_args(op, full))


# --------------------------------------------------------------------------- fp8 checkpoint

FP8 = torch.float8_e4m3fn


def test_mamba2_fp8_cache_allocates_row_scales_and_admit_encodes_rows():
    cache = _cache("fp8")
    assert cache.checkpoint_scale.shape == (NUM_SLOTS, G.nheads, G.head_dim) and cache.checkpoint_scale.dtype == torch.float32
    state = 5 * torch.randn(2, G.nheads, G.head_dim, G.d_state)
    state[0, 0, 0] = 0.0  # a zero row: scale 1
    cache.admit(torch.tensor([1, 4]), state)
    got = cache.checkpoint_values(torch.tensor([1, 4]))
    assert ((got - state).abs() <= state.abs().amax(-1, keepdim=True) / 16).all()  # e4m3: 3 mantissa bits
    amax = state.abs().amax(-1)
    assert torch.equal(cache.checkpoint_scale[[1, 4]], torch.where(amax > 0, amax / 448, 1.0))
    assert torch.equal(cache.checkpoint[[1, 4]].float().abs().amax(-1)[amax > 0], torch.full_like(amax[amax > 0], 448.0))
    cache.admit(torch.tensor([1]))
    assert torch.all(cache.checkpoint[1].float() == 0) and torch.all(cache.checkpoint_scale[1] == 1)
    f32 = _cache("f32")
    assert f32.checkpoint_scale is None and torch.equal(f32.checkpoint_values(torch.tensor([0])), f32.checkpoint[[0]])


def test_mamba2_replay_step_with_an_fp8_checkpoint_equals_the_reference_and_rewrites_scales():
    cache = _cache("fp8")
    ref = cache.clone()
    before = cache.checkpoint_scale.clone()
    for _ in range(L + 1):
        kw = _step_kwargs()
        out_ref = kw["out"].clone()
        y = mamba2_replay_step(cache, **kw)
        mamba2_replay_step_ref(*_tensors(ref)[:5], **{**kw, "out": out_ref}, checkpoint_scale=ref.checkpoint_scale)
        assert torch.equal(y, out_ref)
    assert torch.equal(cache.checkpoint.view(torch.uint8), ref.checkpoint.view(torch.uint8))
    assert torch.equal(cache.checkpoint_scale, ref.checkpoint_scale)
    live = [s for s in SLOTS if s >= 0]
    assert (cache.checkpoint_scale[live] != before[live]).all()  # every live row flushed
    idle = [s for s in range(NUM_SLOTS) if s not in live]
    assert torch.equal(cache.checkpoint_scale[idle], before[idle])


def test_mamba2_replay_step_opcheck_with_checkpoint_scales():
    """The schema with ``checkpoint_scale`` (mutated at flushes). opcheck compares tensors with
    allclose, which the CPU lacks for fp8: an fp32 checkpoint given scales runs the same schema
    (the reference decodes and encodes it as it would fp8 codes)."""
    cache = _cache("f32")
    cache.checkpoint_scale = torch.rand(NUM_SLOTS, G.nheads, G.head_dim) + 0.5
    kw = _step_kwargs()
    step = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["slot_ids"], None, None, None, True, kw["out"])
    opcheck(torch.ops.replayssm.mamba2_replay_step.default, tuple(_tensors(cache)) + step + (cache.checkpoint_scale,))


@pytest.mark.parametrize(
    "over, exc, match",
    [
        pytest.param(
            {"checkpoint_scale": None},
            ValueError,
            "checkpoint is torch.float8_e4m3fn without checkpoint_scale",
            id="fp8-without-scale",
        ),  # fmt: skip
        pytest.param(
            {"checkpoint_scale": torch.ones(NUM_SLOTS, G.nheads)}, ValueError, "checkpoint_scale has shape", id="scale-shape"
        ),  # fmt: skip
        pytest.param(
            {"checkpoint_scale": torch.ones(NUM_SLOTS, G.nheads, G.head_dim, dtype=torch.bfloat16)},
            TypeError,
            "checkpoint_scale is torch.bfloat16",
            id="scale-dtype",
        ),  # fmt: skip
        pytest.param(
            {"checkpoint": torch.zeros(NUM_SLOTS, G.nheads, G.head_dim, G.d_state)},
            ValueError,
            "checkpoint_scale is given with a torch.float32 checkpoint",
            id="scale-without-fp8",
        ),  # fmt: skip
    ],
)
def test_mamba2_fp8_cache_constructor_refuses_mismatched_scales(over, exc, match):
    cache = _cache("fp8")
    with pytest.raises(exc, match=rf"^Mamba2ReplayCache: {match}"):
        Mamba2ReplayCache(**({f: getattr(cache, f) for f in CACHE_FIELDS + ("checkpoint_scale",)} | over))


def test_mamba2_verify_with_an_fp8_checkpoint_and_a_rounding_seed_on_the_reference():
    """The verify op takes an fp8 cache (a flushing row's codes and scales rewritten) and checks
    its rounding seed as the replay step does."""
    from trtllm_replayssm.ops import mamba2_replay_verify, spec_buffer_len

    cache = Mamba2ReplayCache.allocate(
        NUM_SLOTS,
        G.nheads,
        G.head_dim,
        G.d_state,
        G.ngroups,
        spec_buffer_len(4, 2),
        state_dtype=FP8,
        act_dtype=torch.float32,
    )
    cache.admit(torch.arange(NUM_SLOTS), torch.randn(NUM_SLOTS, G.nheads, G.head_dim, G.d_state))
    cache.x_records.normal_(), cache.B_records.normal_(), cache.dt_records.uniform_(0.01, 0.5)
    cache.cursor[3] = cache.L - 2  # slot 3 flushes
    before = cache.clone()
    win = make_step(G, 2 * len(SLOTS), torch.float32, "cpu")
    w = {k: None if v is None else v.view(len(SLOTS), 2, *v.shape[1:]) for k, v in win.items()}
    call = dict(slot_ids=torch.tensor(SLOTS, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^mamba2_replay_verify: rounding_seed is -2"):
        mamba2_replay_verify(cache, w["x"], w["dt"], -torch.ones(G.nheads), w["B"], w["C"], **call, rounding_seed=-2)
    _assert_unchanged(_tensors(cache), _snapshot(_tensors(before)))
    mamba2_replay_verify(cache, w["x"], w["dt"], -torch.ones(G.nheads), w["B"], w["C"], **call, rounding_seed=5)
    assert not torch.equal(cache.checkpoint_scale[3], before.checkpoint_scale[3])
    assert torch.equal(cache.checkpoint_scale[[0, 1, 2, 4, 5]], before.checkpoint_scale[[0, 1, 2, 4, 5]])


def test_gated_delta_verify_takes_an_fp8_checkpoint_and_checks_its_rounding_seed():
    """The KDA verify op on an fp8 cache (CPU reference): a bad seed raises before anything is
    written; a flushing row's scales are rewritten."""
    from trtllm_replayssm.cache import KDAReplayCache
    from trtllm_replayssm.ops import kda_replay_verify

    cache = KDAReplayCache.allocate(2, 1, 1, 16, 16, 8, state_dtype=FP8, record_dtype=torch.float32)
    cache.admit(torch.arange(2), torch.randn(2, 1, 16, 16))
    cache.d_records.normal_(), cache.k_records.normal_(), cache.g_records.uniform_(-0.3, -0.01)
    cache.cursor[0] = 6  # flushes with 2 tokens
    before = cache.clone()
    q, v = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    args = (q, q, v, -torch.rand(1, 2, 1, 16), torch.rand(1, 2, 1))
    slots = torch.tensor([0], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^kda_replay_verify: rounding_seed is 2147483648"):
        kda_replay_verify(cache, *args, slot_ids=slots, rounding_seed=2**31)
    _assert_unchanged(list(cache.tensors().values()), _snapshot(list(before.tensors().values())))
    kda_replay_verify(cache, *args, slot_ids=slots, rounding_seed=1)
    assert not torch.equal(cache.checkpoint_scale[0], before.checkpoint_scale[0])
    assert torch.equal(cache.checkpoint_scale[1], before.checkpoint_scale[1])


# --------------------------------------------------------------------------- stochastic rounding


@pytest.mark.parametrize("state", ["bf16", "f16", "fp8"])
def test_mamba2_replay_step_rounding_seed_is_reproducible_and_changes_only_flushes(state):
    """On the reference (the op's CPU path): the same seed, the same bits; another seed, other
    checkpoint bits at the flush rows only; outputs and records as without a seed."""
    base, kw = _cache(state), _step_kwargs()
    runs = {}
    for name, seed in (("nearest", None), ("a", 3), ("a again", 3), ("b", 4)):
        cache = base.clone()
        runs[name] = (cache, mamba2_replay_step(cache, **{**kw, "out": kw["out"].clone()}, rounding_seed=seed))
    assert all(torch.equal(y, runs["nearest"][1]) for _, y in runs.values())
    bits = {k: c.checkpoint.view(torch.uint8) for k, (c, _) in runs.items()}
    assert torch.equal(bits["a"], bits["a again"]) and not torch.equal(bits["a"], bits["b"])
    flush = SLOTS[0]  # cursor L - 1
    others = [s for s in range(NUM_SLOTS) if s != flush]
    assert torch.equal(bits["a"][others], bits["nearest"][others])
    assert not torch.equal(bits["a"][flush], bits["nearest"][flush])


@pytest.mark.parametrize(
    "state, seed, exc, match",
    [
        ("bf16", -1, ValueError, r"rounding_seed is -1; expected None or an int in \[0, 2\^31\)"),
        ("bf16", 2**31, ValueError, "rounding_seed is 2147483648"),
        ("bf16", True, ValueError, "rounding_seed is True"),
        ("f32", 1, ValueError, "rounding_seed given with a torch.float32 checkpoint; stochastic rounding takes a bf16"),
    ],
)
def test_mamba2_replay_step_bad_rounding_seed_raises_before_writing(state, seed, exc, match):
    cache = _cache(state)
    before = _snapshot(_tensors(cache))
    with pytest.raises(exc, match=rf"^mamba2_replay_step: {match}"):
        mamba2_replay_step(cache, **_step_kwargs(), rounding_seed=seed)
    _assert_unchanged(_tensors(cache), before)


def test_the_cuda_step_refuses_a_rounding_seed():
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

    cache, kw = _cache("bf16"), _step_kwargs()
    with pytest.raises(ValueError, match="rounding_seed given; the CUDA step rounds to nearest only"):
        launch_mamba2_replay_step(*_tensors(cache), **{**kw, "slot_ids": kw["slot_ids"]}, rounding_seed=1, kernel="cuda")
