"""The peers' model for `--model llama`: Hugging Face transformers'
LlamaForCausalLM, as a PyTorch user trains a Llama, in the shape of
bench_models.h's llama (6 layers, 512 wide, 8 heads, 4 key and value heads,
SwiGLU 1344 wide, block 128, a vocabulary of 32000 and a head of its own;
49.9M parameters, 32.8M of them the embedding and the head). Attention
through "sdpa" (F.scaled_dot_product_attention, as basin's on 2.x).
transformers is imported here only, so that the other models' peers run
without it (Debian's python3-torch has none)."""

import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

BLOCK, VOCAB = 128, 32000

CONFIG = dict(vocab_size=VOCAB, hidden_size=512, intermediate_size=1344, num_hidden_layers=6, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=BLOCK, tie_word_embeddings=False,
              rms_norm_eps=1e-6, rope_theta=10000.0, initializer_range=0.02)  # basin's defaults, spelled out

# FSDP2's unit for the llama (basin declares each decoder layer one).
UNIT = LlamaDecoderLayer


class Llama(nn.Module):
    """LlamaForCausalLM returning its logits [n, T, V]: the loss is taken outside,
    as basin takes it (the mean cross-entropy over every token, no shift)."""

    def __init__(self):
        super().__init__()
        # No KV cache: a training step has no use for the one forward builds by default.
        config = LlamaConfig(**CONFIG, use_cache=False, attn_implementation="sdpa")
        self.model = LlamaForCausalLM(config)  # Hugging Face's init: normal(0, 0.02), norms one, as basin's

    def forward(self, ids):
        return self.model(input_ids=ids).logits
