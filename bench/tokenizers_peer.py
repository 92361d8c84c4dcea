"""The peer of basin-tokenize: Hugging Face's `tokenizers` encoding the same
files with the same tokenizer.json, on one thread (RAYON_NUM_THREADS=1),
each file one encode call without special tokens, as basin-tokenize does.
Prints the best of --repeats as "seconds tokens".

    python tokenizers_peer.py TOKENIZER_JSON FILE...
"""
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

tokenizer = Tokenizer.from_file(sys.argv[1])
texts = [open(path, encoding="utf-8", newline="").read() for path in sys.argv[2:]]
best = None
for _ in range(3):
    start = time.perf_counter()
    count = sum(len(tokenizer.encode(text, add_special_tokens=False).ids) for text in texts)
    elapsed = time.perf_counter() - start
    best = elapsed if best is None else min(best, elapsed)
print("%.4f %d" % (best, count))
