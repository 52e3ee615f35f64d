"""Tiny Qwen2.5-VL / Qwen3-VL checkpoints (toolkits.vlm.make_tiny_vlm) and the torchvision-free
processor path (rlinf.models.vlm): folder layout, load round trip, image tokens of a rendered
prompt, pixel values against an independent numpy implementation, forward and generate."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from rlinf.models.vlm import (
    load_image_processor,
    load_processor,
    load_vlm,
    make_image_processor,
    num_image_tokens,
    preprocess_images,
    render_prompt,
    render_text,
    resized_size,
)
from toolkits.vlm.make_tiny_vlm import (
    MAX_TOKENS,
    MIN_TOKENS,
    MODEL_TYPES,
    PATCH_SIZE,
    SPECIAL_TOKENS,
    build_tokenizer,
    main,
    make_config,
    make_tiny_vlm,
)

CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One tiny checkpoint of each model type."""
    root = tmp_path_factory.mktemp("tiny_vlm")
    return {t: make_tiny_vlm(t, root / t, seed=3) for t in MODEL_TYPES}


@pytest.fixture(scope="module")
def loaded(folders):
    return {t: load_vlm(folders[t]) for t in MODEL_TYPES}


def noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_folder_has_the_hf_layout(folders, model_type):
    folder = folders[model_type]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type
    assert config["vision_config"]["patch_size"] == PATCH_SIZE[model_type]
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
    # the released checkpoints' key names: Qwen2.5-VL's legacy ones (renamed on load), Qwen3-VL's
    prefixes = {".".join(k.split(".")[:3]) for k in keys}
    expected = ({"visual.patch_embed.proj", "visual.blocks.0", "visual.merger.mlp", "model.layers.1",
                 "model.embed_tokens.weight"} if model_type == "qwen2_5_vl" else
                {"model.visual.patch_embed", "model.visual.blocks", "model.visual.deepstack_merger_list",
                 "model.language_model.layers"})
    assert expected | {"lm_head.weight"} <= prefixes, sorted(prefixes)
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "<|image_pad|>" in tok_config["chat_template"] and (folder / "tokenizer.json").is_file()
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    factor = PATCH_SIZE[model_type] * 2
    assert (pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"]) == (PATCH_SIZE[model_type], 2, 2)
    assert (pre["min_pixels"], pre["max_pixels"]) == (factor**2 * MIN_TOKENS, factor**2 * MAX_TOKENS)
    assert np.allclose(pre["image_mean"], CLIP_MEAN) and np.allclose(pre["image_std"], CLIP_STD)
    # every special token is one token, and the config's ids are the tokenizer's
    tokenizer = load_processor(folder).tokenizer
    for token in SPECIAL_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    assert config["image_token_id"] == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config["vision_start_token_id"] == tokenizer.convert_tokens_to_ids("<|vision_start|>")


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_load_round_trip_gives_the_built_weights(folders, loaded, model_type):
    vlm = loaded[model_type]
    assert type(vlm.model).__name__ == {"qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                                        "qwen3_vl": "Qwen3VLForConditionalGeneration"}[model_type]
    assert type(vlm.processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    torch.manual_seed(3)  # the fixture's seed: the same random weights, built again in memory
    fresh = type(vlm.model)(make_config(model_type, build_tokenizer())).eval()
    batch = render_prompt(vlm.processor, "How many circles?", [noise_image(90, 60)])
    with torch.no_grad():
        assert torch.equal(vlm.model(**batch).logits, fresh(**batch).logits)
        torch.manual_seed(4)
        other = type(vlm.model)(make_config(model_type, build_tokenizer())).eval()
        assert not torch.allclose(vlm.model(**batch).logits, other(**batch).logits)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("size", [(100, 70), (500, 300), (20, 20), (64, 1000)])
def test_prompt_has_one_image_token_per_merged_patch(loaded, model_type, size):
    processor = loaded[model_type].processor
    width, height = size
    batch = render_prompt(processor, "What is the shape?", [noise_image(width, height)])
    ids = batch["input_ids"][0].tolist()
    tokenizer = processor.tokenizer
    pad, start, end = (tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>",
                                                                    "<|vision_end|>"))
    t, h, w = batch["image_grid_thw"][0].tolist()
    count = ids.count(pad)
    assert count == t * h * w // 4 == num_image_tokens(processor.image_processor, height, width)
    assert batch["pixel_values"].shape[0] == t * h * w
    # contiguous, between vision start and end, inside the user turn; the prompt ends ready to answer
    first = ids.index(pad)
    assert ids[first - 1] == start and ids[first + count] == end and ids[first:first + count] == [pad] * count
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    # the image area lands in the pixel budget (bigger images scaled down, smaller ones up)
    rh, rw = resized_size(processor.image_processor, height, width)
    factor = PATCH_SIZE[model_type] * 2
    assert (rh, rw) == (h * PATCH_SIZE[model_type], w * PATCH_SIZE[model_type])
    assert factor**2 * MIN_TOKENS <= rh * rw <= factor**2 * MAX_TOKENS
    assert batch["mm_token_type_ids"][0].tolist() == [int(i == pad) for i in ids]


def reference_pixel_values(image: Image.Image, patch: int, height: int, width: int) -> np.ndarray:
    """An independent implementation of the documented layout (PIL bicubic resize, 1/255, CLIP
    mean/std, patches in 2 x 2 merge-window order, each repeated twice in time)."""
    pixels = np.asarray(image.resize((width, height), Image.BICUBIC), dtype=np.float32) / 255.0
    pixels = ((pixels - CLIP_MEAN) / CLIP_STD).transpose(2, 0, 1)  # C, H, W
    rows = []
    for by in range(height // (2 * patch)):
        for bx in range(width // (2 * patch)):
            for my in range(2):
                for mx in range(2):
                    y, x = (2 * by + my) * patch, (2 * bx + mx) * patch
                    cell = pixels[:, y:y + patch, x:x + patch]  # C, P, P
                    rows.append(np.stack([cell, cell], axis=1).reshape(-1))  # C, T, P, P
    return np.stack(rows)


@pytest.mark.parametrize("patch", [14, 16])
@pytest.mark.parametrize("size", [(100, 70), (333, 250), (30, 41)])
def test_pixel_values_equal_an_independent_numpy_implementation(patch, size):
    factor = 2 * patch
    proc = make_image_processor(patch_size=patch, min_pixels=factor**2 * MIN_TOKENS,
                                max_pixels=factor**2 * MAX_TOKENS)
    image = noise_image(*size, seed=size[0])
    out = preprocess_images(proc, [image])
    t, h, w = out["image_grid_thw"][0].tolist()
    assert t == 1 and (h * patch, w * patch) == resized_size(proc, size[1], size[0])
    expected = reference_pixel_values(image, patch, h * patch, w * patch)
    assert out["pixel_values"].dtype == torch.float32 and out["pixel_values"].shape == expected.shape
    np.testing.assert_allclose(out["pixel_values"].numpy(), expected, atol=1e-5)


def test_released_preprocessor_files_load_with_their_budgets(tmp_path):
    """A Qwen2.5-VL-style file (min/max_pixels, no size) and a Qwen3-VL-style one (size only, the
    torchvision backend's type name) both give the PIL processor with the file's settings."""
    q25 = tmp_path / "q25"
    q25.mkdir()
    (q25 / "preprocessor_config.json").write_text(json.dumps({
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": CLIP_MEAN.tolist(), "image_std": CLIP_STD.tolist(),
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}))
    q3 = tmp_path / "q3"
    q3.mkdir()
    (q3 / "preprocessor_config.json").write_text(json.dumps({
        "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor"}))
    a, b = load_image_processor(q25), load_image_processor(q3)
    assert type(a).__name__ == type(b).__name__ == "Qwen2VLImageProcessorPil"
    assert (a.size["shortest_edge"], a.size["longest_edge"], a.patch_size) == (3136, 12845056, 14)
    assert (b.size["shortest_edge"], b.size["longest_edge"], b.patch_size) == (65536, 16777216, 16)
    assert list(b.image_mean) == [0.5, 0.5, 0.5]
    assert num_image_tokens(a, 1080, 1920) == (1092 // 28) * (1932 // 28)  # 1092 x 1932 fits the budget


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_forward_and_generate(loaded, model_type):
    vlm = loaded[model_type]
    batch = render_prompt(vlm.processor, "What colour is the digit?", [noise_image(120, 80)])
    length = batch["input_ids"].shape[1]
    with torch.no_grad():
        logits = vlm.model(**batch).logits
    assert logits.shape == (1, length, len(vlm.processor.tokenizer)) and torch.isfinite(logits).all()
    out = vlm.model.generate(**batch, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, length + 4) and torch.equal(out[:, :length], batch["input_ids"])
    # greedy: the first new token is the argmax of the last prompt position
    assert out[0, length].item() == logits[0, -1].argmax().item()


def test_bad_inputs_get_one_line(folders, tmp_path):
    processor = load_processor(folders["qwen2_5_vl"])
    with pytest.raises(ValueError, match=r"2 image placeholder\(s\) but 1 image"):
        render_text(processor, "<|vision_start|><|image_pad|><|vision_end|>" * 2 + "hi", [noise_image(40, 40)])
    with pytest.raises(ValueError, match=r"image .*missing.png: cannot be read"):
        render_prompt(processor, "hi", [tmp_path / "missing.png"])
    text_only = tmp_path / "text_only"
    text_only.mkdir()
    (text_only / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    with pytest.raises(ValueError, match=r"config.json: model_type 'qwen2' is not a supported vision-language"):
        load_processor(text_only)
    no_processor = tmp_path / "no_processor"
    no_processor.mkdir()
    (no_processor / "config.json").write_text((folders["qwen3_vl"] / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match=r"preprocessor_config.json: missing"):
        load_processor(no_processor)


def test_cli_writes_a_loadable_folder_and_refuses_an_unknown_type(tmp_path, capsys):
    main(["--model-type", "qwen3_vl", "--out", str(tmp_path / "cli"), "--seed", "1"])
    assert "wrote tiny qwen3_vl" in capsys.readouterr().out
    processor = load_processor(tmp_path / "cli")
    assert type(processor).__name__ == "ImageOnlyQwen3VLProcessor" and processor.image_processor.patch_size == 16
    batch = render_prompt(processor, "no image here", [])  # a text-only prompt has no pixel inputs
    assert "pixel_values" not in batch and processor.image_token_id not in batch["input_ids"][0].tolist()
    with pytest.raises(SystemExit):
        main(["--model-type", "llava", "--out", str(tmp_path / "bad")])
    assert "invalid choice: 'llava'" in capsys.readouterr().err
