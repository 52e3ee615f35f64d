"""toolkits.embodied.vla_predict: greedy chunk of a real-format checkpoint, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from rlinf.models.embodied.openvla import OpenVLAOptions, load_openvla
from rlinf.models.embodied.openvla.tiny import write_tiny_lora, write_tiny_openvla
from toolkits.embodied import vla_predict


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("vla_cli")
    ckpt = write_tiny_openvla(root / "ckpt")
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(image).save(root / "frame.png")
    return ckpt, root / "frame.png", image


def _run(capsys, *argv):
    code = vla_predict.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("model_type,k", [("openvla", 1), ("openvla_oft", 3)])
def test_json_chunk_equals_predict_action(files, capsys, model_type, k):
    ckpt, png, image = files
    code, out, err = _run(capsys, "--model-path", str(ckpt), "--image", str(png), "--instruction", "lift the cup",
                          "--model-type", model_type, "--num-action-chunks", str(k), "--json")
    assert code == 0, err
    chunk = json.loads(out)
    assert len(chunk) == k and all(len(row) == 7 for row in chunk)
    policy = load_openvla(ckpt, OpenVLAOptions(model_type=model_type, num_action_chunks=k))
    want = policy.predict_action(torch.from_numpy(image).unsqueeze(0), ["lift the cup"])[0]
    np.testing.assert_allclose(np.array(chunk), want.numpy(), atol=1e-6)


def test_lora_changes_the_chunk_and_text_output(files, capsys, tmp_path):
    ckpt, png, _ = files
    lora = write_tiny_lora(ckpt, tmp_path / "lora", scale=0.3)
    base = ["--model-path", str(ckpt), "--image", str(png), "--instruction", "open the drawer"]
    _, plain, _ = _run(capsys, *base, "--json")
    code, adapted, err = _run(capsys, *base, "--lora-path", str(lora), "--json")
    assert code == 0, err
    assert json.loads(adapted) != json.loads(plain)
    code, text, _ = _run(capsys, *base)
    assert code == 0 and text.startswith("action 0: ") and len(text.split()) == 9


def test_bad_inputs_exit_2_with_one_line(files, capsys, tmp_path):
    ckpt, png, _ = files
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    os.remove(broken / sorted(p for p in os.listdir(broken) if p.startswith("model-"))[0])
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "model_type": "llava"}))
    cases = [
        (["--model-path", str(broken)], "missing weight shard"),
        (["--model-path", str(other)], "model_type is 'llava'"),
        (["--model-path", str(ckpt), "--unnorm-key", "bridge_orig"], "--unnorm-key: unnorm_key 'bridge_orig'"),
        (["--model-path", str(ckpt), "--action-dim", "4"], "--action-dim 4"),
        (["--model-path", str(tmp_path / "nowhere")], "not a folder"),
        (["--model-path", str(ckpt), "--lora-path", str(tmp_path)], "--lora-path"),
    ]
    for extra, needle in cases:
        code, out, err = _run(capsys, "--image", str(png), "--instruction", "x", *extra)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (extra, err)
    code, _, err = _run(capsys, "--model-path", str(ckpt), "--image", str(tmp_path / "none.png"), "--instruction", "x")
    assert code == 2 and "--image" in err


@pytest.mark.slow
def test_module_entry_point_runs(files):
    ckpt, png, _ = files
    proc = subprocess.run([sys.executable, "-m", "toolkits.embodied.vla_predict", "--model-path", str(ckpt),
                           "--image", str(png), "--instruction", "push the box", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 1
