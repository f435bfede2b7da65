"""Byte and traffic model of the decode caches: pure functions, shared by the planner, the
benchmark, the demo and the pool's tests.

All figures are per sequence (one slot / decode row) per layer, TP-local geometry.

Modes (per SSM layer):
- ``conventional``: one state per sequence, read and written every step.
- ``conventional_spec``: speculative decoding with T tokens verified per step (drafts + 1) the
  conventional way: 1 + T state copies per sequence (the committed state and one snapshot per
  window position, TensorRT-LLM's intermediate_ssm), 1 state read and T written per step.
- ``replay``: ReplaySSM standard decode: checkpoint + L records, and three int32 counters
  (cursor, the kernels' arrivals counter, pending: uncommitted speculative window records).
- ``replay_spec``: ReplaySSM speculative: checkpoint + B + T records (history B, window T).

Conv states: [conv_dim, d_conv - 1] per sequence; the speculative modes keep T - 1 more columns
(the inputs of the window, so that any accepted prefix can be rolled back to), TensorRT-LLM /
vLLM conv layout, in the conv dtype. Our replay ops need no per-step scratch: step inputs and
outputs are activations owned by the engine, and the kernels' per-row counter (``arrivals``) is
part of the cache, counted with the cursors.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, fields

import torch

from .checks import check_positive_int
from .models import MAMBA2, AttentionGeometry, Mamba2Geometry, MLAGeometry
from .registry import family

__all__ = [
    "MODES",
    "SPEC_MODES",
    "CURSOR_BYTES",
    "dtype_size",
    "gate_dtype",
    "state_bytes",
    "record_bytes",
    "conv_width",
    "conv_state_bytes",
    "kv_bytes_per_token",
    "LayerBytes",
    "ssm_layer_bytes",
    "StepTraffic",
    "ssm_layer_step_traffic",
    "Mamba2StepBytes",
    "mamba2_step_bytes",
]

MODES = ("conventional", "conventional_spec", "replay", "replay_spec")
SPEC_MODES = ("conventional_spec", "replay_spec")
REPLAY_MODES = ("replay", "replay_spec")
CURSOR_BYTES = 12  # cursor, arrivals and pending (cache.py), int32 each, per slot per layer


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def gate_dtype(state_dtype: torch.dtype) -> torch.dtype:
    """dtype of the dt (Mamba-2) and g (GDN/KDA) records: fp32, fp64 with a fp64 checkpoint."""
    return torch.float64 if state_dtype == torch.float64 else torch.float32


def _check_mode(owner: str, mode: str, state_dtype: torch.dtype) -> None:
    """``mode`` is one of MODES and holds a ``state_dtype`` state: an fp8 one is a replay
    checkpoint only (no conventional kernel keeps an fp8 state)."""
    if mode not in MODES:
        raise ValueError(f"{owner}: mode is {mode!r}; expected one of {', '.join(MODES)}")
    if state_dtype == torch.float8_e4m3fn and mode not in REPLAY_MODES:
        raise TypeError(
            f"{owner}: state_dtype is float8_e4m3fn in mode {mode}; expected a replay mode "
            f"({', '.join(REPLAY_MODES)}): fp8 is a replay checkpoint only"
        )


def state_bytes(kind: str, geometry, state_dtype: torch.dtype) -> int:
    """One state: ``geometry.state_dims`` (Mamba-2 [nheads, head_dim, d_state]; GDN/KDA
    [v_heads, head_v_dim, head_k_dim]) of a registered SSM layer kind; an fp8 one with its fp32
    scale per row (every dim but the last)."""
    family(kind).check_geometry("state_bytes", geometry)
    dims = geometry.state_dims
    scales = math.prod(dims[:-1]) * 4 if state_dtype == torch.float8_e4m3fn else 0
    return math.prod(dims) * dtype_size(state_dtype) + scales


# The fields of a cache that are not records (an fp8 checkpoint's scales count with the state).
NON_RECORD_FIELDS = ("checkpoint", "cursor", "arrivals", "pending", "checkpoint_scale")


def record_bytes(kind: str, geometry, record_dtype: torch.dtype, state_dtype: torch.dtype) -> int:
    """One record position (one token) of a replay cache: the per-slot bytes of every record
    field of the family's cache class at L = 1 (read off a meta-device cache, so the byte
    model is the layout itself).

    Mamba-2: x [nheads, head_dim], B [ngroups, d_state] (record dtype), dt [nheads] (gate dtype).
    GDN: d [v_heads, head_v_dim], k [k_heads, head_k_dim] (record dtype), g [v_heads].
    KDA: as GDN with g [v_heads, head_k_dim].
    """
    fam = family(kind)
    fam.check_geometry("record_bytes", geometry)
    one = fam.cache.for_geometry(geometry, 1, 1, state_dtype=state_dtype, record_dtype=record_dtype, device="meta")
    records = [getattr(one, f.name) for f in fields(one) if f.name not in NON_RECORD_FIELDS]
    return sum(t.numel() * t.element_size() for t in records)


def conv_width(d_conv: int, spec_tokens: int = 1) -> int:
    """Columns of a conv state: d_conv - 1, plus T - 1 with T tokens verified per step."""
    return d_conv - 1 + spec_tokens - 1


def conv_state_bytes(geometry, conv_dtype: torch.dtype, spec_tokens: int = 1) -> int:
    """One conv state [conv_dim, conv_width(d_conv, spec_tokens)]."""
    return geometry.conv_dim * conv_width(geometry.d_conv, spec_tokens) * dtype_size(conv_dtype)


def kv_bytes_per_token(geometry, kv_dtype: torch.dtype) -> int:
    """KV cache bytes one token takes in one attention layer (GQA: K and V; MLA: the latent)."""
    if not isinstance(geometry, (AttentionGeometry, MLAGeometry)):
        raise ValueError(
            f"kv_bytes_per_token: geometry is {type(geometry).__name__}; expected AttentionGeometry or MLAGeometry"
        )
    return geometry.kv_elements_per_token * dtype_size(kv_dtype)


@dataclass(frozen=True)
class LayerBytes:
    """Bytes one sequence holds in one SSM layer: conv state(s), state(s) or checkpoint,
    records, cursors."""

    conv: int
    state: int
    records: int
    cursors: int

    @property
    def total(self) -> int:
        return self.conv + self.state + self.records + self.cursors


def _check_lengths(owner: str, mode: str, buffer_len: int, spec_tokens: int) -> None:
    for name, v in (("buffer_len", buffer_len), ("spec_tokens", spec_tokens)):
        check_positive_int(owner, name, v)
    if mode == "replay_spec" and buffer_len < spec_tokens:
        raise ValueError(f"{owner}: buffer_len (history B) = {buffer_len} < spec_tokens (T) = {spec_tokens}; expected B >= T")


def ssm_layer_bytes(
    kind: str,
    geometry,
    mode: str,
    *,
    buffer_len: int,
    spec_tokens: int,
    state_dtype: torch.dtype,
    record_dtype: torch.dtype,
    conv_dtype: torch.dtype,
) -> LayerBytes:
    """Bytes per sequence of one SSM layer in ``mode`` (see the module docstring).

    Args:
        buffer_len: L (``replay``) or the history B (``replay_spec``); unused otherwise.
        spec_tokens: T, tokens verified per step (drafts + 1) in the speculative modes.
    """
    owner = "ssm_layer_bytes"
    _check_mode(owner, mode, state_dtype)
    _check_lengths(owner, mode, buffer_len, spec_tokens)
    T = spec_tokens if mode in SPEC_MODES else 1
    conv = conv_state_bytes(geometry, conv_dtype, T)
    state = state_bytes(kind, geometry, state_dtype)
    if mode == "conventional":
        return LayerBytes(conv=conv, state=state, records=0, cursors=0)
    if mode == "conventional_spec":
        return LayerBytes(conv=conv, state=(1 + T) * state, records=0, cursors=0)
    positions = buffer_len if mode == "replay" else buffer_len + T
    return LayerBytes(
        conv=conv,
        state=state,
        records=positions * record_bytes(kind, geometry, record_dtype, state_dtype),
        cursors=CURSOR_BYTES,
    )


@dataclass(frozen=True)
class StepTraffic:
    """HBM bytes one sequence moves in one decode step (one verify step of T tokens in the
    speculative modes), averaged over steps."""

    state_read: float
    state_written: float
    records_read: float
    records_written: float
    conv_read: float
    conv_written: float

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def __add__(self, other: "StepTraffic") -> "StepTraffic":
        return StepTraffic(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, k: float) -> "StepTraffic":
        return StepTraffic(*(getattr(self, f.name) * k for f in fields(self)))


def _replay_window(state: float, record: float, L: int):
    """Standard decode over one window of L steps, cursors 0 .. L-1: every step reads the
    checkpoint; step w reads w records; steps 0 .. L-2 append one; step L-1 (the flush) writes
    the checkpoint. Returns per-step means (state_read, state_written, records_read,
    records_written), which is what a batch with cursors spread over [0, L) moves per row."""
    return state, state / L, (L - 1) / 2.0 * record, record * (L - 1) / L


def ssm_layer_step_traffic(
    kind: str,
    geometry,
    mode: str,
    *,
    buffer_len: int,
    spec_tokens: int,
    accepted: float,
    state_dtype: torch.dtype,
    record_dtype: torch.dtype,
    conv_dtype: torch.dtype,
) -> StepTraffic:
    """HBM bytes per sequence per step of one SSM layer in ``mode`` (cache traffic only: the
    step's inputs and outputs are not counted).

    - conventional: read and write the state.
    - conventional_spec: read the state, write T snapshots (issue 4's baseline).
    - replay: :func:`_replay_window` over L = buffer_len.
    - replay_spec: with L = B + T records a row flushes when its committed history reaches B
      records (reference/spec.py); committing ``accepted`` tokens per step, that is once per
      B / accepted steps, and a verify reads B / 2 history records on average [a mean-field
      approximation of the integer flush cycle]; every verify
      reads the checkpoint and writes T window records.
    - all modes read and write the conv state once.

    Args:
        accepted: mean tokens accepted per verify step, in [1, T] (replay_spec only).
    """
    owner = "ssm_layer_step_traffic"
    _check_mode(owner, mode, state_dtype)
    _check_lengths(owner, mode, buffer_len, spec_tokens)
    T = spec_tokens if mode in SPEC_MODES else 1
    if mode == "replay_spec" and not 1 <= accepted <= T:
        raise ValueError(f"{owner}: accepted is {accepted!r}; expected 1 <= accepted <= spec_tokens = {T}")
    conv = conv_state_bytes(geometry, conv_dtype, T)
    state = state_bytes(kind, geometry, state_dtype)
    record = record_bytes(kind, geometry, record_dtype, state_dtype)
    if mode == "conventional":
        cache = (state, state, 0.0, 0.0)
    elif mode == "conventional_spec":
        cache = (state, T * state, 0.0, 0.0)
    elif mode == "replay":
        cache = _replay_window(state, record, buffer_len)
    else:
        B = buffer_len
        cache = (state, state * accepted / B, B / 2.0 * record, T * record)
    return StepTraffic(*map(float, cache), conv_read=float(conv), conv_written=float(conv))


@dataclass(frozen=True)
class Mamba2StepBytes:
    """HBM bytes one row moves in one decode step, averaged over a window of L steps.

    ``state_read``/``state_written``: checkpoint (or state) bytes; ``records_read``/
    ``records_written``: record bytes; ``io``: step inputs and output (x, dt, B, C, z, y).
    """

    state_read: float
    state_written: float
    records_read: float
    records_written: float
    io: float

    @property
    def total(self) -> float:
        return self.state_read + self.state_written + self.records_read + self.records_written + self.io


def mamba2_step_bytes(
    route: str,
    *,
    nheads: int,
    head_dim: int,
    d_state: int,
    ngroups: int,
    L: int,
    state_dtype: torch.dtype,
    act_dtype: torch.dtype,
    has_z: bool = False,
) -> Mamba2StepBytes:
    """Bytes per row per step of the conventional (``"decode_step"``) or replay route of one
    Mamba-2 layer, step inputs and output included (the benchmark's and demo's model).

    Replay: :func:`_replay_window`; records hold x and B in the activation dtype and dt in the
    gate dtype (fp32, fp64 with a fp64 cache). An fp8 checkpoint (replay only) moves its row
    scales with its codes (:func:`state_bytes`).
    """
    layer = Mamba2Geometry(nheads, head_dim, d_state, ngroups, d_conv=1)  # d_conv: not in a record
    state = state_bytes(MAMBA2, layer, state_dtype)
    a = dtype_size(act_dtype)
    io = nheads * head_dim * a * (3 if has_z else 2) + nheads * a + 2 * ngroups * d_state * a
    if route == "decode_step":
        _check_mode("mamba2_step_bytes", "conventional", state_dtype)
        return Mamba2StepBytes(state, state, 0.0, 0.0, io)
    if route != "replay_step":
        raise ValueError(f"mamba2_step_bytes: route is {route!r}; expected 'decode_step' or 'replay_step'")
    record = record_bytes(MAMBA2, layer, act_dtype, state_dtype)
    return Mamba2StepBytes(*_replay_window(state, record, L), io=io)
