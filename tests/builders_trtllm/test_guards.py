"""A hook that cannot engage never fails silently (CPU stand-ins, float64).

Teeth: stand-in hosts that stop calling the hooked decode function, reach it without the method
that sets its step context, pass the slots or inputs under another keyword, ignore the records
extension or skip ``Mamba2Metadata.prepare`` raise a
RuntimeError naming the layer, the installed TensorRT-LLM version and what was missing (the host
path, which would have run silently, is counted). Counted decode: every decode step of every
family runs the replay op once, moves the cursors of the live slots and never the host's
conventional kernel.
"""

import contextlib
import functools
import re
import types

import pytest
import torch

import fake_trtllm as ft
from standins import importer
from trtllm_replayssm_builders.trtllm import adapter
from trtllm_replayssm_builders.trtllm.config import ReplaySSMConfig

L = 3
VERSION = "1.4.0rc1"  # not the pinned release: messages must name the installed version
MAPPING = types.SimpleNamespace(tp_size=1, pp_size=1, cp_size=1, enable_attention_dp=False)
KV = types.SimpleNamespace(enable_block_reuse=False)
V2 = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager.mamba_cache_manager_v2"
LIVE, PADDING_SLOT = {101: 1, 102: 3}, 4
IDS = [101, 102, ft.DUMMY_REQUEST_ID]  # two live rows and one CUDA-graph padding row


@contextlib.contextmanager
def hooks(**replaced):
    """Hooks installed on stand-in modules of TensorRT-LLM ``VERSION``; ``replaced`` maps module
    path -> (class name, class): a changed host. Removed afterwards."""
    modules = ft.modules(VERSION)
    for path, (name, cls) in replaced.items():
        setattr(modules[path], name, cls)
    adapter.install(ReplaySSMConfig(buffer_len=L), importer(modules))
    try:
        yield
    finally:
        adapter.uninstall()


@pytest.fixture
def trt():
    with hooks():
        yield


def manager(nheads, head_dim, d_state, n_groups, layout, cls=ft.MambaHybridCacheManagerV2):
    return cls(
        d_state,
        4,
        nheads,
        n_groups,
        head_dim,
        1,
        [True],
        torch.float64,
        torch.float64,
        KV,
        None,
        max_batch_size=4,
        mapping=MAPPING,
        conv_state_layout=layout,
    )


class Layer:
    """One hooked layer 0 of a family with its manager and metadata; ``decode`` prepares the
    metadata for a batch and runs the layer's forward the way its host does."""

    GEOMETRY = {"mamba2": (4, 8, 16, 2, "x_b_c"), "gdn": (4, 8, 8, 2, "q_k_v"), "kda": (2, 8, 8, 2, "q_k_v")}

    def __init__(self, kind, manager_class=ft.MambaHybridCacheManagerV2):
        self.kind = kind
        if kind == "mamba2":
            self.mixer = ft.Mamba2Mixer(nheads=4, head_dim=8, d_state=16, n_groups=2, layer_idx=0)
        elif kind == "gdn":
            self.mixer = ft.Qwen3NextGatedDeltaNet(None, None, layer_idx=0)
            self.mixer.conv1d.weight.data.normal_()
        else:
            self.mixer = ft.KimiKDALinearAttention(None, layer_idx=0)
        self.manager = manager(*self.GEOMETRY[kind], cls=manager_class)
        self.meta = ft.Mamba2Metadata(max_batch_size=4)

    def start(self):
        """Two prefilled requests (random states) and the padding slot."""
        self.manager.schedule(dict(LIVE), {})
        self.manager._request_slots[ft.DUMMY_REQUEST_ID] = PADDING_SLOT
        cache = self.manager.mamba_layer_cache(0)
        cache.temporal.copy_(torch.randn(cache.temporal.shape, dtype=torch.float64))
        cache.conv.copy_(torch.randn(cache.conv.shape, dtype=torch.float64))

    def attn(self, ids=IDS):
        attn = ft.attn_metadata_for(self.manager, ids)
        attn.mamba_metadata = self.meta
        return attn

    def forward(self, attn):
        n, f64 = attn.seq_lens.shape[0], torch.float64
        if self.kind == "mamba2":
            inputs = (
                torch.randn(n, 4, 8, dtype=f64),
                torch.randn(n, 4, dtype=f64),
                torch.randn(n, 2, 16, dtype=f64),
                torch.randn(n, 2, 16, dtype=f64),
            )
            return self.mixer(inputs, attn, self.meta)
        if self.kind == "gdn":
            mixed = torch.randn(n, self.mixer.conv1d.weight.shape[0], dtype=f64)
            return self.mixer.forward_core(mixed, torch.randn(n, 4, dtype=f64), torch.randn(n, 4, dtype=f64), attn, self.meta)
        return self.mixer._forward_impl(torch.randn(n, 16, dtype=f64), attn)

    def decode(self, ids=IDS):
        attn = self.attn(ids)
        self.meta.prepare(attn)
        return self.forward(attn)

    def cursor(self):
        return self.manager.get_aux_cache_extension("replayssm_records").store.layer(0).cursor


HOSTS = {
    "mamba2": ("Mamba2Mixer", "_stp_ssu_func"),
    "gdn": ("Qwen3NextGatedDeltaNet", "forward_decode"),
    "kda": ("KimiKDALinearAttention", "forward_decode"),
}
HOST_KERNELS = {"mamba2": "mamba2_decode_step", "gdn": "gdn_decode_step", "kda": "kda_decode_step"}
REPLAY_STEPS = {"mamba2": "mamba2_step", "gdn": "gated_delta_step", "kda": "gated_delta_step"}


def counting(monkeypatch, module, name):
    """Replaces ``module.name`` by a wrapper that counts its calls; returns the count holder."""
    calls, fn = [0], getattr(module, name)

    @functools.wraps(fn)
    def counted(*args, **kwargs):
        calls[0] += 1
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def not_replayed(kind):
    cls, hooked = HOSTS[kind]
    return re.escape(
        f"ReplaySSM: {cls} layer 0 ran a decode step on TensorRT-LLM {VERSION} "
        f"without the ReplaySSM op: {hooked} was not called for its 3 decode row(s)"
    )


# ---------------------------------------------------------------- normal decode, counted


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_every_decode_step_runs_the_replay_op_and_moves_the_cursors(trt, monkeypatch, kind):
    layer = Layer(kind)
    layer.start()
    replays = counting(monkeypatch, adapter, REPLAY_STEPS[kind])
    host = counting(monkeypatch, ft, HOST_KERNELS[kind])
    live = list(LIVE.values())
    for step in range(1, 2 * L + 2):
        layer.decode()
        assert replays[0] == step, f"step {step}: the replay op ran {replays[0]} times"
        assert layer.cursor()[live].tolist() == [step % L] * 2, f"step {step}"
        assert layer.cursor()[PADDING_SLOT] == 0
    assert host[0] == 0, "the host's conventional decode ran"


# ---------------------------------------------------------------- hooked function not called


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_host_that_stops_calling_the_hooked_decode_function_raises(trt, monkeypatch, kind):
    layer = Layer(kind)
    layer.start()
    mixer, cls = layer.mixer, type(layer.mixer)
    if kind == "mamba2":
        # the host selects its SSU kernel again after __init__ (e.g. when weights are loaded)
        mixer._select_mamba_kernels(None, None, mixer.head_dim)
    else:
        # the host's forward reaches its own decode body under the old name, unhooked
        mixer.forward_decode = functools.partial(cls.forward_decode.__wrapped__, mixer)
    host = counting(monkeypatch, ft, HOST_KERNELS[kind])
    with pytest.raises(RuntimeError, match=not_replayed(kind)):
        layer.decode()
    assert host[0] == 1  # without the guard, this step would have decoded silently


CONTEXTS = {"mamba2": "forward", "gdn": "forward_core", "kda": "_forward_impl"}


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_decode_hook_reached_without_its_context_method_raises(trt, monkeypatch, kind):
    """The host reaches the hooked decode function without calling the hooked method that sets
    the step context (as if it had inlined that method's body)."""
    layer = Layer(kind)
    layer.start()
    cls, context = type(layer.mixer), CONTEXTS[kind]
    monkeypatch.setattr(cls, context, getattr(cls, context).__wrapped__)
    host = counting(monkeypatch, ft, HOST_KERNELS[kind])
    name, hooked = HOSTS[kind]
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"{name} layer 0 ran a decode step on TensorRT-LLM {VERSION} without the ReplaySSM "
            f"op: {hooked} was called outside {name}.{context}, which sets the layer's step "
            f"context"
        ),
    ):
        layer.decode()
    assert host[0] == 0 and layer.cursor().eq(0).all()


def test_gdn_mixed_batch_does_not_require_forward_decode(trt, monkeypatch):
    """TensorRT-LLM runs a mixed batch's decode rows on the full state (forward_extend), after
    the hook flushed their records: no forward_decode, no error; a pure decode batch then
    replays again."""
    layer = Layer("gdn")
    layer.start()
    layer.decode()
    layer.manager._request_slots[301] = 2
    attn = layer.attn([301, 101, 102])
    attn.num_contexts = 1
    layer.meta.prepare(attn)
    replays = counting(monkeypatch, adapter, "gated_delta_step")
    f64, width = torch.float64, layer.mixer.conv1d.weight.shape[0]
    layer.mixer.forward_core(
        torch.randn(2, width, dtype=f64), torch.randn(2, 4, dtype=f64), torch.randn(2, 4, dtype=f64), attn, layer.meta
    )
    assert replays[0] == 0 and layer.mixer.decode_calls["conventional"] == 1
    assert layer.cursor()[list(LIVE.values())].eq(0).all()  # flushed
    layer.decode()
    assert replays[0] == 1


# ---------------------------------------------------------------- arguments under another name


def test_mamba2_slots_under_another_keyword_raise(trt):
    layer = Layer("mamba2")
    layer.start()
    hooked = layer.mixer._stp_ssu_func

    def renamed(*args, state_batch_indices=None, **kwargs):  # the host renamed the keyword
        return hooked(*args, slot_indices=state_batch_indices, **kwargs)

    layer.mixer._stp_ssu_func = renamed
    before = layer.manager.mamba_layer_cache(0).temporal.clone()
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"Mamba2Mixer layer 0 ran a decode step on TensorRT-LLM {VERSION} without the "
            f"ReplaySSM op: _stp_ssu_func was called without state_batch_indices (the slots of "
            f"the decode rows; other keyword arguments: slot_indices)"
        ),
    ):
        layer.decode()
    assert torch.equal(layer.manager.mamba_layer_cache(0).temporal, before)
    assert layer.cursor().eq(0).all()


def test_mamba2_unknown_keyword_raises_and_stochastic_rounding_is_refused(trt):
    layer = Layer("mamba2")
    layer.start()
    hooked = layer.mixer._stp_ssu_func
    for extra, error, message in (
        (
            {"cache_steps": 1},
            RuntimeError,
            f"TensorRT-LLM {VERSION} without the ReplaySSM op: _stp_ssu_func was called with "
            f"keyword argument(s) cache_steps, which the hook does not know",
        ),
        (
            {"rand_seed": None, "philox_rounds": 10},
            ValueError,
            "philox_rounds, rand_seed (stochastic rounding of an fp16 SSM cache)",
        ),
    ):
        layer.mixer._stp_ssu_func = functools.partial(hooked, **extra)
        with pytest.raises(error, match=re.escape(message)):
            layer.decode()


@pytest.mark.parametrize("missing", ["cache_indices", "mixed_qkv", "a", "b"])
def test_gdn_decode_inputs_under_another_keyword_raise(trt, missing):
    layer = Layer("gdn")
    layer.start()
    hooked = layer.mixer.forward_decode

    def renamed(*args, **kwargs):  # the host passes one input under a new name
        kwargs[f"{missing}_v2"] = kwargs.pop(missing)
        return hooked(*args, **kwargs)

    layer.mixer.forward_decode = renamed
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"Qwen3NextGatedDeltaNet layer 0 ran a decode step on TensorRT-LLM {VERSION} without "
            f"the ReplaySSM op: forward_decode was called without keyword argument(s) {missing} "
            f"(it got: "
        ),
    ) as info:
        layer.decode()
    assert f"{missing}_v2" in str(info.value)
    assert layer.cursor().eq(0).all()


# ---------------------------------------------------------------- cache side


def test_metadata_not_prepared_for_the_batch_raises(trt):
    layer = Layer("kda")
    layer.start()
    layer.decode()
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"KimiKDALinearAttention layer 0 got a Mamba2Metadata that TensorRT-LLM {VERSION} did not prepare for this batch"
        ),
    ):
        layer.forward(layer.attn([102, ft.DUMMY_REQUEST_ID, ft.DUMMY_REQUEST_ID]))


class MetadataNotCallingPrepare(ft.Mamba2Metadata):
    """Host metadata whose prepare fills the slots itself instead of calling
    Mamba2Metadata.prepare (as if KimiK3MambaMetadata dropped its super().prepare call)."""

    def prepare(self, attn_metadata):
        ids = attn_metadata.request_ids
        slots = attn_metadata.kv_cache_manager.get_state_indices(ids, [False] * len(ids))
        self.state_indices[: len(ids)] = torch.tensor(slots, dtype=torch.int32)


def test_metadata_prepared_without_the_hooked_prepare_raises(trt):
    layer = Layer("kda")
    layer.start()
    layer.meta = MetadataNotCallingPrepare(max_batch_size=4)
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"KimiKDALinearAttention layer 0 got a MetadataNotCallingPrepare on which the hooked "
            f"Mamba2Metadata.prepare never ran: ReplaySSM was enabled after the LLM was created, "
            f"or TensorRT-LLM {VERSION} prepares it without calling Mamba2Metadata.prepare"
        ),
    ):
        layer.decode()


class ManagerDroppingExtensions(ft.MambaHybridCacheManagerV2):
    """A host manager that takes aux_cache_extensions but does not keep them."""

    @functools.wraps(ft.MambaHybridCacheManagerV2.__init__)
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "aux_cache_extensions": ()})


class ManagerNotBinding(ft.MambaHybridCacheManagerV2):
    """A host manager that keeps aux_cache_extensions but never binds them to its pool."""

    @functools.wraps(ft.MambaHybridCacheManagerV2.__init__)
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "aux_cache_extensions": ()})
        self.extensions = {e.key: e for e in kwargs["aux_cache_extensions"]}


@pytest.mark.parametrize(
    "cls, missing",
    [
        (ManagerDroppingExtensions, "did not keep the ReplaySSM extension passed in aux_cache_extensions"),
        (ManagerNotBinding, "kept the ReplaySSM extension but did not bind it to its pool"),
    ],
)
def test_manager_that_does_not_take_the_records_raises_at_construction(cls, missing):
    with hooks(**{V2: ("MambaHybridCacheManagerV2", cls)}):
        with pytest.raises(
            RuntimeError, match=re.escape(f"ReplaySSM: {cls.__name__}.__init__ of TensorRT-LLM {VERSION} {missing}")
        ):
            Layer("mamba2", manager_class=cls)
