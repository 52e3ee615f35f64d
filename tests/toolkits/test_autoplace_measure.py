"""``python -m toolkits.autoplace CONFIG --measure-steps K`` (issue 46): K steps of the config as
placed (the toy embodied run on the local backend), a profile written where asked with every role
the config places, then the table planned from it; a config that cannot start fails as a run does
(one line, exit 2, no profile)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlinf.scheduler.autoplace import parse_profile
from rlinf.scheduler.placement.__main__ import load_yaml
from toolkits.autoplace.__main__ import main
from toolkits.autoplace.inputs import load_run
from toolkits.autoplace.ranking import set_dotted

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "examples/embodiment/config/toy_ppo_mlp.yaml")


def toy_config(tmp_path: Path, **changes) -> Path:
    """The toy embodied config, composed and resolved, on the local backend, writing into tmp."""
    raw = load_run(TOY).raw
    for key, value in {"cluster.backend": "local", "runner.output_dir": str(tmp_path / "results"),
                       "runner.logger.log_path": str(tmp_path / "results" / "log"),
                       "env.train.total_num_envs": 4, "env.eval.total_num_envs": 4, "actor.global_batch_size": 80,
                       "actor.micro_batch_size": 40, **changes}.items():
        set_dotted(raw, key, value)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.slow  # a local-backend run of 2 steps
def test_measure_steps_runs_the_config_writes_its_profile_and_plans_from_it(capsys, tmp_path):
    config = toy_config(tmp_path)
    out = tmp_path / "measured.yaml"
    rc = main([str(config), "--measure-steps", "2", "--profile", str(out), "--top", "3"])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    profile = parse_profile(load_yaml(str(out)))
    assert sorted(profile.roles) == ["actor", "env", "rollout"]
    assert profile.samples_per_step == 4 * 20 and profile.cores_per_node >= 1
    assert all(r.seconds_per_sample > 0 for r in profile.roles.values())
    assert "from 1 training step(s) (step 1 of 2 skipped: warm-up)" in out.read_text()
    assert "[rlinf] measured per step (steps 2-2)" in stderr  # the run's own lines go to stderr
    assert stdout.splitlines()[0] == f"placement plan for {config} (embodied) with profile {out}"


def test_measure_steps_on_a_config_that_cannot_start_is_one_line_and_no_profile(capsys, tmp_path):
    config = toy_config(tmp_path, **{"actor.global_batch_size": 7})  # 80 samples per step do not split
    out = tmp_path / "measured.yaml"
    rc = main([str(config), "--measure-steps", "2", "--profile", str(out)])
    _, stderr = capsys.readouterr()
    assert rc == 2 and stderr.startswith("error: actor.global_batch_size") and stderr.count("\n") == 1
    assert not out.exists()
    rc = main([str(config), "--measure-steps", "0"])
    assert rc == 2 and "--measure-steps: expected an int >= 1, got '0'" in capsys.readouterr().err
