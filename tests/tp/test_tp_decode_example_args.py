"""``examples/tp_decode.py``'s arguments, checked before any rank starts: counts are positive,
``--layers`` cuts the tiny stack too and may not ask for more SSM layers than there are."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("tp_decode_example", os.path.join(ROOT, "examples", "tp_decode.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["--steps", "0"], "argument --steps: expected a positive integer, got '0'", id="steps0"),
        pytest.param(["--layers", "0"], "argument --layers: expected a positive integer, got '0'", id="layers0"),
        pytest.param(["--batch", "-1"], "argument --batch: expected a positive integer, got '-1'", id="batch"),
        pytest.param(["--L", "x"], "argument --L: expected a positive integer, got 'x'", id="L"),
        pytest.param(["--layers", "6"], "--layers 6: tiny-hybrid has 5 SSM layers; expected at most 5", id="layers6"),
        pytest.param(["--model", "kimi-linear-48b", "--layers", "21"], "kimi-linear-48b has 20 SSM layers", id="layers21"),
        pytest.param(["--model", "nope"], "'nope' is neither a preset nor a file", id="model"),
    ],
)
def test_tp_decode_usage_errors_exit_2_before_the_ranks_start(example, monkeypatch, argv, message, capsys):
    monkeypatch.setattr(example, "init_ranks", lambda backend: pytest.fail("ranks started"))
    with pytest.raises(SystemExit) as exit_info:
        example.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, names",
    [
        pytest.param([], ("tiny-hybrid", 5), id="tiny-all"),
        pytest.param(["--layers", "2"], ("tiny-hybrid-ssm2", 2), id="tiny-2"),
        pytest.param(["--model", "nemotron-3-nano-4b", "--layers", "3"], ("nemotron-3-nano-4b-ssm3", 3), id="preset-3"),
    ],
)
def test_tp_decode_layers_cut_every_stack(example, argv, names):
    args = example.build_parser().parse_args(argv)
    model, hidden = example._model_and_hidden(args, example.build_parser())
    assert (model.name, len(model.layers)) == names
    assert hidden == (3136 if args.model else 24)
