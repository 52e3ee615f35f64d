"""save_hf_model writes the same folder as save_pretrained without importing DeepSpeed (issue 29:
DeepSpeed's "Setting accelerator to CPU" line in the driver and the actor of a math run)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None or importlib.util.find_spec("accelerate") is None,
    reason="deepspeed / accelerate not installed (the deepspeed extra): nothing would import it")

CHILD = r"""
import json, sys, tempfile
from pathlib import Path
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM
from rlinf.utils.hf_save import save_hf_model
m = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True))
ours, theirs = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
save_hf_model(m, ours)
after_ours = "deepspeed" in sys.modules
m.save_pretrained(theirs)
a, b = load_file(ours / "model.safetensors"), load_file(theirs / "model.safetensors")
print(json.dumps({"after_ours": after_ours, "after_plain": "deepspeed" in sys.modules,
                  "same_keys": sorted(a) == sorted(b), "same_values": all(a[k].equal(b[k]) for k in a),
                  "files": sorted(p.name for p in ours.iterdir())}))
"""


@pytest.mark.slow
@needs_deepspeed
def test_save_hf_model_does_not_import_deepspeed_where_save_pretrained_does():
    import json

    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["after_ours"] is False
    assert got["after_plain"] is True  # the path the helper avoids is real in this environment
    assert got["same_keys"] and got["same_values"]
    assert got["files"] == ["config.json", "generation_config.json", "model.safetensors"]
