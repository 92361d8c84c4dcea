"""basin's gpt (models/gpt.cpp) as a PyTorch user writes GPT-2, layer for
layer the same shapes and the same tied head: the peers' model for
`--model gpt` (bench_models.h's: 6 blocks, 512 wide, 8 heads, block 128,
vocabulary 50257; 44.7M parameters). Attention through
F.scaled_dot_product_attention, as basin's on 2.x."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK, VOCAB, LAYERS, HEADS, WIDTH = 128, 50257, 6, 8, 512
# bench_models.h's gpt sizes: layers, heads, width.
SHAPES = {"gpt": (LAYERS, HEADS, WIDTH), "gpt2_small": (12, 12, 768), "gpt2_medium": (24, 16, 1024)}


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(n, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(n, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=VOCAB, block=BLOCK, layers=LAYERS, heads=HEADS, width=WIDTH):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.layers = layers
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """GPT-2's init, as basin's: std 0.02, the residual projections 0.02 / sqrt(2 layers), zero biases,
        unit LayerNorm scales. (PyTorch's N(0, 1) embeddings would give the tied head logits of std ~22 and a
        slower softmax.) Also what a model built on the meta device and sharded (FSDP2's deferred init) runs
        after to_empty."""
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (2 * self.layers) ** 0.5 if name.endswith("_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)  # LayerNorm's scale

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the head is the token embedding


def token_batches(rank, batch, count=4, vocab=VOCAB):
    """`count` batches of random windows of this rank's own: ids and the next ids
    (the llama's peer draws them from its own vocabulary)."""
    generator = torch.Generator().manual_seed(rank)
    out = []
    for _ in range(count):
        stream = torch.randint(0, vocab, (batch, BLOCK + 1), generator=generator)
        out.append((stream[:, :-1].contiguous(), stream[:, 1:].contiguous()))
    return out
