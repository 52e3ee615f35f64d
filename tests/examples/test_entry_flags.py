"""Hydra's flags on every entry, as Hydra documents them, with a user's own config in another
folder: ``-cd`` (add a config folder), ``-cp`` (replace the entry's config folder), ``--cfg job``
(print the composed config) and ``--help``; a broken user config is one ``config error:`` line
naming its file and line, exit code 2, for each of them.

The user's config is the entry's default as Hydra composes it (``--cfg job``), saved elsewhere
with one value changed, so it is a complete config that no longer sits beside the entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: entry -> (default config, a line of its composed config to change, the changed line)
ENTRIES = {
    "math": ("examples/math/main_grpo.py", "grpo_tiny_cpu", "  seed: 1234", "  seed: 4321"),
    "embodied": ("examples/embodiment/main_embodied.py", "toy_ppo_mlp", "  seed: ", "  seed: 4321"),
    "web": ("examples/web_agent/main.py", "web_agent_tiny_cpu", "  iterations: ", "  iterations: 77"),
}


def _run(entry: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, str(ROOT / entry), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture(scope="module", params=sorted(ENTRIES))
def user_configs(request, tmp_path_factory):
    """(entry, folder holding my_run.yaml (valid) and broken.yaml (a tab in it), changed line)."""
    name = request.param
    entry, default, old, new = ENTRIES[name]
    shipped = _run(entry, "--cfg", "job")
    assert shipped.returncode == 0, shipped.stderr
    lines = shipped.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(old))
    lines[index] = new
    folder = tmp_path_factory.mktemp(f"my_configs_{name}")
    (folder / "my_run.yaml").write_text("\n".join(lines) + "\n")
    lines[index] = "\t" + new.strip()  # a tab where YAML wants spaces
    (folder / "broken.yaml").write_text("\n".join(lines) + "\n")
    return entry, folder, new.strip(), index + 1


@pytest.mark.slow
def test_config_dir_adds_a_users_folder(user_configs):
    entry, folder, changed, _ = user_configs
    out = _run(entry, "-cd", str(folder), "-cn", "my_run", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    assert changed in out.stdout


def test_config_path_replaces_the_entrys_folder_relative_to_the_entry_file(user_configs, tmp_path):
    entry, folder, changed, _ = user_configs
    relative = os.path.relpath(folder, (ROOT / entry).parent)  # Hydra: relative to the entry's file
    out = _run(entry, "--config-path", relative, "--config-name", "my_run", "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert changed in out.stdout


@pytest.mark.slow
def test_help_shows_the_users_config(user_configs):
    entry, folder, changed, _ = user_configs
    out = _run(entry, "-cd", str(folder), "-cn", "my_run", "--help")
    assert out.returncode == 0, out.stderr
    assert "Powered by Hydra" in out.stdout and changed in out.stdout


@pytest.mark.parametrize("flags", [["-cd", "{folder}"], ["-cd", "{folder}", "--cfg", "job"],
                                   ["-cp", "{folder}", "--help"]], ids=["cd-run", "cd-cfg-job", "cp-help"])
def test_a_broken_user_config_is_one_line_naming_the_file(user_configs, flags):
    entry, folder, _, line = user_configs
    out = _run(entry, *[f.format(folder=folder) for f in flags], "-cn", "broken")
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("config error: "), err
    assert f"broken.yaml:{line}:" in err[0] and "tab" in err[0], err[0]


@pytest.mark.slow
def test_a_missing_user_config_and_a_missing_folder_are_one_line(user_configs):
    entry, folder, _, _ = user_configs
    out = _run(entry, "-cd", str(folder), "-cn", "nope")
    assert out.returncode == 2 and out.stderr.strip().startswith("config error: Cannot find primary config 'nope'")
    out = _run(entry, "-cd", str(folder / "absent"), "-cn", "my_run")
    assert out.returncode == 2 and "--config-dir" in out.stderr and len(out.stderr.strip().splitlines()) == 1
