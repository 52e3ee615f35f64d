"""toolkits.embodied.vla_predict and make_tiny_vla with --model-type pi0|pi05."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlinf.models.embodied.pi0 import Pi0Options, load_pi0
from toolkits.embodied import make_tiny_vla, vla_predict

STATE = "0.1,-0.2,0.3,0.4,-0.5,0.6,0.7,0.8"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("pi0_cli")
    pi0 = make_tiny_vla.main(["--out", str(root / "pi0"), "--model-type", "pi0", "--action-horizon", "5",
                              "--image-size", "16", "--patch-size", "4"])
    pi05 = make_tiny_vla.main(["--out", str(root / "pi05"), "--model-type", "pi05", "--layout", "lerobot"])
    image = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(image).save(root / "frame.png")
    return {"pi0": pi0, "pi05": pi05, "png": root / "frame.png", "image": image}


def _run(capsys, *argv):
    code = vla_predict.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind,horizon", [("pi0", 5), ("pi05", 4)])
def test_json_chunk_equals_predict_action(files, capsys, kind, horizon):
    args = ["--model-path", str(files[kind]), "--model-type", kind, "--image", str(files["png"]),
            "--instruction", "lift the cup", "--state", STATE, "--num-steps", "4", "--json"]
    code, out, err = _run(capsys, *args, "--seed", "3")
    assert code == 0, err
    chunk = json.loads(out)
    assert len(chunk) == horizon and all(len(row) == 7 for row in chunk)
    policy = load_pi0(files[kind], Pi0Options(num_steps=4))
    state = [float(v) for v in STATE.split(",")]
    want = policy.predict_action([torch.from_numpy(files["image"]).unsqueeze(0)], ["lift the cup"], [state],
                                 generator=torch.Generator().manual_seed(3))[0]
    np.testing.assert_allclose(np.array(chunk), want.numpy(), atol=1e-6)
    _, other, _ = _run(capsys, *args, "--seed", "4")
    assert json.loads(other) != chunk  # the seed is the initial noise


def test_text_output_and_first_k(files, capsys):
    base = ["--model-path", str(files["pi0"]), "--model-type", "pi0", "--image", str(files["png"]),
            "--instruction", "open the drawer", "--state", STATE]
    code, text, err = _run(capsys, *base)
    assert code == 0, err
    lines = text.strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith("action 0: ") and len(lines[0].split()) == 9
    code, out, _ = _run(capsys, *base, "--num-action-chunks", "2", "--json", "--wrist-image", str(files["png"]))
    assert code == 0 and np.array(json.loads(out)).shape == (2, 7)


def test_bad_inputs_exit_2_with_one_line(files, capsys, tmp_path):
    pi0, pi05, png = str(files["pi0"]), str(files["pi05"]), str(files["png"])
    cases = [
        (["--model-path", pi0, "--model-type", "pi05"], "--model-path: model_type is 'pi05' but the weights are 'pi0'"),
        (["--model-path", pi05, "--model-type", "pi0"], "model_type is 'pi0' but the weights are 'pi05'"),
        (["--model-path", str(tmp_path / "nowhere"), "--model-type", "pi0"], "not a folder"),
        (["--model-path", pi0, "--model-type", "pi0", "--unnorm-key", "libero"], "--unnorm-key: 'libero' is not one"),
        (["--model-path", pi0, "--model-type", "pi0", "--action-dim", "4"], "--action-dim 4"),
        (["--model-path", pi0, "--model-type", "pi0", "--state", "1,x"], "--state '1,x'"),
        (["--model-path", pi0, "--model-type", "pi0", "--state", ",".join(["1"] * 40)], "--state: the state has 40"),
        (["--model-path", pi0, "--model-type", "pi0"], "--state: pi0 with the pi0 prompt needs the robot state"),
        (["--model-path", pi0, "--model-type", "pi0", "--state", STATE, "--num-action-chunks", "9"],
         "--num-action-chunks 9"),
        (["--model-path", pi0, "--model-type", "pi0", "--state", STATE, "--lora-path", str(tmp_path)], "--lora-path"),
        (["--model-path", pi0, "--model-type", "pi0", "--num-steps", "0"], "--num-steps must be >= 1"),
        (["--model-path", pi0, "--model-type", "pi0", "--tokenizer-path", str(tmp_path / "x.model")],
         "tokenizer_path"),
        (["--model-path", pi0, "--model-type", "pi0", "--wrist-image", str(tmp_path / "none.png")], "--wrist-image"),
    ]
    for extra, needle in cases:
        code, out, err = _run(capsys, "--image", png, "--instruction", "x", *extra)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (extra, err)
        assert out == ""


def test_a_state_shorter_than_the_statistics_is_refused_naming_both_lengths(files, capsys):
    """Before: 7 values for 8-dim statistics were normalised with the first 7 and printed actions
    (exit 0); only a longer state was refused."""
    base = ["--model-path", str(files["pi0"]), "--model-type", "pi0", "--image", str(files["png"]),
            "--instruction", "x", "--num-steps", "1"]
    code, out, err = _run(capsys, *base, "--state", STATE.rsplit(",", 1)[0])
    where = files["pi0"] / "assets" / "tiny" / "robot" / "norm_stats.json"
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [f"error: --state: the state has 7 values; the checkpoint's state statistics "
                                        f"({where}) have 8"]
    code, out, err = _run(capsys, *base, "--state", STATE, "--json")
    assert code == 0 and np.array(json.loads(out)).shape == (5, 7), err
