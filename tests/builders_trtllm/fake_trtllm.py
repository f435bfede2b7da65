"""A behavioural stand-in for the TensorRT-LLM surfaces the hooks touch, on the CPU.

Each class keeps the pinned names and parameter lists (api.REQUIREMENTS) and does, in plain
PyTorch, what the read source does at those points: the V2 manager builds the build context,
validates and binds extensions, allocates per-(layer, role) pool pages with a coalesced slot
stride, resets context slots through extensions and fresh generation slots through its
strategy; ``Mamba2Metadata.prepare`` fills state indices; the mixers run conventional decode
(the role FlashInfer / Triton play there) and call the functions the hooks replace the way
TensorRT-LLM calls them. Decode inputs are passed in directly instead of being projected from
hidden states (except for KDA, whose hooked decode starts at the projections).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import types

from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from torch import nn

from trtllm_replayssm.ops import gdn_decode_step, kda_decode_step, mamba2_decode_step
from trtllm_replayssm_builders.trtllm.steps import causal_conv_step

DUMMY_REQUEST_ID = 2**63 - 2


# ----------------------------------------------------------------------------- cache side


class DataRole(str):
    pass


@dataclasses.dataclass(frozen=True)
class BufferConfig:
    role: DataRole
    size: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class MambaCacheBuildContext:
    layer_mask: tuple
    mamba_pp_layers: tuple
    conv_state_shape: tuple
    ssm_state_shape: tuple
    conv_state_dtype: torch.dtype
    ssm_state_dtype: torch.dtype
    slot_capacity: Optional[int]
    spec_config: object
    backend: str
    conv_section_dims: tuple
    conv_state_layout: str


class MambaAuxCacheExtension(abc.ABC):
    @property
    @abc.abstractmethod
    def key(self): ...

    @property
    @abc.abstractmethod
    def data_roles(self): ...

    def validate(self, context): ...

    @abc.abstractmethod
    def buffer_configs(self, context, layer_id): ...

    def bytes_per_slot(self, context, layer_id):
        return sum(c.size for c in self.buffer_configs(context, layer_id))

    def bind(self, context, manager): ...

    def get_layer_cache(self, layer_idx):
        return None

    def reset_slots(self, slots, host_slots): ...

    def on_state_transfer_complete(self, request_ids, manager): ...

    def iter_buffers(self):
        return ()

    def shutdown(self): ...


class MambaStateUpdateStrategy:
    def __init__(self):
        self.resets: List[list] = []

    def reset_slots(self, slots, host_slots):
        self.resets.append(list(host_slots))

    def relocate_slots(self, old_slots, new_slots):
        pass


ESTIMATORS: Dict[str, object] = {}


def register_mamba_aux_cache_estimator(key, estimator):
    if ESTIMATORS.get(key, estimator) is not estimator:
        raise ValueError(f"Duplicate Mamba auxiliary cache estimator: {key!r}")
    ESTIMATORS[key] = estimator


@dataclasses.dataclass
class LayerCache:
    conv: torch.Tensor
    temporal: torch.Tensor


class MambaHybridCacheManagerV2:
    def __init__(
        self,
        mamba_d_state,
        mamba_d_conv,
        mamba_num_heads,
        mamba_n_groups,
        mamba_head_dim,
        mamba_num_layers,
        mamba_layer_mask,
        mamba_cache_dtype,
        mamba_ssm_cache_dtype,
        kv_cache_config,
        kv_cache_type=None,
        *,
        max_batch_size,
        mapping,
        spec_config=None,
        is_draft=False,
        conv_state_layout="x_b_c",
        state_update_strategy=None,
        aux_cache_extensions=(),
    ):
        tp = 1 if mapping.enable_attention_dp else mapping.tp_size
        d_inner, grouped = mamba_head_dim * mamba_num_heads, mamba_n_groups * mamba_d_state
        sections = (
            (d_inner // tp, grouped // tp, grouped // tp)
            if conv_state_layout == "x_b_c"
            else (grouped // tp, grouped // tp, d_inner // tp)
        )
        self.spec_config = spec_config
        self.mamba_pp_layers = [i for i, m in enumerate(mamba_layer_mask) if m]
        self.layer_offsets = {i: i for i in range(len(mamba_layer_mask))}
        self.mamba_layer_offsets = {i: j for j, i in enumerate(self.mamba_pp_layers)}
        self.ssm_state_shape = (mamba_num_heads // tp, mamba_head_dim, mamba_d_state)
        self.conv_state_shape = ((d_inner + 2 * grouped) // tp, mamba_d_conv - 1)
        self.strategy = state_update_strategy or MambaStateUpdateStrategy()
        self.extensions = {e.key: e for e in aux_cache_extensions}
        self.num_slots = max_batch_size + 1  # + the padding slot
        context = MambaCacheBuildContext(
            layer_mask=tuple(mamba_layer_mask),
            mamba_pp_layers=tuple(self.mamba_pp_layers),
            conv_state_shape=self.conv_state_shape,
            ssm_state_shape=self.ssm_state_shape,
            conv_state_dtype=mamba_cache_dtype,
            ssm_state_dtype=mamba_ssm_cache_dtype,
            slot_capacity=None,
            spec_config=spec_config,
            backend="v2",
            conv_section_dims=sections,
            conv_state_layout=conv_state_layout,
        )
        for e in aux_cache_extensions:
            e.validate(context)
        # One page per slot holds every layer's buffers of one role (a coalesced slot stride).
        self._pages = {}
        self.page_bytes = 0
        for layer in self.mamba_pp_layers:
            self.page_bytes += (
                math.prod(self.ssm_state_shape) * mamba_ssm_cache_dtype.itemsize
                + math.prod(self.conv_state_shape) * mamba_cache_dtype.itemsize
            )
            for e in aux_cache_extensions:
                self.page_bytes += e.bytes_per_slot(context, layer)
                for c in e.buffer_configs(context, layer):
                    self._pages.setdefault(c.role, []).append((layer, c.size))
        self.all_ssm_states = [
            self._get_state_buffer(i, "ssm", mamba_ssm_cache_dtype, list(self.ssm_state_shape)) for i in self.mamba_pp_layers
        ]
        self.all_conv_states = [
            self._get_state_buffer(i, "conv", mamba_cache_dtype, list(self.conv_state_shape)) for i in self.mamba_pp_layers
        ]
        context = dataclasses.replace(context, slot_capacity=self.num_slots)
        for e in aux_cache_extensions:
            e.bind(context, self)
        self._request_slots: Dict[int, int] = {}

    def _get_state_buffer(self, local_layer_idx, role, dtype, state_shape):
        n = math.prod(state_shape)
        scale = len(self.mamba_pp_layers)
        position = self.mamba_pp_layers.index(local_layer_idx)
        raw = torch.zeros(self.num_slots * scale * n, dtype=dtype)
        strides = [math.prod(state_shape[i + 1 :]) for i in range(len(state_shape))]
        return raw.as_strided([self.num_slots] + list(state_shape), [scale * n] + strides, position * n)

    def get_aux_cache_extension(self, key):
        return self.extensions.get(key)

    def get_state_update_strategy(self):
        return self.strategy

    def get_state_indices(self, request_ids, is_padding):
        return [self._request_slots[r] for r in request_ids]

    def is_speculative(self):
        return self.spec_config is not None

    def mamba_layer_cache(self, layer_idx):
        j = self.mamba_layer_offsets[layer_idx]
        return LayerCache(conv=self.all_conv_states[j], temporal=self.all_ssm_states[j])

    # -- the executor's calls (prepare_resources / add_dummy_requests) ----------------------
    def schedule(self, context_requests, generation_requests):
        """Slots for the requests; context requests' slots reset through the extensions
        (_reset_context_mamba_slots), fresh generation slots through the strategy."""
        for rid, slot in list(context_requests.items()) + list(generation_requests.items()):
            fresh = rid not in self._request_slots
            self._request_slots[rid] = slot
            if fresh and rid in generation_requests:
                self.strategy.reset_slots(torch.tensor([slot]), [slot])
        slots = list(context_requests.values())
        for e in self.extensions.values():
            e.reset_slots(torch.tensor(slots, dtype=torch.long), slots)

    def free(self, rid):
        self._request_slots.pop(rid)


# ----------------------------------------------------------------------------- metadata


class Mamba2Metadata:
    def __init__(self, max_batch_size, chunk_size=128):
        self.max_batch_size = max_batch_size
        self.state_indices = torch.zeros(max_batch_size, dtype=torch.int32)

    def prepare(self, attn_metadata):
        ids = attn_metadata.request_ids
        is_padding = [r == DUMMY_REQUEST_ID for r in ids]
        indices = attn_metadata.kv_cache_manager.get_state_indices(ids, is_padding)
        self.state_indices[: len(ids)] = torch.tensor(indices, dtype=torch.int32)


def attn_metadata_for(manager, request_ids, num_contexts=0):
    return types.SimpleNamespace(
        kv_cache_manager=manager,
        request_ids=list(request_ids),
        num_contexts=num_contexts,
        seq_lens=torch.ones(len(request_ids), dtype=torch.int32),
        mamba_metadata=None,
    )


# ----------------------------------------------------------------------------- mixers


class Mamba2Mixer(nn.Module):
    """Decode only; ``hidden_states`` is (x, dt, B, C) of the decode rows."""

    def __init__(self, *, nheads, head_dim, d_state, n_groups, layer_idx, config=None, dtype=torch.float64):
        super().__init__()
        self.layer_idx, self.head_dim, self.d_state = layer_idx, head_dim, d_state
        self.A = nn.Parameter(-(torch.rand(nheads, dtype=dtype) + 0.5), requires_grad=False)
        self.D = nn.Parameter(torch.randn(nheads, dtype=dtype), requires_grad=False)
        self.dt_bias = nn.Parameter(0.3 * torch.randn(nheads, dtype=dtype), requires_grad=False)
        self._select_mamba_kernels(None, None, head_dim)
        self.original_ssu_calls = 0

    def _select_mamba_kernels(self, quant_config, spec_config, head_dim):
        self._stp_ssu_func = self._conventional_ssu

    def _conventional_ssu(
        self, state, x, dt, A, B, C, D, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None, out=None
    ):
        self.original_ssu_calls += 1
        return mamba2_decode_step(
            state,
            x,
            dt[..., 0],
            A[:, 0, 0].contiguous(),
            B,
            C,
            slot_ids=state_batch_indices,
            D=D[:, 0].contiguous(),
            z=z,
            dt_bias=dt_bias[:, 0].contiguous(),
            dt_softplus=dt_softplus,
            out=out,
        )

    def forward(self, hidden_states, attn_metadata, mamba_metadata, spec_metadata=None, lora_params=None):
        x, dt, B, C = hidden_states
        batch = attn_metadata.seq_lens.shape[0]
        num_prefills = attn_metadata.num_contexts
        state_indices_d = mamba_metadata.state_indices[num_prefills:batch]
        ssm_states = attn_metadata.kv_cache_manager.mamba_layer_cache(self.layer_idx).temporal
        expand = lambda t: t[:, None].expand(-1, self.head_dim)  # noqa: E731
        out = torch.zeros_like(x)
        self._stp_ssu_func(
            ssm_states,
            x,
            dt[:, :, None].expand(-1, -1, self.head_dim),
            self.A[:, None, None].expand(-1, self.head_dim, self.d_state),
            B,
            C,
            expand(self.D),
            z=None,
            dt_bias=expand(self.dt_bias),
            dt_softplus=True,
            state_batch_indices=state_indices_d,
            out=out,
        )
        return out


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None, conv_state_indices=None):
    """Single-token conv update of rows ``conv_state_indices`` (TensorRT-LLM's op contract)."""
    slots = conv_state_indices.long()
    y, rows = causal_conv_step(conv_state[slots], x, weight, bias)
    conv_state[slots] = rows
    return y


class Qwen3NextGatedDeltaNet(nn.Module):
    """``forward_core`` takes the projected (mixed_qkv, a, b); prefill rows are not modelled:
    a batch with ``num_contexts`` > 0 runs its decode rows conventionally on the full state, as
    ``forward_extend`` does."""

    def __init__(
        self,
        model_config,
        aux_stream=None,
        layer_idx=None,
        *,
        k_heads=2,
        v_heads=4,
        head_k_dim=8,
        head_v_dim=8,
        d_conv=4,
        dtype=torch.float64,
    ):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_k_heads_per_tp, self.num_v_heads_per_tp = k_heads, v_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim_per_tp = k_heads * head_k_dim
        conv_dim = 2 * self.key_dim_per_tp + v_heads * head_v_dim
        self.conv1d = nn.Linear(d_conv, conv_dim, bias=False, dtype=dtype)
        self.activation = "silu"
        self.A_log = nn.Parameter(torch.rand(v_heads, dtype=dtype).log(), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.randn(v_heads, dtype=dtype), requires_grad=False)
        self.decode_calls = {"conventional": 0}

    def _gates(self, a, b):
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)
        return g, b.sigmoid()

    def _split(self, mixed):
        kd, batch = self.key_dim_per_tp, mixed.shape[0]
        return (
            mixed[:, :kd].reshape(batch, -1, self.head_k_dim),
            mixed[:, kd : 2 * kd].reshape(batch, -1, self.head_k_dim),
            mixed[:, 2 * kd :].reshape(batch, -1, self.head_v_dim),
        )

    def forward_core(self, mixed_qkv, a, b, attn_metadata, mamba_metadata, spec_metadata=None, output=None):
        batch = attn_metadata.seq_lens.shape[0]
        num_prefills = attn_metadata.num_contexts
        cache = attn_metadata.kv_cache_manager.mamba_layer_cache(self.layer_idx)
        indices = mamba_metadata.state_indices[:batch]
        if num_prefills > 0:  # forward_extend: the full state, in place
            self.decode_calls["conventional"] += 1
            rows = indices[num_prefills:]
            mixed = causal_conv1d_update(
                mixed_qkv, cache.conv, self.conv1d.weight, None, self.activation, conv_state_indices=rows
            )
            g, beta = self._gates(a, b)
            o = gdn_decode_step(cache.temporal, *self._split(mixed), g, beta, slot_ids=rows)
            return o[None]
        return self.forward_decode(
            cache.conv,
            cache.temporal,
            None,
            spec_metadata=spec_metadata,
            output=output,
            mixed_qkv=mixed_qkv,
            a=a,
            b=b,
            cache_indices=indices,
            num_decodes=batch,
        )

    def forward_decode(
        self,
        conv_states,
        ssm_states,
        query_start_loc_long,
        spec_metadata=None,
        intermediate_conv_states=None,
        intermediate_ssm_states=None,
        is_target_verify=False,
        output=None,
        **kwargs,
    ):
        self.decode_calls["conventional"] += 1
        mixed = causal_conv1d_update(
            kwargs["mixed_qkv"],
            conv_states,
            self.conv1d.weight,
            None,
            self.activation,
            conv_state_indices=kwargs["cache_indices"],
        )
        g, beta = self._gates(kwargs["a"], kwargs["b"])
        return gdn_decode_step(ssm_states, *self._split(mixed), g, beta, slot_ids=kwargs["cache_indices"])[None]


class KimiKDALinearAttention(nn.Module):
    """Decode rows only; the reference decode (``forward_decode``) is conventional."""

    def __init__(self, cfg, layer_idx, mapping=None, *, heads=2, head_dim=8, hidden=16, width=4, dtype=torch.float64):
        super().__init__()
        self.layer_idx, self.num_heads, self.head_dim = layer_idx, heads, head_dim
        self.proj_size = d = heads * head_dim
        self.gate_lower_bound = None
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, d, bias=False, dtype=dtype) for _ in range(3))
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (
            nn.Conv1d(d, d, width, groups=d, bias=False, dtype=dtype) for _ in range(3)
        )
        self.f_a_proj = nn.Linear(hidden, head_dim, bias=False, dtype=dtype)
        self.f_b_proj = nn.Linear(head_dim, d, bias=False, dtype=dtype)
        self.b_proj = nn.Linear(hidden, heads, bias=False, dtype=dtype)
        self.g_proj = nn.Linear(hidden, d, bias=False, dtype=dtype)
        self.A_log = nn.Parameter(torch.rand(heads, dtype=dtype).log(), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.randn(d, dtype=dtype), requires_grad=False)

    def _forward_impl(self, hidden_states, attn_metadata, output=None):
        meta = attn_metadata.mamba_metadata
        cache = attn_metadata.kv_cache_manager.mamba_layer_cache(self.layer_idx)
        batch = attn_metadata.seq_lens.shape[0]
        return self.forward_decode(hidden_states, cache.conv, cache.temporal, meta.state_indices[:batch], meta, output=output)

    def forward_decode(
        self,
        x2d,
        conv_pool,
        ssm_pool,
        slot_indices,
        mamba_metadata=None,
        layer_cache=None,
        ssm_state_indices=None,
        output=None,
    ):
        x, d = x2d.unsqueeze(1), self.proj_size
        slots = slot_indices.long()
        rows = conv_pool[slots]
        convolved, new = [], []
        for j, (proj, conv) in enumerate(
            ((self.q_proj, self.q_conv1d), (self.k_proj, self.k_conv1d), (self.v_proj, self.v_conv1d))
        ):
            window = torch.cat([rows[:, j * d : (j + 1) * d], proj(x).transpose(1, 2)], dim=2)
            # depthwise causal conv of the last token (F.conv1d is slow for float64 on the CPU)
            convolved.append(F.silu((window * conv.weight[:, 0, :]).sum(-1)))
            new.append(window[:, :, 1:])
        conv_pool[slots] = torch.cat(new, dim=1)
        g = -self.A_log.exp()[:, None] * F.softplus(
            self.f_b_proj(self.f_a_proj(x))[:, 0].view(-1, self.num_heads, self.head_dim)
            + self.dt_bias.view(self.num_heads, self.head_dim)
        )
        beta = self.b_proj(x)[:, 0].sigmoid()
        q, k, v = (t.view(-1, self.num_heads, self.head_dim) for t in convolved)
        o = kda_decode_step(ssm_pool, q, k, v, g, beta, slot_ids=slot_indices)
        return self._store_core(self._output_gate(x, o.unsqueeze(1)), output)

    def _output_gate(self, x, o, onorm_g=None):
        gate = self.g_proj(x).reshape(-1, self.num_heads, self.head_dim)
        return o.reshape(-1, self.num_heads, self.head_dim) * gate.sigmoid()

    def _store_core(self, core, output):
        if output is None:
            return core
        output.copy_(core)
        return output


# ----------------------------------------------------------------------------- modules


def modules(version="1.3.0rc26"):
    """Import path -> stand-in module, for api.check_api / adapter.install."""

    def module(path, **names):
        m = types.ModuleType(path)
        m.__dict__.update(names)
        return m

    common = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager"
    found = [
        module("tensorrt_llm", __version__=version),
        module("tensorrt_llm.runtime.kv_cache_manager_v2", DataRole=DataRole, BufferConfig=BufferConfig),
        module(
            f"{common}.common",
            MambaAuxCacheExtension=MambaAuxCacheExtension,
            MambaCacheBuildContext=MambaCacheBuildContext,
            MambaStateUpdateStrategy=MambaStateUpdateStrategy,
            register_mamba_aux_cache_estimator=register_mamba_aux_cache_estimator,
        ),
        module(f"{common}.mamba_cache_manager_v2", MambaHybridCacheManagerV2=MambaHybridCacheManagerV2),
        module(
            "tensorrt_llm._torch.modules.mamba.mamba2_metadata",
            Mamba2Metadata=Mamba2Metadata,
            CUDA_GRAPH_DUMMY_REQUEST_ID=DUMMY_REQUEST_ID,
        ),
        module("tensorrt_llm._torch.modules.mamba.mamba2_mixer", Mamba2Mixer=Mamba2Mixer),
        # The hook finds causal_conv1d_update in the mixer class's own module (this file).
        module(
            "tensorrt_llm._torch.modules.mamba.gdn_mixer",
            Qwen3NextGatedDeltaNet=Qwen3NextGatedDeltaNet,
            causal_conv1d_update=causal_conv1d_update,
        ),
        module("tensorrt_llm._torch.modules.kimi_kda.kimi_kda_mixer", KimiKDALinearAttention=KimiKDALinearAttention),
    ]
    return {m.__name__: m for m in found}
