"""The GDN / KDA speculative ops on the CPU: argument validation (nothing written on a bad call,
errors name the argument) and torch.library.opcheck of their custom ops."""

import re

import pytest
import torch

from torch.library import opcheck

from gated_delta_cases import DeltaFamily, DeltaGeometry
from spec_cases import make_window
from trtllm_replayssm.ops import (
    SnapshotCache,
    gdn_replay_verify,
    gdn_serial_decode,
    kda_replay_verify,
    kda_snapshot_verify,
    spec_buffer_len,
)

G = DeltaGeometry(2, 4, 8, 6)
T = 3
L = spec_buffer_len(4, T)
NUM_SLOTS = 6
SLOTS = [3, -1, 0, 5]
FIELDS = ("checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals", "pending")


def _ids(*ids) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.int32)


def _cache(per_channel: bool):
    c = DeltaFamily(G, per_channel=per_channel).allocate(NUM_SLOTS, L, torch.float32, torch.float32, "cpu")
    c.checkpoint.normal_()
    c.d_records.normal_()
    c.k_records.normal_()
    c.g_records.uniform_(-0.3, -0.01)
    c.cursor.copy_(torch.tensor([0, 1, 2, 4, 0, 1], dtype=torch.int32))
    return c


def _kwargs(per_channel: bool, Tw: int = T) -> dict:
    win = make_window(DeltaFamily(G, per_channel=per_channel), len(SLOTS), Tw, torch.float32, "cpu")
    return dict(
        q=win["q"],
        k=win["k"],
        v=win["v"],
        g=win["g"],
        beta=win["beta"],
        slot_ids=_ids(*SLOTS),
        num_tokens=_ids(Tw, Tw, 1, 2),
        scale=None,
        use_qk_l2norm=True,
        out=torch.full_like(win["v"], 42.0),
    )


BAD = [
    pytest.param(lambda k, pc: {"q": k["q"][:, :, :, :-1]}, ValueError, "q", id="q-head_k_dim"),
    pytest.param(lambda k, pc: {"k": k["k"].double()}, TypeError, "k", id="k-dtype"),
    pytest.param(lambda k, pc: {"v": k["v"][:, :-1]}, ValueError, "v", id="v-T"),
    pytest.param(
        lambda k, pc: {"g": k["g"][..., 0] if pc else k["g"][..., None].expand(-1, -1, -1, G.head_k_dim)},
        ValueError,
        "g",
        id="g-other-family",
    ),
    pytest.param(lambda k, pc: {"beta": k["beta"][:, :, :1]}, ValueError, "beta", id="beta-v_heads"),
    pytest.param(lambda k, pc: {"num_tokens": _ids(T, T, T + 1, 1)}, ValueError, "num_tokens", id="num_tokens-above-T"),
    pytest.param(lambda k, pc: {"scale": -1.0}, TypeError, "scale", id="scale-negative"),
    pytest.param(lambda k, pc: _kwargs(pc, 4) | {"cache": k["cache"]}, ValueError, "q", id="T-above-B"),
]


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("override, exc, name", BAD)
def test_gated_delta_replay_verify_bad_input_raises_before_writing(per_channel, override, exc, name):
    fn, op = (kda_replay_verify, "kda_replay_verify") if per_channel else (gdn_replay_verify, "gdn_replay_verify")
    kw = {"cache": _cache(per_channel), **_kwargs(per_channel)}
    bad = {**kw, **override(kw, per_channel)}
    watched = [getattr(kw["cache"], f) for f in FIELDS] + [kw["out"]]
    before = [t.clone() for t in watched]
    with pytest.raises(exc, match=rf"^{op}: {re.escape(name)}\b"):
        fn(**bad)
    for t, b in zip(watched, before):
        assert torch.equal(t, b)


def test_gated_delta_verify_and_baselines_reject_the_other_family():
    kw = _kwargs(False)
    with pytest.raises(TypeError, match="^kda_replay_verify: cache is GDNReplayCache"):
        kda_replay_verify(_cache(False), **kw)
    holder = SnapshotCache.allocate(NUM_SLOTS, (G.v_heads, G.head_v_dim, G.head_k_dim), T)
    with pytest.raises(ValueError, match="^kda_snapshot_verify: g has shape"):
        kda_snapshot_verify(holder, **kw)
    with pytest.raises(ValueError, match="^gdn_serial_decode: state has shape"):
        gdn_serial_decode(holder.state[0], **kw)
    with pytest.raises(TypeError, match="^gdn_serial_decode: state is list; expected a torch.Tensor"):
        gdn_serial_decode(holder.state.tolist(), **kw)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("op", ["verify", "snapshot_verify"])
def test_gated_delta_spec_custom_ops_opcheck(per_channel, op):
    kw = _kwargs(per_channel)
    window = (
        kw["q"],
        kw["k"],
        kw["v"],
        kw["g"],
        kw["beta"],
        kw["slot_ids"],
        kw["num_tokens"],
        G.head_k_dim**-0.5,
        True,
        kw["out"],
    )
    if op == "verify":
        c = _cache(per_channel)
        opcheck(
            torch.ops.replayssm.gated_delta_replay_verify.default,
            tuple(getattr(c, f) for f in FIELDS if f != "arrivals") + window,
        )
    else:
        holder = SnapshotCache.allocate(NUM_SLOTS, (G.v_heads, G.head_v_dim, G.head_k_dim), T)
        opcheck(torch.ops.replayssm.gated_delta_snapshot_verify.default, (holder.state, holder.snapshots) + window)
