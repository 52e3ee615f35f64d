"""``python -m rlinf.scheduler.placement``: grid and JSON output, one-line errors, no Ray import."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlinf.scheduler.placement", *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )


def cells(line: str) -> list[str]:
    return re.split(r" {2,}", line)


def test_grid_output():
    out = cli(DATA / "two_nodes.yaml")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    assert lines[0] == "2 nodes x 4; components: actor (8), rollout (8), reward (4), critic (1)"
    assert lines[2].split() == ["node", "acc", "0", "acc", "1", "acc", "2", "acc", "3"]
    assert cells(lines[3]) == ["node 0", "actor0 rollout0", "actor1 rollout1 critic0",
                                    "actor2 rollout2", "actor3 rollout3"]
    assert cells(lines[4]) == ["node 1", "actor4 rollout4", "actor5 rollout5",
                                    "actor6 rollout6 reward0,1", "actor7 rollout7 reward2,3"]
    assert lines[6:] == [
        "modes:",
        "  actor,rollout   collocated",
        "  actor,reward    hybrid",
        "  actor,critic    hybrid",
        "  rollout,reward  hybrid",
        "  rollout,critic  hybrid",
        "  reward,critic   disaggregated",
    ]


def test_grid_output_node_groups():
    out = cli(DATA / "hetero.yaml")
    assert out.returncode == 0, out.stderr
    assert "node 2 (small)" in out.stdout
    assert "node 3 (sim, cpu)" in out.stdout and "env0-3" in out.stdout
    assert "actor15 rollout15" in out.stdout


def test_json_output_exact():
    out = cli(DATA / "two_nodes.yaml", "--json", "--accelerators-per-node", "8", "--nodes", "1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('{\n  "components": {')  # indent 2
    acc = [{"rank": i, "node": 0, "accelerators": [i]} for i in range(8)]
    assert json.loads(out.stdout) == {
        "components": {
            "actor": acc,
            "rollout": acc,
            "reward": [{"rank": 0, "node": 0, "accelerators": [6]}, {"rank": 1, "node": 0, "accelerators": [6]},
                       {"rank": 2, "node": 0, "accelerators": [7]}, {"rank": 3, "node": 0, "accelerators": [7]}],
            "critic": [{"rank": 0, "node": 0, "accelerators": [1]}],
        },
        "modes": {
            "actor,rollout": "collocated", "actor,reward": "hybrid", "actor,critic": "hybrid",
            "rollout,reward": "hybrid", "rollout,critic": "hybrid", "reward,critic": "disaggregated",
        },
    }


def test_accelerators_default_to_8(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster:\n  component_placement:\n    actor: all\n")
    out = cli(cfg, "--json")
    assert out.returncode == 0, out.stderr
    assert [p["accelerators"] for p in json.loads(out.stdout)["components"]["actor"]] == [[i] for i in range(8)]


INVALID = {
    "bad_yaml": ("cluster: [unclosed\n  x: : y\n", "invalid YAML"),
    "empty": ("", "no top-level 'cluster:'"),
    "no_cluster": ("runner:\n  seed: 1\n", "no top-level 'cluster:'"),
    "cluster_list": ("cluster: [1, 2]\n", "expected a mapping"),
    "no_placement": ("cluster:\n  num_nodes: 1\n", "no 'component_placement'"),
    "placement_list": ("cluster:\n  component_placement: [a]\n", "expected a mapping"),
    "out_of_range": ("cluster:\n  num_nodes: 2\n  component_placement:\n    actor: 0-16\n",
                     "cluster.component_placement.actor: accelerator rank 16 in '0-16' is out of range"),
    "composite": ("cluster:\n  component_placement:\n    actor,rollout: 3-1\n",
                  "cluster.component_placement['actor,rollout']: range '3-1'"),
    "bad_group": ("cluster:\n  node_groups: [{label: a, node_ranks: 4}]\n  component_placement: {x: 0}\n",
                  "cluster.node_groups[0].node_ranks"),
    "bad_nodes": ("cluster:\n  num_nodes: zero\n  component_placement: {x: 0}\n", "cluster.num_nodes"),
    "interpolation": ("cluster:\n  num_nodes: ${oc.env:NNODES}\n  component_placement: {x: 0}\n",
                      "cluster.num_nodes: interpolation '${oc.env:NNODES}' is not supported"),
    "interp_value": ("cluster:\n  component_placement:\n    x: ${a.b}\n",
                     "cluster.component_placement.x: interpolation"),
    "binary": (b"\xff\xfe\x00cluster", "cannot read"),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_input_is_one_error_line(tmp_path, name):
    content, expected = INVALID[name]
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = cli(cfg)
    assert out.returncode == 2
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert expected in lines[0]


def test_missing_file_and_directory(tmp_path):
    for path in (tmp_path / "nope.yaml", tmp_path):
        out = cli(path)
        assert out.returncode == 2
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot read {path}")


def test_interpolation_overridden_by_flag_is_fine(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster:\n  num_nodes: ${oc.env:NNODES}\n  component_placement: {x: 9}\n")
    out = cli(cfg, "--nodes", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["components"]["x"] == [{"rank": 0, "node": 1, "accelerators": [1]}]


def test_flag_override_errors_are_one_line():
    out = cli(DATA / "two_nodes.yaml", "--nodes", "0")
    assert out.returncode == 2 and out.stderr == "error: --nodes: 0 is too small; use an int >= 1\n"
    out = cli(DATA / "two_nodes.yaml", "--nodes", "1")  # 'reward: 6-7' needs 2 nodes x 4
    assert out.returncode == 2 and "'6-7:0-3'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--nodes", "x"], "error: --nodes: 'x' is not an int; use an int >= 1"),
        (["--nodes", "0x2"], "error: --nodes: '0x2' is not an int; use an int >= 1"),
        (["--accelerators-per-node", "010"], "error: --accelerators-per-node: '010' is not an int; use an int >= 0"),
        (["--accelerators-per-node=-1"], "error: --accelerators-per-node: -1 is too small; use an int >= 0"),
    ],
)
def test_flag_errors_name_the_flag(capsys, flags, expected):
    from rlinf.scheduler.placement.__main__ import main

    assert main([str(DATA / "two_nodes.yaml"), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == expected + "\n"


@pytest.mark.slow
def test_usage_errors_are_one_line_exit_2():
    usage = ("usage: python -m rlinf.scheduler.placement [-h] [--nodes N] [--accelerators-per-node M] [--json] "
             "[--memory] [--device-memory-gib G] [--cpu] CONFIG.yaml")
    for args, message in [
        ((), "the following arguments are required: CONFIG.yaml"),
        ((DATA / "two_nodes.yaml", "--bogus"), "unrecognized arguments: --bogus"),
        ((DATA / "two_nodes.yaml", "--nodes"), "argument --nodes: expected one argument"),
    ]:
        out = cli(*args)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr == f"error: {message}; {usage}\n"
    assert cli(DATA / "two_nodes.yaml", "--nodes", "x").returncode == 2
    out = cli("--help")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith("usage: ") and "--accelerators-per-node M" in out.stdout


def run_yaml(tmp_path, text, *flags):
    """Exit status, stdout and stderr of the CLI (in process) on a config with this YAML text."""
    from rlinf.scheduler.placement.__main__ import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(textwrap.dedent(text))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(cfg), *flags])
    return status, out.getvalue(), err.getvalue()


DUPLICATES = {
    "component": ("""\
        cluster:
          component_placement:
            actor: 0-3
            rollout: 0-3
            actor: 4-7
        """, "error: cluster.component_placement: key 'actor' is given on lines 3 and 5; "
             "give each key once (YAML would silently keep the last)"),
    "composite": ("""\
        cluster:
          component_placement: {"actor,rollout": all, reward: 0, "actor,rollout": 1}
        """, "error: cluster.component_placement: key 'actor,rollout' is given twice on line 2;"),
    "cluster_setting": ("""\
        cluster:
          num_nodes: 1
          component_placement: {actor: all}
          num_nodes: 2
        """, "error: cluster: key 'num_nodes' is given on lines 2 and 4;"),
    "top_level": ("""\
        cluster:
          component_placement: {actor: all}
        runner: {seed: 1}
        cluster: {component_placement: {actor: 0}}
        """, "key 'cluster' is given on lines 1 and 4;"),
    "node_group": ("""\
        cluster:
          num_nodes: 2
          node_groups:
            - {label: a, node_ranks: 0}
            - label: b
              node_ranks: 1
              node_ranks: 0
          component_placement: {actor: all}
        """, "error: cluster.node_groups[1]: key 'node_ranks' is given on lines 6 and 7;"),
    "placement_mapping": ("""\
        cluster:
          component_placement:
            "actor,rollout":
              node_group: a
              placement: 0
              placement: 1
        """, "error: cluster.component_placement['actor,rollout']: key 'placement' is given on lines 5 and 6;"),
    "elsewhere": ("""\
        runner:
          seed: 1
          seed: 2
        cluster: {component_placement: {actor: all}}
        """, "error: runner: key 'seed' is given on lines 2 and 3;"),
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_duplicate_keys_are_rejected(tmp_path, name):
    text, expected = DUPLICATES[name]
    status, out, err = run_yaml(tmp_path, text)
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and expected in err


def test_merge_keys_and_anchors_are_not_duplicates(tmp_path):
    status, out, err = run_yaml(tmp_path, """\
        base: &base {num_nodes: 1, accelerators_per_node: 4}
        cluster:
          <<: *base
          accelerators_per_node: 2
          component_placement: {actor: all, rollout: all}
        """, "--json")
    assert status == 0, err
    assert json.loads(out)["components"]["actor"][-1] == {"rank": 1, "node": 0, "accelerators": [1]}


@pytest.mark.parametrize(
    "value, token",
    [("0x3", "'0x3'"), ("010", "'010'"), ("1_000", "'1_000'"), ("0b11", "'0b11'"), ("+3", "'+3'"),
     ("0o7", "'0o7'")],
)
def test_only_plain_decimal_ints(tmp_path, value, token):
    status, out, err = run_yaml(tmp_path, f"cluster:\n  component_placement:\n    actor: {value}\n")
    assert (status, out) == (2, "")
    assert err.startswith(f"error: cluster.component_placement.actor: {token} in {token} ")
    assert len(err.splitlines()) == 1 and "'8'" not in err and "'3'" not in err


def test_non_decimal_cluster_settings_are_named_as_written(tmp_path):
    status, _, err = run_yaml(tmp_path, "cluster:\n  num_nodes: 0x2\n  component_placement: {actor: 0}\n")
    assert status == 2 and err == "error: cluster.num_nodes: '0x2' is not an int; use an int >= 1\n"
    status, _, err = run_yaml(tmp_path, "cluster:\n  accelerators_per_node: 010\n  component_placement: {a: 0}\n")
    assert status == 2 and err.startswith("error: cluster.accelerators_per_node: '010' is not an int")
    status, out, err = run_yaml(tmp_path, """\
        cluster:
          num_nodes: 2
          accelerators_per_node: 4
          component_placement: {actor: 5, critic: 1:0, reward: "0"}
        """, "--json")
    assert status == 0, err
    comps = json.loads(out)["components"]
    assert comps["actor"] == [{"rank": 0, "node": 1, "accelerators": [1]}]
    assert comps["critic"] == [{"rank": 0, "node": 0, "accelerators": [1]}]
    status, _, err = run_yaml(tmp_path, "cluster:\n  num_nodes: -1\n  component_placement: {a: 0}\n")
    assert err == "error: cluster.num_nodes: -1 is too small; use an int >= 1\n"


def test_main_in_process(capsys):
    from rlinf.scheduler.placement.__main__ import main

    assert main([str(DATA / "two_nodes.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["modes"]["actor,rollout"] == "collocated"
    assert main([str(DATA / "missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read")


def test_import_does_not_pull_in_ray_or_torch():
    code = textwrap.dedent("""
        import sys
        import rlinf.scheduler.placement as p
        import rlinf.scheduler.placement.__main__
        p.plan_placement({"a": "all"}, p.ClusterShape(1, 8))
        bad = [m for m in ("ray", "torch") if m in sys.modules]
        assert not bad, bad
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
