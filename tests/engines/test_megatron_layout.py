"""HF <-> Megatron layout (pure tensors): QKV grouping, fc1 packing, TP / PP splits, vocab padding,
round trips and the errors for layouts that cannot work. Expected tensors are built by hand."""

from __future__ import annotations

import pytest
import torch

from rlinf.engines.training.megatron import layout
from rlinf.engines.training.megatron.layout import ConversionError

ARCH = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def tiny_config(family="qwen2", layers=5, heads=4, kv_heads=2, vocab=100, tied=False, **extra):
    return {"architectures": [ARCH[family]], "hidden_size": 8, "intermediate_size": 12,
            "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": 2, "vocab_size": vocab,
            "tie_word_embeddings": tied, **extra}


def random_state(config, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = layout.expected_hf_shapes(config)
    if config.get("tie_word_embeddings"):
        shapes.pop("lm_head.weight")
    return {k: torch.randn(s, generator=gen).to(dtype) for k, s in shapes.items()}


def labelled_rows(rows, cols=1, start=0.0):
    """Row i holds start + i everywhere: a row's value says where it came from."""
    return (torch.arange(rows, dtype=torch.float32) + start)[:, None].expand(rows, cols).clone()


def test_qkv_is_grouped_per_kv_head_and_tp_ranks_take_whole_groups():
    config = tiny_config("llama", layers=1, heads=4, kv_heads=2)  # 2 query heads per group, d=2
    state = random_state(config)
    p = "model.layers.0.self_attn."
    state[p + "q_proj.weight"] = labelled_rows(8, 8, 0)  # q heads 0..3 -> rows 0..7
    state[p + "k_proj.weight"] = labelled_rows(4, 8, 100)  # k heads 0..1 -> rows 100..103
    state[p + "v_proj.weight"] = labelled_rows(4, 8, 200)
    shards = layout.hf_to_megatron_shards(state, config, tp=2, pp=1)
    rank0 = shards[0, 0]["decoder.layers.0.self_attention.linear_qkv.weight"][:, 0].tolist()
    rank1 = shards[0, 1]["decoder.layers.0.self_attention.linear_qkv.weight"][:, 0].tolist()
    # group 0: q heads 0,1 then k head 0 then v head 0; group 1 likewise on TP rank 1
    assert rank0 == [0, 1, 2, 3, 100, 101, 200, 201]
    assert rank1 == [4, 5, 6, 7, 102, 103, 202, 203]


def test_qkv_bias_follows_the_weight_layout_for_qwen2():
    config = tiny_config("qwen2", layers=1, heads=4, kv_heads=1)
    state = random_state(config)
    p = "model.layers.0.self_attn."
    state[p + "q_proj.bias"] = torch.arange(8.0)
    state[p + "k_proj.bias"] = torch.tensor([50.0, 51.0])
    state[p + "v_proj.bias"] = torch.tensor([60.0, 61.0])
    shard = layout.hf_to_megatron_shards(state, config, tp=1, pp=1)[0, 0]
    packed = shard["decoder.layers.0.self_attention.linear_qkv.bias"].tolist()
    assert packed == [0, 1, 2, 3, 4, 5, 6, 7, 50, 51, 60, 61]


def test_fc1_shard_is_gate_then_up_of_that_rank_and_row_parallel_splits_columns():
    config = tiny_config("llama", layers=1)
    state = random_state(config)
    state["model.layers.0.mlp.gate_proj.weight"] = labelled_rows(12, 8, 0)
    state["model.layers.0.mlp.up_proj.weight"] = labelled_rows(12, 8, 100)
    state["model.layers.0.mlp.down_proj.weight"] = labelled_rows(12, 8).T.clone()  # col j = j
    state["model.layers.0.self_attn.o_proj.weight"] = labelled_rows(8, 8).T.clone()
    shards = layout.hf_to_megatron_shards(state, config, tp=2, pp=1)
    fc1 = [shards[0, r]["decoder.layers.0.mlp.linear_fc1.weight"][:, 0].tolist() for r in (0, 1)]
    assert fc1[0] == list(range(6)) + list(range(100, 106))
    assert fc1[1] == list(range(6, 12)) + list(range(106, 112))
    fc2 = shards[0, 1]["decoder.layers.0.mlp.linear_fc2.weight"]
    assert fc2.shape == (8, 6) and fc2[0].tolist() == list(range(6, 12))
    proj = shards[0, 1]["decoder.layers.0.self_attention.linear_proj.weight"]
    assert proj.shape == (8, 4) and proj[0].tolist() == [4, 5, 6, 7]
    norm = "decoder.layers.0.input_layernorm.weight"
    assert torch.equal(shards[0, 0][norm], shards[0, 1][norm])


def test_vocab_is_zero_padded_then_split_and_the_output_layer_sits_on_the_last_stage():
    config = tiny_config("qwen2", layers=3, vocab=10)
    state = random_state(config)
    shards = layout.hf_to_megatron_shards(state, config, tp=2, pp=2, divisible_by=4)  # 10 -> 16
    embed = torch.cat([shards[0, r]["embedding.word_embeddings.weight"] for r in (0, 1)])
    assert embed.shape == (16, 8)
    assert torch.equal(embed[:10], state["model.embed_tokens.weight"])
    assert not embed[10:].any()
    head = torch.cat([shards[1, r]["output_layer.weight"] for r in (0, 1)])
    assert torch.equal(head[:10], state["lm_head.weight"])
    assert "output_layer.weight" not in shards[0, 0]
    assert "embedding.word_embeddings.weight" not in shards[1, 0]
    assert "decoder.final_layernorm.weight" in shards[1, 1]


def test_pipeline_stages_number_layers_locally():
    config = tiny_config("qwen3", layers=5)
    state = random_state(config)
    shards = layout.hf_to_megatron_shards(state, config, tp=1, pp=2)  # [3, 2]
    assert torch.equal(shards[1, 0]["decoder.layers.0.input_layernorm.weight"],
                       state["model.layers.3.input_layernorm.weight"])
    assert torch.equal(shards[1, 0]["decoder.layers.1.self_attention.k_layernorm.weight"],
                       state["model.layers.4.self_attn.k_norm.weight"])
    layers = {k.split(".")[2] for k in shards[0, 0] if k.startswith("decoder.layers.")}
    assert layers == {"0", "1", "2"}
    explicit = layout.hf_to_megatron_shards(state, config, tp=1, pp=2, layers_per_stage=[1, 4])
    assert torch.equal(explicit[1, 0]["decoder.layers.3.mlp.linear_fc2.weight"],
                       state["model.layers.4.mlp.down_proj.weight"])


def test_tied_embeddings_copy_to_the_last_stage_only_with_pipeline_stages():
    config = tiny_config("qwen2", layers=2, tied=True, vocab=10)
    state = random_state(config)
    single = layout.hf_to_megatron_shards(state, config, tp=1, pp=1, divisible_by=1)
    assert "output_layer.weight" not in single[0, 0]
    staged = layout.hf_to_megatron_shards(state, config, tp=1, pp=2, divisible_by=1)
    assert torch.equal(staged[1, 0]["output_layer.weight"], state["model.embed_tokens.weight"])
    back = layout.megatron_shards_to_hf(staged, config, tp=1, pp=2)
    assert "lm_head.weight" not in back
    with_head = layout.megatron_shards_to_hf(staged, config, 1, 2, include_tied_lm_head=True)
    assert torch.equal(with_head["lm_head.weight"], state["model.embed_tokens.weight"])


@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3"])
@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 2), (2, 2), (2, 3)])
def test_round_trip_is_bit_identical(family, tp, pp):
    config = tiny_config(family, layers=5, tied=family == "qwen2" and tp == 2)
    state = random_state(config, dtype=torch.bfloat16)
    shards = layout.hf_to_megatron_shards(state, config, tp=tp, pp=pp)
    assert sorted(shards) == [(p, t) for p in range(pp) for t in range(tp)]
    back = layout.megatron_shards_to_hf(shards, config, tp=tp, pp=pp)
    assert sorted(back) == sorted(state)
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name


def test_shards_own_their_storage():
    """torch.save of a view writes its whole base tensor: shards must not be views."""
    config = tiny_config("llama", layers=2)
    shards = layout.hf_to_megatron_shards(random_state(config), config, tp=2, pp=1)
    for state_dict in shards.values():
        for _name, tensor in state_dict.items():
            if tensor is not None:
                assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()


@pytest.mark.parametrize("kwargs,tp,pp,message", [
    ({"heads": 6, "kv_heads": 6}, 4, 1, "num_attention_heads 6 is not divisible by tp 4"),
    ({"heads": 4, "kv_heads": 2}, 4, 1, "num_key_value_heads 2 is not divisible by tp 4"),
    ({"layers": 2}, 1, 3, "pp 3 is larger than the model's 2 layers"),
])
def test_layouts_that_cannot_split_are_refused(kwargs, tp, pp, message):
    with pytest.raises(ConversionError, match=message):
        layout.check_parallel_sizes(tiny_config("llama", **kwargs), tp, pp)


def test_layer_counts_and_vocab_padding_rules():
    assert layout.layers_per_stage(7, 3) == [3, 2, 2]
    with pytest.raises(ConversionError, match="summing to the model's 5 layers"):
        layout.layers_per_stage(5, 2, [2, 2])
    with pytest.raises(ConversionError, match="counts >= 1"):
        layout.layers_per_stage(5, 2, [0, 5])
    assert layout.padded_vocab_size(100, 2, divisible_by=8) == 112
    with pytest.raises(ConversionError, match="vocab_size 101 is not divisible by tp 2"):
        layout.padded_vocab_size(101, 2, divisible_by=0)


@pytest.mark.parametrize("config,message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "unsupported architecture"),
    (tiny_config("llama", attention_bias=True), "attention_bias=True is not supported"),
    (tiny_config("qwen3", hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
])
def test_unsupported_models_are_named(config, message):
    with pytest.raises(ConversionError, match=message):
        layout.family_of(config)


def test_transformer_config_follows_the_hf_config():
    pytest.importorskip("megatron.core")
    from rlinf.engines.training.megatron.model import rope_theta, transformer_config_from_hf

    config = tiny_config("qwen3", layers=5, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    tc = transformer_config_from_hf(config, tp=2, pp=2, overrides={"params_dtype": torch.bfloat16})
    assert (tc.num_layers, tc.hidden_size, tc.ffn_hidden_size) == (5, 8, 12)
    assert (tc.num_attention_heads, tc.num_query_groups, tc.kv_channels) == (4, 2, 2)
    assert tc.qk_layernorm and not tc.add_qkv_bias and tc.gated_linear_unit
    assert tc.normalization == "RMSNorm" and tc.layernorm_epsilon == 1e-5
    assert tc.params_dtype == tc.pipeline_dtype == torch.bfloat16
    assert [row.count("decoder") for row in tc.pipeline_model_parallel_layout.input_data] == [3, 2]
    assert transformer_config_from_hf(tiny_config("qwen2"), 1, 1).add_qkv_bias
    assert rope_theta(config) == 5e5
    scaled = {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}
    with pytest.raises(ConversionError, match="rope type 'llama3' is not supported"):
        rope_theta(scaled)
