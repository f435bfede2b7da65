"""The speculative ops on the CPU: argument validation (nothing written on a bad call, errors
name the argument), padding rows and fresh outputs, torch.compile and torch.library.opcheck."""

import re

import pytest
import torch

from torch.library import opcheck

from mamba2_cases import Geometry, Mamba2Family, make_params
from spec_cases import make_window
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.ops import (
    SnapshotCache,
    mamba2_replay_verify,
    mamba2_serial_decode,
    mamba2_snapshot_verify,
    replay_commit,
    snapshot_commit,
    spec_buffer_len,
)

G = Geometry(4, 8, 16, 2)
T = 3
L = spec_buffer_len(4, T)  # 7
NUM_SLOTS = 6
SLOTS = [3, -1, 0, 5]  # slot 3 at cursor 4 flushes (4 + 3 > 6); 0 and 5 do not
CURSORS = [0, 1, 2, 4, 0, 1]
FIELDS = ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals", "pending")


def _cache() -> Mamba2ReplayCache:
    c = Mamba2ReplayCache.allocate(
        NUM_SLOTS, G.nheads, G.head_dim, G.d_state, G.ngroups, L, state_dtype=torch.float32, act_dtype=torch.float32
    )
    c.checkpoint.normal_()
    c.x_records.normal_()
    c.B_records.normal_()
    c.dt_records.uniform_(0.01, 0.05)
    c.cursor.copy_(torch.tensor(CURSORS, dtype=torch.int32))
    return c


def _tensors(c) -> list:
    return [getattr(c, f) for f in FIELDS]


def _ids(*ids) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.int32)


def _verify_kwargs(Tw: int = T) -> dict:
    p = make_params(G, "cpu", D_per_dim=True)
    win = make_window(Mamba2Family(G, with_z=True), len(SLOTS), Tw, torch.float32, "cpu")
    return dict(
        x=win["x"],
        dt=win["dt"],
        A=p.A,
        B=win["B"],
        C=win["C"],
        slot_ids=_ids(*SLOTS),
        num_tokens=_ids(Tw, Tw, 1, 2),
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        dt_softplus=True,
        out=torch.full_like(win["x"], 42.0),
    )


def _assert_raises_untouched(fn, kw: dict, override, exc, name: str, op: str) -> None:
    bad = {**kw, **override(kw)}
    watched = [v for v in list(kw.values()) + list(bad.values()) if isinstance(v, torch.Tensor)]
    for c in (kw.get("cache"), bad.get("cache")):
        if isinstance(c, Mamba2ReplayCache):
            watched += _tensors(c)
        if isinstance(c, SnapshotCache):
            watched += [c.state, c.snapshots]
    before = [t.clone() for t in watched]
    with pytest.raises(exc, match=rf"^{op}: {re.escape(name)}\b"):
        fn(**bad)
    for t, b in zip(watched, before):
        assert torch.equal(t, b)


def _pending_cache() -> Mamba2ReplayCache:
    c = _cache()
    mamba2_replay_verify(c, **_verify_kwargs())
    return c


BAD_VERIFY = [
    pytest.param(lambda k: {"x": k["x"][:, :, :, :-1]}, ValueError, "x", id="x-head_dim"),
    pytest.param(lambda k: {"x": k["x"][:, 0]}, ValueError, "x", id="x-3d"),
    pytest.param(lambda k: {"x": k["x"].half()}, TypeError, "x", id="x-dtype-vs-cache"),
    pytest.param(lambda k: {"dt": k["dt"][:, :-1]}, ValueError, "dt", id="dt-T"),
    pytest.param(lambda k: {"A": k["A"].half()}, TypeError, "A", id="A-float16"),
    pytest.param(lambda k: {"B": torch.randn(len(SLOTS), T, 1, G.d_state)}, ValueError, "B", id="B-ngroups"),
    pytest.param(lambda k: {"C": k["C"][:, :-1]}, ValueError, "C", id="C-T"),
    pytest.param(lambda k: {"z": k["z"][:, :, :-1]}, ValueError, "z", id="z-shape"),
    pytest.param(lambda k: {"D": torch.randn(G.nheads + 1)}, ValueError, "D", id="D-shape"),
    pytest.param(lambda k: {"out": k["out"].double()}, TypeError, "out", id="out-dtype"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, 3, 5)}, ValueError, "slot_ids", id="slot_ids-duplicate"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, 0, NUM_SLOTS)}, ValueError, "slot_ids", id="slot_ids-range"),
    pytest.param(lambda k: {"num_tokens": _ids(T, T, T + 1, 1)}, ValueError, "num_tokens", id="num_tokens-above-T"),
    pytest.param(lambda k: {"num_tokens": _ids(T, T, 0, 1)}, ValueError, "num_tokens", id="num_tokens-zero"),
    pytest.param(lambda k: {"num_tokens": k["num_tokens"].long()}, TypeError, "num_tokens", id="num_tokens-int64"),
    pytest.param(lambda k: {"num_tokens": _ids(1, 1)}, ValueError, "num_tokens", id="num_tokens-shape"),
    # T = 4 needs L >= 8 (history B = L - T >= T); the cache has L = 7.
    pytest.param(lambda k: _verify_kwargs(4) | {"cache": k["cache"]}, ValueError, "x", id="T-above-B"),
    pytest.param(lambda k: {"cache": _pending_cache()}, ValueError, "slot_ids", id="window-pending"),
    pytest.param(lambda k: {"cache": tuple(_tensors(k["cache"]))}, TypeError, "cache", id="cache-not-a-cache"),
    pytest.param(lambda k: {"dt_softplus": 1}, TypeError, "dt_softplus", id="dt_softplus-int"),
]


@pytest.mark.parametrize("override, exc, name", BAD_VERIFY)
def test_mamba2_replay_verify_bad_input_raises_before_writing(override, exc, name):
    kw = {"cache": _cache(), **_verify_kwargs()}
    _assert_raises_untouched(mamba2_replay_verify, kw, override, exc, name, "mamba2_replay_verify")


BAD_COMMIT = [
    # Verified with num_tokens (T, -, 1, 2): accepting 2 on the row that had 1 token is an error.
    pytest.param(lambda k: {"num_accepted": _ids(1, 1, 2, 1)}, ValueError, "num_accepted", id="accepted-above-num_tokens"),
    pytest.param(lambda k: {"num_accepted": _ids(0, 1, 1, 1)}, ValueError, "num_accepted", id="accepted-zero"),
    pytest.param(lambda k: {"num_accepted": _ids(1, 1, 1)}, ValueError, "num_accepted", id="accepted-shape"),
    pytest.param(lambda k: {"num_accepted": k["num_accepted"].long()}, TypeError, "num_accepted", id="accepted-int64"),
    pytest.param(lambda k: {"cache": _cache()}, ValueError, "num_accepted", id="no-verify-to-commit"),
    pytest.param(lambda k: {"slot_ids": _ids(3, -1, 0, NUM_SLOTS)}, ValueError, "slot_ids", id="slot_ids-range"),
    pytest.param(lambda k: {"cache": k["cache"].checkpoint}, TypeError, "cache", id="cache-tensor"),
    pytest.param(lambda k: {"slot_ids": [3, 1, 0, 2]}, TypeError, "slot_ids", id="slot_ids-list"),
]


@pytest.mark.parametrize("override, exc, name", BAD_COMMIT)
def test_replay_commit_bad_input_raises_before_writing(override, exc, name):
    kw = dict(cache=_pending_cache(), slot_ids=_ids(*SLOTS), num_accepted=_ids(2, 1, 1, 2))
    _assert_raises_untouched(replay_commit, kw, override, exc, name, "replay_commit")


def _snapshot_kwargs() -> dict:
    holder = SnapshotCache.allocate(NUM_SLOTS, (G.nheads, G.head_dim, G.d_state), T)
    holder.state.normal_()
    return {"cache": holder, **_verify_kwargs()}


@pytest.mark.parametrize(
    "fn, op, override, exc, name",
    [
        pytest.param(
            mamba2_snapshot_verify,
            "mamba2_snapshot_verify",
            lambda k: _verify_kwargs(4) | {"cache": k["cache"]},
            ValueError,
            "x",
            id="snapshot-T-above-snapshots",
        ),
        pytest.param(
            mamba2_snapshot_verify,
            "mamba2_snapshot_verify",
            lambda k: {"cache": _cache()},
            TypeError,
            "cache",
            id="snapshot-replay-cache",
        ),
        pytest.param(
            mamba2_snapshot_verify,
            "mamba2_snapshot_verify",
            lambda k: {"B": k["B"][..., :-1]},
            ValueError,
            "B",
            id="snapshot-B-d_state",
        ),
        pytest.param(
            mamba2_serial_decode,
            "mamba2_serial_decode",
            lambda k: {"state": k.pop("cache").state[0]},
            ValueError,
            "state",
            id="serial-state-3d",
        ),
        pytest.param(
            mamba2_serial_decode,
            "mamba2_serial_decode",
            lambda k: {"state": k.pop("cache").state.tolist()},
            TypeError,
            "state",
            id="serial-state-list",
        ),
        pytest.param(
            snapshot_commit,
            "snapshot_commit",
            lambda k: {"num_accepted": _ids(1, 1, T + 1, 1), "slot_ids": k["slot_ids"], "cache": k["cache"]},
            ValueError,
            "num_accepted",
            id="snapshot-commit-above-T",
        ),
    ],
)
def test_mamba2_baselines_bad_input_raises_before_writing(fn, op, override, exc, name):
    kw = _snapshot_kwargs()
    if fn is snapshot_commit:
        kw = {"cache": kw["cache"], "slot_ids": kw["slot_ids"], "num_accepted": _ids(1, 1, 1, 1)}
    if fn is mamba2_serial_decode:
        kw = {"state": kw.pop("cache").state, **kw}
        bad = override({"cache": SnapshotCache.allocate(NUM_SLOTS, (G.nheads, G.head_dim, G.d_state), T)})
        with pytest.raises(exc, match=rf"^{op}: {name}\b"):
            fn(**{**kw, **bad})
        return
    _assert_raises_untouched(fn, kw, override, exc, name, op)


def test_spec_buffer_len_requires_history_at_least_window():
    assert spec_buffer_len(16, 4) == 20
    with pytest.raises(ValueError, match="^spec_buffer_len: history B = 3 < window T = 4"):
        spec_buffer_len(3, 4)
    with pytest.raises(ValueError, match="^spec_buffer_len: window is 0"):
        spec_buffer_len(4, 0)


def test_mamba2_replay_verify_fresh_out_and_untouched_tokens():
    """Padding rows and tokens past num_tokens keep ``out``; a fresh ``out`` reads zero there.
    The flush row (slot 3) moves its cursor to 0, the others keep theirs."""
    kw = _verify_kwargs()
    cache = _cache()
    twin = Mamba2ReplayCache(*[t.clone() for t in _tensors(cache)])
    y = mamba2_replay_verify(cache, **kw)
    written = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    assert torch.all(y[~written] == 42.0) and not torch.any(y[written] == 42.0)
    assert cache.cursor.tolist() == [0, 1, 2, 0, 0, 1]
    assert cache.pending.tolist() == [1, 0, 0, 3, 0, 2]
    fresh = mamba2_replay_verify(twin, **{**kw, "out": None})
    assert not fresh[~written].any()
    assert torch.equal(fresh[written], y[written])


def test_mamba2_replay_verify_compiled_equals_eager():
    """fullgraph tracing of verify + commit: device-value checks are skipped while compiling."""

    def step(cache, x, dt, A, B, C, slot_ids, num_tokens, D, z, dt_bias, out, num_accepted):
        y = mamba2_replay_verify(
            cache, x, dt, A, B, C, slot_ids=slot_ids, num_tokens=num_tokens, D=D, z=z, dt_bias=dt_bias, out=out
        )
        replay_commit(cache, slot_ids, num_accepted)
        return y

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    eager_cache = _cache()
    compiled_cache = Mamba2ReplayCache(*[t.clone() for t in _tensors(eager_cache)])
    for _ in range(3):
        kw = _verify_kwargs()
        del kw["dt_softplus"]
        out = kw.pop("out")
        a = _ids(2, 1, 1, 1)
        y_eager = step(eager_cache, **kw, out=out.clone(), num_accepted=a)
        y_compiled = compiled(compiled_cache, **kw, out=out.clone(), num_accepted=a)
        assert torch.equal(y_compiled, y_eager)
        for t, e in zip(_tensors(compiled_cache), _tensors(eager_cache)):
            assert torch.equal(t, e)


@pytest.mark.parametrize("op", ["verify", "commit", "snapshot_verify", "snapshot_commit"])
def test_spec_custom_ops_opcheck(op):
    kw = _verify_kwargs()
    window = (
        kw["x"],
        kw["dt"],
        kw["A"],
        kw["B"],
        kw["C"],
        kw["slot_ids"],
        kw["num_tokens"],
        kw["D"],
        kw["z"],
        kw["dt_bias"],
        True,
        kw["out"],
    )
    holder = SnapshotCache.allocate(NUM_SLOTS, (G.nheads, G.head_dim, G.d_state), T)
    a = _ids(1, 1, 1, 2)
    args = {
        "verify": (torch.ops.replayssm.mamba2_replay_verify.default, tuple(_tensors(_cache())) + window),
        "commit": (
            torch.ops.replayssm.replay_commit.default,
            (_pending_cache().cursor, torch.full((NUM_SLOTS,), 3, dtype=torch.int32), kw["slot_ids"], a),
        ),
        "snapshot_verify": (torch.ops.replayssm.mamba2_snapshot_verify.default, (holder.state, holder.snapshots) + window),
        "snapshot_commit": (torch.ops.replayssm.snapshot_commit.default, (holder.state, holder.snapshots, kw["slot_ids"], a)),
    }[op]
    opcheck(*args)
