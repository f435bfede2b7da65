"""The switches on layer kind that are left, by file: a new one fails this test.

A layer family is looked up in :mod:`trtllm_replayssm.registry` (core) or in a host's adapter
registry (``trtllm_replayssm_builders.hf.mixers.register_adapter``), not switched on. The
switches listed here are known (docs/architecture.md says why each stays): benchmark and CLI
case builders that construct one family's inputs, the Mamba-2 op's type check, the plugin
export CLI, and the TensorRT-LLM builder's layout and steps (one host adapter per TensorRT-LLM
mixer class, not yet a registry). Lower a count when you remove a switch; never raise one
without saying why in docs/architecture.md.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("trtllm_replayssm", "builders", "plugins")

_KIND = r"(?:MAMBA2|GDN|KDA|[\"'](?:mamba2|gdn|kda)[\"'])"
SWITCH = re.compile(
    rf"(?:==|!=)\s*{_KIND}(?!\w)"  # kind == MAMBA2, family == "kda"
    rf"|(?<!\w){_KIND}\s*(?:==|!=)"  # MAMBA2 == kind
    rf"|\bin\s*[(\[{{]\s*{_KIND}(?!\w)"  # kind in (GDN, KDA)
    r"|isinstance\([^)]*\b(?:Mamba2|GDN|KDA)ReplayCache\b"  # isinstance(cache, Mamba2ReplayCache)
)

ALLOWED = {
    "builders/hf/random_models.py": 1,  # the HF model family "mamba2", not a layer kind
    "builders/trtllm/layout.py": 3,
    "builders/trtllm/steps.py": 4,
    "plugins/export.py": 3,  # its CLI: one sub-command per op family (mamba2, gdn, kda)
    "trtllm_replayssm/bench/command.py": 3,
    "trtllm_replayssm/bench/decode_cases.py": 1,
    "trtllm_replayssm/bench/verify_cases.py": 4,
    "trtllm_replayssm/cli.py": 2,
    "trtllm_replayssm/models.py": 1,  # the HF config's model_type "mamba2", not a layer kind
}


def kind_switches() -> dict:
    """file (relative to the repository) -> how many switches on layer kind it holds."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            hits = sum(len(SWITCH.findall(line)) for line in path.read_text().splitlines())
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_the_pattern_catches_each_form():
    for line in (
        "if kind == MAMBA2:",
        "x if layer.kind != GDN else y",
        'per_channel=args.family == "kda"',
        "if MAMBA2 == kind:",
        "if kind in (GDN, KDA):",
        "if isinstance(cache, (Mamba2ReplayCache, GDNReplayCache)):",
    ):
        assert SWITCH.search(line), line
    for line in ("kind=MAMBA2,", "family(kind).cache", "from .models import GDN, KDA, MAMBA2", "GDN_FAMILY == x"):
        assert not SWITCH.search(line), line


def test_no_new_switch_on_layer_kind():
    found = kind_switches()
    grown = {f: n for f, n in found.items() if n > ALLOWED.get(f, 0)}
    assert not grown, (
        f"new switches on layer kind (file: count) {grown}; look the family up in trtllm_replayssm.registry "
        "or a host's adapter registry instead (docs/architecture.md, 'adding a layer family')"
    )
    gone = {f: n for f, n in ALLOWED.items() if found.get(f, 0) < n}
    assert not gone, f"switches removed (file: allowed count): {gone}; lower ALLOWED to {found}"
