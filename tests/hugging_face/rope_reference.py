"""RoPE's inverse frequencies and attention factor as transformers computes
them (modeling_rope_utils.ROPE_INIT_FUNCTIONS), for RopeTest.

    python rope_reference.py cases.json out.pt

cases.json: {"head_dim": d, "max_position_embeddings": m, "lengths": [...],
"cases": [rope_parameters, ...]}. out.pt: {"<case>/<length>/inverse": tensor,
"<case>/<length>/attention_factor": tensor of one}.
"""
import json
import sys

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

spec = json.load(open(sys.argv[1]))
out = {}
for index, parameters in enumerate(spec["cases"]):
    config = transformers.LlamaConfig(
        hidden_size=spec["head_dim"] * 4,
        num_attention_heads=4,
        head_dim=spec["head_dim"],
        max_position_embeddings=spec["max_position_embeddings"],
        rope_parameters=dict(parameters),
    )
    rope_type = config.rope_parameters["rope_type"]
    for length in spec["lengths"]:
        if rope_type == "default":
            # The default is each model's own method (whole heads), not a function of the table.
            inverse, factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inverse, factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=length)
        out[f"{index}/{length}/inverse"] = inverse.float()
        out[f"{index}/{length}/attention_factor"] = torch.tensor([float(factor)], dtype=torch.float64)
torch.save(out, sys.argv[2])
print("python: reference frequencies for", len(spec["cases"]), "cases")
