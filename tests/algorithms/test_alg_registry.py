"""Registry lookups from config strings and their errors."""

import pytest

from rlinf.algorithms import (
    Registry,
    compute_decoupled_ppo_loss,
    compute_ppo_loss,
    gae_estimator,
    get_advantage_estimator,
    get_kl_fn,
    get_policy_loss_fn,
    grpo_estimator,
    kl_k3,
    reinpp_baseline_estimator,
    reinpp_estimator,
    rloo_estimator,
)


def test_lookups():
    assert get_advantage_estimator("grpo").fn is grpo_estimator
    assert get_advantage_estimator("gae").fn is gae_estimator
    assert get_advantage_estimator("reinpp").fn is reinpp_estimator
    assert get_advantage_estimator("reinpp_baseline").fn is reinpp_baseline_estimator
    assert get_advantage_estimator("rloo").fn is rloo_estimator
    assert get_policy_loss_fn("ppo") is compute_ppo_loss
    assert get_policy_loss_fn("decoupled_ppo") is compute_decoupled_ppo_loss
    assert get_kl_fn("k3") is get_kl_fn("low_var_kl") is kl_k3


@pytest.mark.parametrize(
    "getter, listed",
    [
        (get_advantage_estimator, ["gae", "grpo", "reinpp", "reinpp_baseline", "rloo"]),
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
