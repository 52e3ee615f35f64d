"""Registry lookups from config strings and their errors."""

import pytest

from rlinf.algorithms import (
    Registry,
    compute_decoupled_ppo_loss,
    compute_gae_advantages,
    compute_grpo_advantages,
    compute_ppo_loss,
    compute_reinpp_advantages,
    compute_reinpp_baseline_advantages,
    get_advantage_fn,
    get_kl_fn,
    get_policy_loss_fn,
    kl_k3,
)


def test_lookups():
    assert get_advantage_fn("grpo") is compute_grpo_advantages
    assert get_advantage_fn("gae") is compute_gae_advantages
    assert get_advantage_fn("reinpp") is compute_reinpp_advantages
    assert get_advantage_fn("reinpp_baseline") is compute_reinpp_baseline_advantages
    assert get_policy_loss_fn("ppo") is compute_ppo_loss
    assert get_policy_loss_fn("decoupled_ppo") is compute_decoupled_ppo_loss
    assert get_kl_fn("k3") is get_kl_fn("low_var_kl") is kl_k3


@pytest.mark.parametrize(
    "getter, listed",
    [
        (get_advantage_fn, ["gae", "grpo", "reinpp", "reinpp_baseline"]),
        (get_policy_loss_fn, ["decoupled_ppo", "ppo"]),
        (get_kl_fn, ["abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse"]),
    ],
)
def test_unknown_name_lists_registered(getter, listed):
    with pytest.raises(ValueError) as info:
        getter("nope")
    message = str(info.value)
    assert "'nope'" in message
    for name in listed:
        assert name in message
    with pytest.raises(ValueError):
        getter(None)


def test_registry_rejects_duplicates_and_bad_names():
    reg = Registry("toy")

    @reg.register("a")
    def a():
        return 1

    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("")
    with pytest.raises(ValueError, match="at least one"):
        reg.register()
    assert "a" in reg and reg.get("a")() == 1
