"""ReplaySSMConfig and its environment-variable form."""

import pytest

from trtllm_replayssm_builders.trtllm.config import (
    ENV_BUFFER_LEN,
    ENV_DELTA_RULE_RECORDS,
    ENV_ENABLE,
    ENV_FAMILIES,
    ReplaySSMConfig,
    config_from_env,
    env_requests_enable,
)


def test_config_defaults_and_family_order_normalised():
    assert ReplaySSMConfig() == ReplaySSMConfig(16, ("mamba2", "gdn", "kda"))
    assert ReplaySSMConfig(families=["kda", "mamba2"]).families == ("mamba2", "kda")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(buffer_len=0), "buffer_len is 0; expected an int in \\[1, 64\\]"),
        (dict(buffer_len=65), "buffer_len is 65"),
        (dict(buffer_len=True), "buffer_len is True"),
        (dict(families=()), "families is \\(\\)"),
        (dict(families="mamba2"), "families is 'mamba2'"),
        (dict(families=("mamba1",)), "expected distinct names from mamba2, gdn, kda"),
        (dict(families=("gdn", "gdn")), "expected distinct names"),
        (dict(delta_rule_records="fp32"), "delta_rule_records is 'fp32'; expected one of activation, float32"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReplaySSMConfig(**kwargs)


def test_env_enable_values():
    assert env_requests_enable({}) is False
    assert env_requests_enable({ENV_ENABLE: "0"}) is False
    assert env_requests_enable({ENV_ENABLE: " 1 "}) is True
    with pytest.raises(ValueError, match="TRTLLM_REPLAYSSM is 'yes'; expected 1"):
        env_requests_enable({ENV_ENABLE: "yes"})


def test_config_from_env_reads_both_variables():
    env = {ENV_BUFFER_LEN: "8", ENV_FAMILIES: "gdn, kda", ENV_DELTA_RULE_RECORDS: "float32"}
    assert config_from_env(env) == ReplaySSMConfig(8, ("gdn", "kda"), "float32")
    assert config_from_env({}) == ReplaySSMConfig()


@pytest.mark.parametrize(
    "env, match",
    [
        ({ENV_BUFFER_LEN: "sixteen"}, "TRTLLM_REPLAYSSM_BUFFER_LEN is 'sixteen'"),
        ({ENV_BUFFER_LEN: "100"}, "buffer_len is 100"),
        ({ENV_FAMILIES: "mamba2,attention"}, "TRTLLM_REPLAYSSM_FAMILIES='mamba2,attention'"),
    ],
)
def test_config_from_env_names_the_variable(env, match):
    with pytest.raises(ValueError, match=match):
        config_from_env(env)
