"""Writes a tiny random Qwen2.5-VL or Qwen3-VL checkpoint in the real HF layout.

transformers' own classes (``Qwen2_5_VLForConditionalGeneration`` / ``Qwen3VLForConditionalGeneration``
and their configs) at tiny sizes (language model: hidden 64, 2 layers; vision tower: hidden 32,
2 blocks), a byte-level BPE tokenizer trained here in well under a second with the Qwen-VL special
tokens (``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|image_pad|>``,
``<|vision_end|>``, ...), a Qwen-style chat template that renders ``{"type": "image"}`` content
as ``<|vision_start|><|image_pad|><|vision_end|>``, and the image processor's
``preprocessor_config.json`` (``min_pixels`` / ``max_pixels``, ``patch_size``, ``merge_size``,
``temporal_patch_size``, CLIP mean/std). The folder holds ``config.json``, ``model.safetensors``,
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
``preprocessor_config.json`` and ``chat_template.jinja``, and loads with
:func:`rlinf.models.vlm.load_vlm` exactly like a released checkpoint.

Example:
    python -m toolkits.vlm.make_tiny_vlm --model-type qwen2_5_vl --out /tmp/tiny_vlm --seed 0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from rlinf.data.tokenizer import save_tokenizer_pinned
from rlinf.models.vlm.image_processing import PREPROCESSOR_FILE, make_image_processor
from rlinf.models.vlm.load import PROCESSOR_CLASSES
from rlinf.utils.hf_save import save_hf_model

MODEL_TYPES = ("qwen2_5_vl", "qwen3_vl")
#: the Qwen-VL special tokens, in Qwen's order (ids here are 0..13, not Qwen's 151643..)
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
PAD_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_end|>"
VOCAB_SIZE = 512
#: vision patch side per architecture (Qwen2.5-VL 14 px, Qwen3-VL 16 px), merged 2 x 2
PATCH_SIZE = {"qwen2_5_vl": 14, "qwen3_vl": 16}
MERGE_SIZE = 2
#: the tiny pixel budget, in merged tokens per image: 4 .. 64 image tokens
MIN_TOKENS, MAX_TOKENS = 4, 64

CHAT_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' or 'image' in item %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus() -> list[str]:
    """Training text for the tokenizer: chats about small images of coloured digits and shapes."""
    colours = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple"]
    shapes = ["circle", "square", "triangle", "digit", "shape", "image", "picture"]
    texts = []
    for i, colour in enumerate(colours):
        for j, shape in enumerate(shapes):
            texts.append(
                f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                f"<|vision_start|><|image_pad|><|vision_end|>What is the {shape} in the image? "
                f"How many {colour} ones are there?<|im_end|>\n<|im_start|>assistant\n"
                f"There are {i + j} {colour} {shape}s. The answer is \\boxed{{{i * j}}}.<|im_end|>\n"
            )
    return texts * 4


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Trains the byte-level BPE (deterministic) and wraps it with the special tokens and template."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                        padding_side="left", model_max_length=4096,
                                        clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_config(model_type: str, tokenizer: PreTrainedTokenizerFast) -> Qwen2_5_VLConfig | Qwen3VLConfig:
    """The tiny config of ``model_type`` for ``tokenizer``'s vocabulary and special ids."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    # head dim 16: the multimodal rotary sections (time, height, width) cover its 8 frequencies
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=ids[PAD_TOKEN], eos_token_id=ids[EOS_TOKEN], pad_token_id=ids[PAD_TOKEN])
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=PATCH_SIZE[model_type], spatial_merge_size=MERGE_SIZE, temporal_patch_size=2)
    if model_type == "qwen2_5_vl":
        text["rope_parameters"] = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
        # window attention over 2 x 2 merged tokens in block 0, full attention in block 1
        vision.update(window_size=PATCH_SIZE[model_type] * MERGE_SIZE * 2, fullatt_block_indexes=[1])
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **tokens)
    if model_type == "qwen3_vl":
        text.update(head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                      mrope_section=[2, 3, 3], mrope_interleaved=True))
        # learned position embeddings on an 8 x 8 grid (interpolated to the image); deepstack from block 1
        vision.update(num_position_embeddings=64, deepstack_visual_indexes=[1])
        return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **tokens)
    raise ValueError(f"--model-type {model_type!r}: expected one of {', '.join(MODEL_TYPES)}")


def make_tiny_vlm(model_type: str, out: str | Path, seed: int = 0) -> Path:
    """Writes the tiny random checkpoint of ``model_type`` into ``out`` (created).

    Args:
        model_type: ``qwen2_5_vl`` or ``qwen3_vl``.
        out: Output folder.
        seed: Seed of the weight initialisation.

    Returns:
        The output folder.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"--model-type {model_type!r}: expected one of {', '.join(MODEL_TYPES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = make_config(model_type, tokenizer)
    torch.manual_seed(seed)
    model_class = (Qwen2_5_VLForConditionalGeneration if model_type == "qwen2_5_vl"
                   else Qwen3VLForConditionalGeneration)
    model = model_class(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False, max_new_tokens=64)
    save_hf_model(model, out, safe_serialization=True)
    save_tokenizer_pinned(tokenizer, out, chat_template=CHAT_TEMPLATE)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    factor = PATCH_SIZE[model_type] * MERGE_SIZE
    min_pixels, max_pixels = factor * factor * MIN_TOKENS, factor * factor * MAX_TOKENS
    make_image_processor(PATCH_SIZE[model_type], min_pixels, max_pixels, MERGE_SIZE).save_pretrained(out)
    # the keys released Qwen-VL folders carry besides "size"
    file = out / PREPROCESSOR_FILE
    settings = json.loads(file.read_text(encoding="utf-8"))
    settings.update(min_pixels=min_pixels, max_pixels=max_pixels, processor_class=PROCESSOR_CLASSES[model_type])
    file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Write a tiny random Qwen-VL checkpoint (HF layout).")
    p.add_argument("--model-type", required=True, choices=MODEL_TYPES)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    out = make_tiny_vlm(a.model_type, a.out, a.seed)
    files = sorted(f.name for f in out.iterdir())
    print(f"wrote tiny {a.model_type} -> {out}: {', '.join(files)}")


if __name__ == "__main__":
    main()
