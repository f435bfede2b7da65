"""``benchmarks/spec_verify.py``'s --history-product, without a GPU: the switch reaches the
GDN/KDA cases and through them the verify launcher; asked for KDA it is refused."""

import os
import sys
from types import SimpleNamespace

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import spec_verify  # noqa: E402
from trtllm_replayssm.bench import make_verify_case, verify_cases  # noqa: E402


def test_history_product_on_is_refused_for_kda_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as e:
        spec_verify.main(["--family", "gdn", "kda", "--history-product", "on"])
    assert e.value.code == 2
    assert "--history-product on needs --family gdn only" in capsys.readouterr().err


@pytest.mark.parametrize("switch, value", [("rule", None), ("on", True), ("off", False)])
def test_history_product_reaches_the_delta_cases_only(monkeypatch, switch, value):
    monkeypatch.setattr(spec_verify, "make_case", lambda family, *a: SimpleNamespace(family=family))
    args = SimpleNamespace(B=16, state="f32", act="bf16", accept=0.7, history_product=switch, kernel=["auto"])
    gdn = spec_verify.make_family_case(args, "gdn", (16, 64, 128, 128), 16, 4)
    assert gdn.history_product is value
    assert not hasattr(spec_verify.make_family_case(args, "mamba2", (128, 64, 128, 8), 16, 4), "history_product")


@pytest.mark.parametrize("value", [None, True, False])
def test_delta_case_passes_history_product_to_the_launcher(monkeypatch, value):
    seen = {}
    monkeypatch.setattr(verify_cases, "launch_gated_delta_replay_verify", lambda *a, **kw: seen.update(kw))
    case = make_verify_case("gdn", (1, 2, 12, 20), 2, 2, 4, "f32", "f32", 0.7, device="cpu", pool_bytes=4096)
    case.history_product = value
    case.replay_verify(torch.zeros(2, dtype=torch.int32), out=None)
    assert seen["history_product"] is value and seen["config"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--family", "gdn", "--kernel", "triton", "cuda", "--history-product", "off"], "--history-product sets the Triton"),
        (["--family", "gdn", "--kernel", "gpu"], "invalid choice: 'gpu'"),
    ],
)
def test_kernel_choices_are_checked_before_anything_runs(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        spec_verify.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("family, geom", [("gdn", (1, 2, 12, 20)), ("mamba2", (2, 4, 8, 1))])
def test_the_first_kernel_reaches_the_launcher(monkeypatch, family, geom):
    seen = {}
    launcher = "launch_gated_delta_replay_verify" if family == "gdn" else "launch_mamba2_replay_verify"
    monkeypatch.setattr(verify_cases, launcher, lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr(
        spec_verify,
        "make_case",
        lambda *a: make_verify_case(*a, device="cpu", pool_bytes=4096),
    )
    args = SimpleNamespace(B=2, state="f32", act="f32", accept=0.7, history_product="rule", kernel=["cuda", "triton"])
    case = spec_verify.make_family_case(args, family, geom, 2, 2)
    case.replay_verify(torch.zeros(2, dtype=torch.int32), out=None)
    assert seen["kernel"] == "cuda"
