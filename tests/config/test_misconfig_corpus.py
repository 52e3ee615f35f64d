"""Every misconfiguration of the corpus (tests/config/misconfigs.py) is refused by the pre-Ray
checks the entries run (``prepare_math`` / ``prepare_embodied``): a ConfigError naming the
expected key, Ray never started, nothing written. The unchanged configs pass the same checks, and
a sample goes through the real entry scripts (exit 2, one line, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rlinf.config.resolvers import register_resolvers
from rlinf.utils.typed_config import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
from misconfigs import CASES, Case
from test_generation_worker import tiny_model_with_tokenizer

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIRS = {"math": ROOT / "examples" / "math" / "config", "embodied": ROOT / "examples" / "embodiment" / "config"}
ENTRIES = {"math": ROOT / "examples" / "math" / "main_grpo.py",
           "embodied": ROOT / "examples" / "embodiment" / "main_embodied.py"}
#: what every case starts from: the example config pointed at the files this test builds
BASE = {
    "grpo_tiny_cpu": ["actor.model.model_path={model}", "rollout.model.model_path={model}",
                      "data.apply_chat_template=false", "runner.output_dir={out}"],
    "toy_ppo_mlp": ["runner.output_dir={out}"],
    "maniskill_ppo_mlp_cpu": ["runner.output_dir={out}"],
    "maniskill_ppo_flow_cpu": ["runner.output_dir={out}"],
    "maniskill_ppo_flow_noise_cpu": ["runner.output_dir={out}"],
    "maniskill_ppo_openvlaoft_tiny_cpu": ["runner.output_dir={out}", "actor.model.model_path={vla}",
                                          "actor.model.lora_path={lora}"],
    "libero_grpo_openvlaoft_tiny_cpu": ["runner.output_dir={out}", "actor.model.model_path={vla}"],
    "gymnasium_pendulum_ppo_mlp_cpu": ["runner.output_dir={out}"],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The files the cases point at (the output folder ``out`` must stay empty)."""
    from rlinf.models.embodied.openvla.tiny import write_tiny_lora, write_tiny_openvla

    root = tmp_path_factory.mktemp("corpus")
    model = tiny_model_with_tokenizer(root / "model")
    paths = {"model": model, "out": str(root / "out"), "dir": str(root / "a_folder")}
    os.makedirs(paths["dir"])
    paths["file"] = str(root / "a_file")
    Path(paths["file"]).write_text("not a folder\n")
    (root / "config_only").mkdir()
    shutil.copy(Path(model) / "config.json", root / "config_only")
    paths["config_only"] = str(root / "config_only")
    shutil.copytree(model, root / "no_tokenizer")
    for name in os.listdir(root / "no_tokenizer"):
        if name.startswith(("tokenizer", "special_tokens")):
            os.remove(root / "no_tokenizer" / name)
    paths["no_tokenizer"] = str(root / "no_tokenizer")
    shutil.copytree(model, root / "missing_shard")
    os.rename(root / "missing_shard" / "model.safetensors", root / "missing_shard" / "model-00001-of-00002.safetensors")
    (root / "missing_shard" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    paths["missing_shard"] = str(root / "missing_shard")
    (root / "empty").mkdir()
    paths["empty"] = str(root / "empty")
    corrupt = root / "corrupt" / "global_step_3"
    (corrupt / "actor").mkdir(parents=True)
    (corrupt / "trainer_state.json").write_text('{"step": 3, "data')
    paths["corrupt"] = str(root / "corrupt")
    no_actor = root / "no_actor" / "global_step_2"
    no_actor.mkdir(parents=True)
    (no_actor / "trainer_state.json").write_text('{"step": 2}')
    paths["no_actor"] = str(root / "no_actor")
    paths["vla"] = write_tiny_openvla(root / "vla", identity_stats=True)
    paths["lora"] = write_tiny_lora(paths["vla"], root / "lora")
    return paths


def compose_case(entry: str, config: str, overrides, paths):
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIRS[entry]), version_base="1.3"):
        return compose(config, overrides=[o.format(**paths) for o in BASE[config] + list(overrides)])


def prepare(entry: str, raw):
    from rlinf.runners.embodied.preflight import prepare_embodied
    from rlinf.runners.math.preflight import prepare_math

    return (prepare_math if entry == "math" else prepare_embodied)(raw)


@pytest.fixture
def no_ray(monkeypatch):
    """Starting Ray inside the checks fails the test; runs use a private cluster (no RAY_ADDRESS)."""
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called before the checks finished")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_the_corpus_is_large_and_covers_every_section():
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)
    math_sections = {c.key.split(".")[0] for c in CASES if c.entry == "math"}
    embodied_sections = {c.key.split(".")[0] for c in CASES if c.entry == "embodied"}
    assert {"cluster", "data", "algorithm", "rollout", "actor", "reward", "critic", "runner"} <= math_sections
    assert {"cluster", "env", "algorithm", "rollout", "actor", "critic", "runner"} <= embodied_sections


def _libero_missing(config: str) -> bool:
    import importlib.util

    return config.startswith("libero") and importlib.util.find_spec("libero") is None


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(BASE))
def test_the_unchanged_configs_pass(config, world, no_ray):
    if _libero_missing(config):
        pytest.skip("LIBERO is not installed (RLINF_EXTRAS without libero)")
    entry = "math" if config.startswith("grpo") else "embodied"
    start = prepare(entry, compose_case(entry, config, [], world))
    assert start.resume_step is None
    assert not os.path.exists(world["out"])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_refused_before_ray_naming_the_key(case: Case, world, no_ray):
    if _libero_missing(case.config):
        pytest.skip("LIBERO is not installed (RLINF_EXTRAS without libero)")
    try:
        raw = compose_case(case.entry, case.config, case.overrides, world)
        prepare(case.entry, raw)
    except ConfigError as exc:
        assert exc.key == case.key, f"{case.why}: refused as {exc}"
        assert "\n" not in str(exc)
    else:
        pytest.fail(f"{case.why}: accepted")
    assert not os.path.exists(world["out"]), "the checks wrote into the output folder"


# The real entry scripts, in fresh processes: exit 2, exactly one stderr line naming the key.
ENTRY_SAMPLE = [
    ("math", ["data.rollout_batch_size=0"], "data.rollout_batch_size"),
    ("math", ["cluster.num_nodes=2"], "cluster.num_nodes"),
    ("math", ["actor.model.model_path={config_only}", "rollout.model.model_path={config_only}"],
     "actor.model.model_path"),
    ("math", ["runner.resume_dir={corrupt}"], "runner.resume_dir"),
    ("embodied", ["actor.model.action_dim=3"], "actor.model.action_dim"),
    ("embodied", ["actor.model.model_type=transformer_xl"], "actor.model.model_type"),
    ("maniskill", ["actor.model.action_dim=7"], "actor.model.action_dim"),
]


@pytest.mark.slow
@pytest.mark.parametrize("entry, overrides, key", ENTRY_SAMPLE, ids=[s[2] for s in ENTRY_SAMPLE])
def test_the_entry_prints_one_line_and_exits_2(entry, overrides, key, world):
    config = {"math": "grpo_tiny_cpu", "embodied": "toy_ppo_mlp", "maniskill": "maniskill_ppo_mlp_cpu"}[entry]
    entry = "math" if entry == "math" else "embodied"
    args = [o.format(**world) for o in BASE[config] + overrides]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ENTRIES[entry]), "--config-name", config, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"config error: {key}: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr and "Ray" not in proc.stdout
    assert not os.path.exists(world["out"])
    print(f"{entry} {key}: refused in {took:.1f} s")
