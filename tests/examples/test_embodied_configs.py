"""Every examples/embodiment config composes with Hydra (env groups from config/env/ through the
search path) and parses into a valid EmbodiedConfig that fits its placement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.resolvers import register_resolvers
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "examples" / "embodiment" / "config"
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def load(name: str, overrides=()) -> EmbodiedConfig:
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return EmbodiedConfig.from_hydra(compose(name, overrides=list(overrides)))


@pytest.mark.parametrize("name", NAMES)
def test_config_parses_and_fits_its_placement(name):
    cfg = load(name)
    cfg.check_against_plan(cfg.cluster.plan())
    assert cfg.env.train.total_num_envs and cfg.actor.model.model_type


def test_errors_name_the_key():
    with pytest.raises(ConfigError, match="actor.micro_batch_size"):
        load("toy_ppo_mlp", ["actor.micro_batch_size=48"])
    with pytest.raises(ConfigError, match="env.train.total_num_envs"):
        load("toy_ppo_mlp", ["env.train.total_num_envs=5"])
    with pytest.raises(ConfigError, match="critic.use_critic_model"):
        load("toy_ppo_mlp", ["critic.use_critic_model=false"])
    with pytest.raises(ConfigError, match="env.train.use_fixed_reset_state_ids"):
        load("toy_ppo_mlp", ["algorithm.adv_type=grpo", "++algorithm.group_size=2", "env.train.group_size=2"])
