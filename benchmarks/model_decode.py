"""Model-level decode step of a Nemotron-3-Super-like hybrid: host decode vs our conventional
kernel vs ReplaySSM, and the share of the step spent in the SSM layers (GPU).

The stack is a transformers ``NemotronHForCausalLM`` with random weights (bf16; SSM states fp32
as the model keeps them): hidden 4096, Mamba-2 layers with Nemotron-3-Super's geometry (128
heads of 64, d_state 128, 8 groups, conv 4) and one attention layer (32 heads, 2 KV heads,
head_dim 128), pattern ``MMMM*`` by default, no MLP / MoE layers. The vocabulary is cut to 8192
so the LM head does not swamp the step (the real 131072-entry head is not what is compared).
Weights use initializer_range 0.1 without residual down-scaling, so the SSM layers move the
logits and the refcheck below can fail (with the library default they barely do).

Routes, all through the same transformers modules (the hook swaps only the recurrent step):
  host         transformers' own Mamba-2 decode (its PyTorch selective_state_update when
               mamba_ssm is not installed, as on the H200)
  decode_step  enable_replayssm(route="decode_step"): trtllm_replayssm's conventional kernel
  replay_step  enable_replayssm(): ReplaySSM, L records
Refcheck, once per route before any timing: on a float32 copy of the model, the first decode
step's logits after the same prompt (batch --refcheck-batch) must equal the host's to
--refcheck-tol relative to their scale (measured: 8e-6). It is done in float32 because this random
bf16 model is ill-conditioned: host and our kernels in bf16 both differ from the float32 logits
by O(1) (measured 1.8 relative, CPU, batch 2) and by 0.14 from each other, so a bf16 comparison
cannot tell a bug from rounding. Per (batch, route): a fresh StaticCache; prefill of --prompt
tokens on the host path (chunk size = prompt); one eager decode step; then one decode step (greedy token fed back, KV position advanced on the device) captured in a
CUDA graph and replayed --steps times (a multiple of L: flushes at their real share; every row
flushes on the same step), median of 5 repetitions of the mean step time. The SSM time is a
second graph running only the SSM mixers' decode on a fixed hidden state (same caches); the
share is its time over the step's. Without CUDA (or if capture fails, which is printed) the
steps run eagerly.

    python benchmarks/model_decode.py                    # batch 64 and 256, L 16
    python benchmarks/model_decode.py --batch 256 --L 8 16 32
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT]

if importlib.util.find_spec("trtllm_replayssm_builders") is None:  # a checkout: builders/
    _spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_builders",
        os.path.join(ROOT, "builders", "__init__.py"),
        submodule_search_locations=[os.path.join(ROOT, "builders")],
    )
    sys.modules["trtllm_replayssm_builders"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["trtllm_replayssm_builders"])

from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm

ROUTES = ("host", "decode_step", "replay_step")
# Nemotron-3-Super-120B (trtllm_replayssm.models.PRESETS["nemotron-3-super-120b"]).
SUPER = dict(
    hidden_size=4096,
    mamba_num_heads=128,
    mamba_head_dim=64,
    ssm_state_size=128,
    n_groups=8,
    conv_kernel=4,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=128,
)
TINY = dict(
    hidden_size=64,
    mamba_num_heads=8,
    mamba_head_dim=16,
    ssm_state_size=16,
    n_groups=2,
    conv_kernel=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}


def build_model(pattern: str, geometry: dict, prompt: int, vocab: int, device):
    import transformers as hf

    config = hf.NemotronHConfig(
        vocab_size=vocab,
        layers_block_type=[_BLOCKS[c] for c in pattern],
        chunk_size=prompt,
        intermediate_size=4 * geometry["hidden_size"],
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
        use_cache=True,
        initializer_range=0.1,
        rescale_prenorm_residual=False,
        **geometry,
    )
    with torch.device(device):
        model = hf.NemotronHForCausalLM(config)
    return model.to(torch.bfloat16).eval()


class Decoder:
    """One route's decode of ``batch`` sequences: prefilled StaticCache, static token buffer,
    ``step()`` (a whole-model decode step) and ``ssm_step()`` (the SSM mixers alone).

    ``step`` hands the model its attention mask and positions from device buffers it advances
    itself (NemotronH takes a per-layer-kind mask dict, as generate() passes it under a static
    cache), so nothing in a step reads a device value on the host and the step can be captured.
    """

    def __init__(self, model, batch: int, prompt: int, max_len: int, seed: int):
        import transformers as hf

        self.model = model
        device = next(model.parameters()).device
        g = torch.Generator(device="cpu").manual_seed(seed)
        ids = torch.randint(3, model.config.vocab_size, (batch, prompt), generator=g).to(device)
        self.cache = hf.StaticCache(config=model.config, max_cache_len=max_len)
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=self.cache, use_cache=True)
        self.token = out.logits[:, -1:].argmax(-1)
        self.position = torch.full((batch, 1), prompt, dtype=torch.long, device=device)
        self.kv_index = torch.arange(max_len, device=device)
        self.mask = torch.zeros(batch, 1, 1, max_len, dtype=torch.bool, device=device)
        self.logits = torch.empty_like(out.logits[:, -1])
        self.mixers = [b.mixer for b in model.model.layers if b.block_type == "linear_attention"]
        self.hidden = torch.randn(batch, 1, model.config.hidden_size, generator=g).to(device, torch.bfloat16)

    @torch.no_grad()
    def step(self) -> None:
        self.mask.copy_((self.kv_index <= self.position[:, :, None, None]))
        masks = {"full_attention": self.mask, "linear_attention": None}
        logits = self.model(
            input_ids=self.token, past_key_values=self.cache, use_cache=True, attention_mask=masks, position_ids=self.position
        ).logits
        self.logits.copy_(logits[:, -1])
        self.token.copy_(logits[:, -1:].argmax(-1))
        self.position.add_(1)

    @torch.no_grad()
    def ssm_step(self) -> None:
        for mixer in self.mixers:
            mixer(self.hidden, cache_params=self.cache)


def time_per_call(fn, calls: int, reps: int = 5) -> tuple:
    """(median seconds per call, how): a CUDA graph of one call replayed ``calls`` times, or eager
    calls where there is no CUDA or the capture fails (the reason is returned)."""
    if not torch.cuda.is_available():
        return _time_eager(fn, calls, reps), "eager (no CUDA)"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as e:  # printed, then timed eagerly
        torch.cuda.synchronize()
        return _time_eager(fn, calls, reps), f"eager (capture failed: {type(e).__name__}: {str(e)[:80]})"
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / calls)
    del graph
    return statistics.median(samples), "cuda graph"


def _time_eager(fn, calls: int, reps: int) -> float:
    import time

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    samples = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t) / calls)
    return statistics.median(samples)


def first_step_logits(model, route: str, L: int, batch: int, args) -> torch.Tensor:
    """float32 logits of the first decode step after the prompt, on ``route`` (fresh cache)."""
    if route != "host":
        enable_replayssm(model, buffer_len=L, route=route)
    try:
        dec = Decoder(model, batch, args.prompt, args.prompt + 1, args.seed)
        dec.step()
        return dec.logits.float().clone()
    finally:
        disable_replayssm(model)


def refcheck(model, cases, args) -> dict:
    """(route, L) -> max |logits - host logits| / max |host logits| of the first decode step, on a
    float32 copy of ``model`` at batch ``args.refcheck_batch``."""
    model32 = copy.deepcopy(model).float()
    ref = first_step_logits(model32, "host", 0, args.refcheck_batch, args)
    errors = {}
    for route, L in cases:
        got = first_step_logits(model32, route, L, args.refcheck_batch, args)
        errors[route, L] = float((got - ref).abs().max() / ref.abs().max())
    del model32
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return errors


def run_case(model, route: str, batch: int, L: int, args, err: float) -> dict:
    """Times ``route`` at ``batch`` (``err``: its refcheck); returns the row dict."""
    row = dict(batch=batch, route=route, L=L if route == "replay_step" else None, refcheck=err)
    if err > args.refcheck_tol:
        print(f"# refcheck failed: {route} L {L}: float32 first-step logits off by {err:.2e}; not timed")
        return row
    if route != "host":
        enable_replayssm(model, buffer_len=L, route=route)
    try:
        # KV room: prompt, first step, warm-up / capture steps and every timed replay.
        max_len = args.prompt + 8 + 5 * args.steps * 2
        dec = Decoder(model, batch, args.prompt, max_len, args.seed)
        dec.step()
        row["step_s"], row["step_how"] = time_per_call(dec.step, args.steps)
        row["ssm_s"], row["ssm_how"] = time_per_call(dec.ssm_step, args.steps)
        row["ssm_share"] = row["ssm_s"] / row["step_s"]
        del dec
        return row
    finally:
        disable_replayssm(model)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--L", type=int, nargs="+", default=[16])
    ap.add_argument("--pattern", default="MMMM*", help="M Mamba-2, * attention, - MLP (default: MMMM*)")
    ap.add_argument(
        "--geometry", choices=["super", "tiny"], default="super", help="super: Nemotron-3-Super layers; tiny: a CPU smoke test"
    )
    ap.add_argument("--prompt", type=int, default=16, help="prefill tokens = chunk size (default: 16)")
    ap.add_argument("--steps", type=int, default=64, help="decode steps per timing (default: 64)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument(
        "--refcheck-tol", type=float, default=1e-4, help="float32 first-step logits vs the host's, relative to their scale"
    )
    ap.add_argument("--refcheck-batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", os.path.join(HERE, "results")))
    args = ap.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    geometry = SUPER if args.geometry == "super" else TINY
    model = build_model(args.pattern, geometry, args.prompt, args.vocab, device)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    import transformers

    print(
        f"# bench model_decode | {datetime.date.today()} | {gpu} | torch {torch.__version__} | "
        f"transformers {transformers.__version__} | NemotronH {args.pattern} {args.geometry} bf16, "
        f"fp32 SSM states, prompt {args.prompt}, {args.steps} steps"
    )
    print(
        f"{'batch':>6} {'route':>12} {'L':>3} {'step us':>9} {'SSM us':>9} {'SSM %':>6} "
        f"{'vs host':>8} {'vs conv':>8} {'refcheck':>9}  timing"
    )
    rows = []
    cases = [("host", args.L[0]), ("decode_step", args.L[0])] + [("replay_step", L) for L in args.L]
    errors = refcheck(model, cases[1:], args)
    errors["host", args.L[0]] = 0.0
    for batch in args.batch:
        for route, L in cases:
            row = run_case(model, route, batch, L, args, errors[route, L])
            rows.append(row)
            if "step_s" not in row:
                continue
            base = {r["route"]: r["step_s"] for r in rows if r["batch"] == batch and "step_s" in r}
            vs = [f"{base[b] / row['step_s']:8.3f}" if b in base else f"{'-':>8}" for b in ("host", "decode_step")]
            print(
                f"{batch:>6} {route:>12} {row['L'] or '-':>3} {row['step_s'] * 1e6:9.1f} "
                f"{row['ssm_s'] * 1e6:9.1f} {100 * row['ssm_share']:6.1f} {vs[0]} {vs[1]} "
                f"{row['refcheck']:9.1e}  {row['step_how']}"
            )
    print(
        f"# repro: python benchmarks/model_decode.py --batch {' '.join(map(str, args.batch))} "
        f"--L {' '.join(map(str, args.L))} --pattern '{args.pattern}' --geometry {args.geometry}"
    )
    if device == "cuda":
        os.makedirs(args.out_dir, exist_ok=True)
        stem = os.path.join(args.out_dir, f"{datetime.date.today()}-{gpu.split()[-1].lower()}-model_decode")
        with open(stem + ".json", "w") as f:
            json.dump(
                dict(
                    device=gpu,
                    date=str(datetime.date.today()),
                    torch=torch.__version__,
                    transformers=transformers.__version__,
                    pattern=args.pattern,
                    geometry=geometry,
                    prompt=args.prompt,
                    steps=args.steps,
                    vocab=args.vocab,
                    rows=rows,
                ),
                f,
                indent=1,
            )
        print(f"# wrote {stem}.json")


if __name__ == "__main__":
    main()
