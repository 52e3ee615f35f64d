"""YAML slips in a config (and in the files its defaults pull in) are one line before Hydra runs."""

from __future__ import annotations

import glob
import os
import re

import pytest

from rlinf.config.yaml_check import ConfigFileError, check_config_files, config_name_from_argv
from rlinf.runners.compose import REPO_ROOT, precheck_config_files

BROKEN = {
    "tab": ("a: 1\nb:\n\tc: 2\n", r"tab\.yaml:3:1: a tab character; YAML indents with spaces only"),
    "bracket": ("a: [1, 2\nb: 3\n", r"bracket\.yaml:2:2: .*flow sequence at line 1"),
    "duplicate": ("x:\n  y: 1\n  y: 2\n", r"duplicate\.yaml:3:3: duplicate key 'y' \(first at line 2\)"),
    "indent": ("a: 1\n  b: 2\n", r"indent\.yaml:2:4: mapping values are not allowed here"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_slip_names_file_line_and_column(tmp_path, name):
    text, message = BROKEN[name]
    (tmp_path / f"{name}.yaml").write_text(text)
    with pytest.raises(ConfigFileError, match=message):
        check_config_files(str(tmp_path), name)


def test_files_pulled_in_by_defaults_are_checked_in_the_shared_folder(tmp_path):
    local, shared = tmp_path / "config", tmp_path / "shared"
    (shared / "env").mkdir(parents=True)
    local.mkdir()
    (local / "run.yaml").write_text("defaults:\n  - env/pick@env.train\n  - override hydra/job_logging: stdout\n"
                                    "  - _self_\nrunner:\n  seed: 1\n")
    (shared / "env" / "pick.yaml").write_text("env_type: maniskill\nseed: 1\nseed: 2\n")
    with pytest.raises(ConfigFileError, match=r"env/pick\.yaml:3:1: duplicate key 'seed'"):
        check_config_files(str(local), "run", [str(shared)])


def test_every_shipped_config_passes():
    for entry in ("math", "embodiment", "scheduler_demo"):
        config_dir = os.path.join(REPO_ROOT, "examples", entry, "config")
        for path in glob.glob(os.path.join(config_dir, "*.yaml")):
            check_config_files(config_dir, os.path.basename(path)[:-5], [os.path.join(REPO_ROOT, "config")])


def test_entry_precheck_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "mine.yaml").write_text("runner:\n  seed: [1\n")
    with pytest.raises(SystemExit) as exit_info:
        precheck_config_files(str(tmp_path / "main.py"), "default", ["--config-name", "mine", "runner.seed=2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: ") and "mine.yaml:3:1" in err[0]
    assert config_name_from_argv(["-cn=abc"], "d") == "abc" and config_name_from_argv([], "d") == "d"


HYDRA_SLIPS = [
    (["runner.plot_curvez=false"], r"Could not override 'runner.plot_curvez'\. To append to your config use \+"),
    (["cluster=nope"], r"Could not find 'cluster/nope' Available options in 'cluster': .*tiny_collocated"),
    (["data.rollout_batch_size=[1"], r"override 'data.rollout_batch_size=\[1': "),
    (["--config-name", "grpo_tiny_cpux"], r"Cannot find primary config 'grpo_tiny_cpux'"),
]


@pytest.mark.parametrize("argv, message", HYDRA_SLIPS, ids=[a[-1] for a, _ in HYDRA_SLIPS])
def test_hydra_override_slips_are_one_line(argv, message, capsys):
    entry = os.path.join(REPO_ROOT, "examples", "math", "main_grpo.py")
    with pytest.raises(SystemExit) as exit_info:
        precheck_config_files(entry, "grpo_tiny_cpu", argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: "), err
    assert re.search(message, err[0]), err[0]
    precheck_config_files(entry, "grpo_tiny_cpu", ["runner.max_steps=3", "+runner.resume_dir=x"])  # fine


def test_a_worker_failure_is_one_line_with_the_traceback_in_the_log_folder(tmp_path, capsys):
    from rlinf.runners.entry import run_entry
    from rlinf.runners.recipe import Recipe
    from rlinf.runners.recovery import Recovery
    from rlinf.scheduler.errors import WorkerError

    class FailingRecipe(Recipe):
        def recovery(self, raw):
            return Recovery("disabled", 0, "")

        def prepare(self, raw):
            raise WorkerError("rollout[1]", 0, "run", "Traceback (most recent call last):\n  File x\n"
                                                      "ValueError: action_dim 7 but the env takes 8\n")

    cfg = {"runner": {"logger": {"log_path": str(tmp_path / "logs")}}}
    with pytest.raises(SystemExit) as exit_info:
        run_entry(FailingRecipe(), cfg)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: rollout[1] on node 0 raised in run(): ValueError: action_dim 7 but the env "
                   f"takes 8 (details: {tmp_path / 'logs' / 'error.log'})"]
    assert "File x" in (tmp_path / "logs" / "error.log").read_text()


def test_a_web_runs_error_log_goes_to_its_save_path(tmp_path):
    from rlinf.runners.entry import write_error_log

    path = write_error_log({"save_path": str(tmp_path / "run")}, ValueError("browser gone"))
    log = tmp_path / "run" / "error.log"
    assert path == str(log) and "browser gone" in log.read_text()
