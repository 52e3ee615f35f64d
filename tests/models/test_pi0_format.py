"""π0 / π0.5 folders in the openpi, RLinf and LeRobot layouts: strict key coverage, one-line
errors, statistics and un-normalisation, the tokenizer and images, saving back."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlinf.models.embodied.pi0 import NormStats, Pi0CheckpointError, Pi0Options, inspect_pi0_folder, load_pi0
from rlinf.models.embodied.pi0.processing import PaliGemmaTokenizer, camera_batch, resize_with_pad
from rlinf.models.embodied.pi0.spec import EMBED, EXPERT_LM_HEAD, LM_HEAD
from rlinf.models.embodied.pi0.tiny import TINY_ASSET_ID, tiny_stats, write_tiny_pi0

INSTR = ["pick up the mug", "open the drawer"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pi0_format")
    return {(layout, pi05): write_tiny_pi0(root / f"{layout}_{int(pi05)}", pi05=pi05, layout=layout)
            for layout in ("openpi", "rlinf", "lerobot") for pi05 in (False, True)}


def _obs(n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n, 16, 16, 3), dtype=torch.uint8, generator=g)], INSTR[:n], torch.randn(n, 8,
                                                                                                           generator=g)


@pytest.mark.parametrize("layout", ["openpi", "rlinf", "lerobot"])
@pytest.mark.parametrize("pi05", [False, True])
def test_every_tensor_is_used_and_every_parameter_filled(folders, layout, pi05):
    folder = folders[(layout, pi05)]
    policy = load_pi0(folder)
    assert policy.layout == layout and policy.model_type == ("pi05" if pi05 else "pi0")
    raw = load_file(str(folder / "model.safetensors"))
    src = {k.removeprefix("model.") if layout == "lerobot" else k: v for k, v in raw.items()}
    params = policy.model.state_dict()
    assert not any(p.is_meta for p in policy.model.parameters())
    used = {EMBED if k == LM_HEAD else k for k in src} - set(policy.carried) - set(policy.extras)
    assert used == set(params)  # one tensor per parameter, none left over
    for k, v in src.items():
        ours = params[EMBED] if k == LM_HEAD else params.get(k, policy.carried.get(k, policy.extras.get(k)))
        assert torch.equal(ours.float(), v.float()), k
    assert set(policy.carried) == ({EXPERT_LM_HEAD} if layout != "lerobot" else set())
    if layout == "rlinf":
        assert {k.split(".")[0] for k in policy.extras} == {"value_head", "noise_head"}
    else:
        assert policy.extras == {}
    assert ("time_mlp_in.weight" in params) == pi05 and ("state_proj.weight" in params) == (not pi05)


def _rewrite(src, dst, edit):
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_missing_extra_and_misshapen_tensors_are_one_line_errors(folders, tmp_path):
    src = folders[("openpi", False)]
    key = "paligemma_with_expert.gemma_expert.model.layers.1.mlp.up_proj.weight"
    cases = [
        (lambda t: t.pop(key), f"1 tensor(s) missing, e.g. {key}"),
        (lambda t: t.__setitem__("bogus.weight", torch.zeros(2)), "unexpected tensor(s) that fit no part of the "
                                                                   "model, e.g. bogus.weight"),
        (lambda t: t.__setitem__(key, torch.zeros(3, 3)), f"wrong shape, e.g. {key} (3, 3)"),
        (lambda t: t.pop(LM_HEAD), "missing tensor paligemma_with_expert.paligemma.lm_head.weight"),
    ]
    for i, (edit, needle) in enumerate(cases):
        bad = _rewrite(src, tmp_path / f"bad{i}", edit)
        with pytest.raises(Pi0CheckpointError) as info:
            load_pi0(bad)
        msg = str(info.value)
        assert needle in msg and "\n" not in msg and str(bad) in msg


def test_folder_errors_name_the_file(folders, tmp_path):
    with pytest.raises(Pi0CheckpointError, match="not a folder"):
        load_pi0(tmp_path / "nowhere")
    lr = shutil.copytree(folders[("lerobot", True)], tmp_path / "lr")
    cfg = json.loads((lr / "config.json").read_text())
    (lr / "config.json").write_text(json.dumps({**cfg, "type": "pi0"}))
    with pytest.raises(Pi0CheckpointError, match="type is 'pi0' but the weights are 'pi05'"):
        load_pi0(lr)
    (lr / "config.json").write_text(json.dumps({**cfg, "type": "act"}))
    with pytest.raises(Pi0CheckpointError, match="type is 'act'"):
        load_pi0(lr)
    notok = shutil.copytree(folders[("openpi", False)], tmp_path / "notok")
    (notok / "paligemma_tokenizer.model").unlink()
    with pytest.raises(Pi0CheckpointError, match="pass tokenizer_path"):
        load_pi0(notok)
    policy = load_pi0(notok, Pi0Options(tokenizer_path=str(folders[("openpi", False)] / "paligemma_tokenizer.model")))
    assert policy.tokenizer.vocab_size == 160
    with pytest.raises(KeyError, match="'libero' is not one of \\['tiny/robot'\\]"):
        load_pi0(folders[("openpi", False)], Pi0Options(asset_id="libero"))
    with pytest.raises(ValueError, match="model_type must be one of"):
        Pi0Options(model_type="pi1")


def test_stats_locations_and_modes(folders):
    for layout in ("openpi", "rlinf"):
        f = inspect_pi0_folder(folders[(layout, False)])
        assert f.layout == layout and list(f.stats_files) == [TINY_ASSET_ID]
        base = f.path / "assets" if layout == "openpi" else f.path
        assert f.stats_files[TINY_ASSET_ID] == base / "tiny" / "robot" / "norm_stats.json"
    assert load_pi0(folders[("openpi", False)]).stats.mode == "mean_std"  # openpi: π0 mean/std
    assert load_pi0(folders[("rlinf", True)]).stats.mode == "quantile"  # everything else quantiles
    lr = load_pi0(folders[("lerobot", False)]).stats
    assert (lr.mode, lr.style, lr.state_mode) == ("mean_std", "lerobot", "mean_std")


def test_unnormalisation_by_hand():
    a = torch.tensor([[[0.5, -1.0, 0.25]]])
    mean_std = {"mean": [1.0, -2.0], "std": [2.0, 0.5]}
    quant = {"q01": [-1.0, 0.0], "q99": [3.0, 10.0]}
    got = NormStats("mean_std", "openpi", mean_std).unnormalize_actions(a)[0, 0].tolist()
    assert got == pytest.approx([0.5 * (2 + 1e-6) + 1, -1.0 * (0.5 + 1e-6) - 2], abs=1e-6)
    got = NormStats("quantile", "openpi", quant).unnormalize_actions(a)[0, 0].tolist()
    assert got == pytest.approx([0.75 * (4 + 1e-6) - 1, 0.0], abs=1e-6)
    assert NormStats("mean_std", "lerobot", mean_std).unnormalize_actions(a)[0, 0].tolist() == pytest.approx(
        [2.0, -2.5])
    assert NormStats("quantile", "lerobot", quant).unnormalize_actions(a)[0, 0].tolist() == pytest.approx([2.0, 0.0])
    state = NormStats("quantile", "openpi", quant, state={"q01": [0.0], "q99": [4.0]})
    assert state.normalize_state(torch.tensor([[3.0]])).item() == pytest.approx(3 / (4 + 1e-6) * 2 - 1)
    with pytest.raises(ValueError, match="no 'q01' statistics"):
        NormStats("quantile", "openpi", mean_std)


@pytest.mark.slow
def test_predicted_actions_use_the_folder_statistics(folders):
    policy = load_pi0(folders[("openpi", True)])
    cams, instr, states = _obs()
    noise = policy.model.initial_noise(2, torch.Generator().manual_seed(0))
    raw = policy.model.sample_actions(policy.prepare(cams, instr, states), noise=noise)
    acts = policy.predict_action(cams, instr, states, noise=noise)
    q = tiny_stats()["actions"]
    q01, q99 = torch.tensor(q["q01"]), torch.tensor(q["q99"])
    assert acts.shape == (2, 4, 7)
    assert torch.allclose(acts, (raw[..., :7] + 1) / 2 * (q99 - q01 + 1e-6) + q01, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("pi05", [False, True])
def test_openpi_and_lerobot_layouts_give_the_same_actions(folders, pi05):
    a, b = load_pi0(folders[("openpi", pi05)]), load_pi0(folders[("lerobot", pi05)])
    cams, instr, states = _obs()
    inputs = a.prepare(cams, instr, states)
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    assert torch.equal(a.model.sample_actions(inputs, generator=gen()), b.model.sample_actions(inputs, generator=gen()))
    ua, ub = a.predict_action(cams, instr, states, generator=gen()), b.predict_action(cams, instr, states,
                                                                                      generator=gen())
    assert ua.shape == ub.shape == (2, 4, 7)
    assert torch.allclose(ua, ub, atol=1e-4)  # openpi's +1e-6 vs LeRobot's exact denominators


@pytest.mark.parametrize("layout", ["openpi", "rlinf", "lerobot"])
def test_save_writes_the_layout_it_loaded(folders, layout, tmp_path):
    src = folders[(layout, True)]
    policy = load_pi0(src)
    out = policy.save_pretrained(tmp_path / "saved")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in src.iterdir())
    before, after = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(before) == set(after)
    assert all(torch.equal(before[k], after[k]) and before[k].dtype == after[k].dtype for k in before)
    assert after[("model." if layout == "lerobot" else "") + "action_in_proj.weight"].dtype == torch.bfloat16
    again = load_pi0(out)
    cams, instr, states = _obs()
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    assert torch.equal(again.predict_action(cams, instr, states, generator=gen()),
                       policy.predict_action(cams, instr, states, generator=gen()))


def test_embedding_stored_as_embed_tokens_round_trips(folders, tmp_path):
    def rename(t):
        t[EMBED] = t.pop(LM_HEAD)

    folder = _rewrite(folders[("openpi", False)], tmp_path / "embed", rename)
    policy = load_pi0(folder)
    assert policy.embed_names == [EMBED]
    saved = load_file(str(policy.save_pretrained(tmp_path / "out") / "model.safetensors"))
    assert EMBED in saved and LM_HEAD not in saved


def test_prompt_formats_and_padding(folders):
    tok = PaliGemmaTokenizer(folders[("openpi", False)] / "paligemma_tokenizer.model")
    sp = tok.sp
    ids = tok.prompt_ids("  pick_up the mug\n", "pi0")
    assert ids == [2] + sp.encode("pick up the mug") + sp.encode("\n")
    assert tok.prompt_ids("pick up the mug", "pi0_lerobot") == [2] + sp.encode("pick up the mug\n")
    ids = tok.prompt_ids("pick up", "pi05_state", [0, 128, 255])
    assert sp.decode(ids[1:]) == "Task: pick up, State: 0 128 255;\nAction: " and ids[0] == 2
    batch, mask = tok.batch(["pick up", "x " * 40], "pi0", 12)
    assert batch.shape == (2, 12) and mask[0].sum() == len(tok.prompt_ids("pick up", "pi0"))
    assert (batch[0][~mask[0]] == 0).all() and mask[1].all()  # right-padded with 0, long prompts cut
    policy = load_pi0(folders[("openpi", True)])
    inputs = policy.prepare(*_obs(1))
    n = int(inputs.token_mask.sum())
    text = sp.decode(inputs.tokens[0, 1:n].tolist())
    assert text.startswith("Task: pick up the mug, State: ") and text.endswith(";\nAction: ")


def test_resize_with_pad_and_camera_slots():
    img = torch.zeros(1, 10, 20, 3, dtype=torch.uint8)
    img[..., 0] = 255
    out = resize_with_pad(img, 8, 8)
    assert out.shape == (1, 8, 8, 3) and out.dtype == torch.uint8
    assert out[0, :, 0, 0].tolist() == [0, 0, 255, 255, 255, 255, 0, 0]  # 4 rows kept, 2 black each side
    images, masks = camera_batch([img, None], 3, 8)
    assert images.shape == (1, 3, 3, 8, 8) and masks.tolist() == [[True, False, False]]
    assert images[0, 0, 0, 3, 0].item() == 1.0 and images[0, 0, 0, 0, 0].item() == -1.0 and (images[0, 1] == -1).all()
    with pytest.raises(ValueError, match="4 cameras given; the checkpoint has 3"):
        camera_batch([img] * 4, 3, 8)


@pytest.mark.slow
def test_folders_without_statistics_give_normalised_actions(folders, tmp_path):
    lr = shutil.copytree(folders[("lerobot", False)], tmp_path / "lr")
    for p in lr.glob("policy_*"):
        p.unlink()
    op = shutil.copytree(folders[("openpi", False)], tmp_path / "op")
    shutil.rmtree(op / "assets")
    (op / "assets").mkdir()
    for folder in (lr, op):
        policy = load_pi0(folder)
        assert policy.stats is None and policy.action_dim == 32
        cams, instr, states = _obs()
        noise = policy.model.initial_noise(2, torch.Generator().manual_seed(0))
        got = policy.predict_action(cams, instr, states, noise=noise)
        want = policy.model.sample_actions(policy.prepare(cams, instr, states), noise=noise)
        assert got.shape == (2, 4, 32) and torch.equal(got, want)
        with pytest.raises(KeyError):
            load_pi0(folder, Pi0Options(asset_id="libero"))
