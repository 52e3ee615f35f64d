"""parse_section: every way a config can be wrong names its key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from rlinf.utils.typed_config import ConfigError, check, parse_section


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = -1
    do_sample: bool = True


@dataclass(frozen=True)
class Algo:
    group_size: int
    adv_type: Literal["grpo", "gae", "reinpp"] = "grpo"
    clip_ratio_c: float | None = None
    sampling_params: Sampling = field(default_factory=Sampling)
    paths: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)
    anything: Any = None

    def validate(self, path):
        check(self.group_size >= 1, f"{path}.group_size", f"must be >= 1, got {self.group_size}")


def parse(raw):
    return parse_section(Algo, raw, "algorithm")


def test_values_defaults_and_conversions():
    cfg = parse({"group_size": 4, "clip_ratio_c": 3, "paths": ["a", "b"],
                 "sampling_params": {"temperature": 0}, "extra": {"x": 1}, "anything": [1]})
    assert cfg == Algo(group_size=4, clip_ratio_c=3.0, paths=("a", "b"),
                       sampling_params=Sampling(temperature=0.0), extra={"x": 1}, anything=[1])
    assert isinstance(cfg.clip_ratio_c, float) and isinstance(cfg.sampling_params.temperature, float)
    assert parse({"group_size": 2, "sampling_params": None}).sampling_params == Sampling()
    assert parse({"group_size": 2, "clip_ratio_c": "1e-5"}).clip_ratio_c == 1e-5  # YAML 1.1 string
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.group_size = 3


@pytest.mark.parametrize("raw, message", [
    ({}, "algorithm.group_size: missing (required)"),
    ({"group_size": 2, "gruop_size": 2}, "algorithm.gruop_size: unknown key; allowed keys are "),
    ({"group_size": "4"}, "algorithm.group_size: expected an int, got '4' (str)"),
    ({"group_size": True}, "algorithm.group_size: expected an int, got True (bool)"),
    ({"group_size": 2.0}, "algorithm.group_size: expected an int, got 2.0 (float)"),
    ({"group_size": 0}, "algorithm.group_size: must be >= 1, got 0"),
    ({"group_size": 2, "adv_type": "ppo"},
     "algorithm.adv_type: 'ppo' is not allowed; expected one of 'grpo', 'gae', 'reinpp'"),
    ({"group_size": 2, "adv_type": None}, "algorithm.adv_type: null is not allowed"),
    ({"group_size": 2, "clip_ratio_c": "three"}, "algorithm.clip_ratio_c: expected a number"),
    ({"group_size": 2, "sampling_params": {"temprature": 1}}, "algorithm.sampling_params.temprature: unknown key"),
    ({"group_size": 2, "sampling_params": {"do_sample": 1}},
     "algorithm.sampling_params.do_sample: expected true or false, got 1 (int)"),
    ({"group_size": 2, "sampling_params": [1]}, "algorithm.sampling_params: expected a mapping"),
    ({"group_size": 2, "paths": "a.jsonl"}, "algorithm.paths: expected a list, got 'a.jsonl' (str)"),
    ({"group_size": 2, "paths": ["a", 3]}, "algorithm.paths[1]: expected a string, got 3 (int)"),
    ({"group_size": 2, "extra": {"x": "1"}}, "algorithm.extra.x: expected an int"),
])
def test_errors_start_with_the_key_path(raw, message):
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_section_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"^algorithm: expected a mapping of .*group_size"):
        parse([1, 2])
