"""Trains the tokenizer examples/configs/fortunes_llama.json reads: a byte-level
BPE built like Llama 3's (its split regex, ignore_merges, <|begin_of_text|>
template), 2048 tokens, on Debian's fortunes, with PyPI's `tokenizers`
(scripts/hf-python.sh's Python has it):

    $(bash scripts/hf-python.sh) scripts/train_tokenizer.py examples/tokenizers/fortunes_bpe.json

The file is committed, so that the example needs no Python; this is how it was made.
"""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "tokenizer"))
from make_fixtures import llama3_style  # noqa: E402  (the tests' builders, one per published tokenizer)

# The example tests on wisdom: the tokenizer learns from the training files alone.
files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
               if os.path.isfile(f) and not f.endswith((".dat", ".u8")) and os.path.basename(f) != "wisdom")
corpus = [open(f, encoding="utf-8", newline="").read() for f in files]
llama3_style(corpus, 2048, extra_added_tokens=False).save(sys.argv[1])
print("train_tokenizer.py: %s from %d files" % (sys.argv[1], len(files)))
