"""Tokenizers trained with Hugging Face's `tokenizers` on fortunes, one for
each published tokenizer's components, and the ids `tokenizers` gives for a
set of texts: what TokenizerTest holds basin's C++ tokenizer to.

    python make_fixtures.py OUT_DIR TEXT_FILE...

writes OUT_DIR/<style>/tokenizer.json for each style below, and for the n-th
text (each TEXT_FILE, then the hostile strings of this file, written to
OUT_DIR/texts/) OUT_DIR/<style>/<n>.ids (uint32, little-endian: encode with
add_special_tokens=True) and OUT_DIR/<style>/<n>.decoded (decode of those
ids, special tokens kept). OUT_DIR/texts.json lists the texts in order.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SENTENCEPIECE_SPECIALS = ["<unk>", "<s>", "</s>"]

HOSTILE = [
    "", " ", "   ", "\n", "\n\n\n", "\r\n\r\n", "\t\t  \n \t", "a  b   c    d", "trailing spaces   ",
    "   leading spaces", "x\u00a0y\u3000z\u2028w\u0085v", "emoji 😀👩‍👩‍👧‍👦 🇫🇷 ❤️ done", "中文字符测试，日本語のテキスト、한국어",
    "العربية والعبرية עברית", "e\u0301 cafe\u0301 Å Å ﬁ ①", "z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357o",
    "12345678901234567890 3.14159 1,000,000 ١٢٣ ٤٥",
    "I'M HERE, YOU'RE THERE, it'S 'quoted' we'll they'd",
    "foo<|endoftext|>bar", "<|begin_of_text|>start", "end<|end_of_text|>", "<|im_start|>user\nhi<|im_end|>",
    "<s>[INST] hi [/INST]</s>", "<|endof", "<|begin_of_text|><|begin_of_text|>", "<unk> <0x41> ▁ ▁▁x",
    "nul\x00byte and \x01\x02\x1b[31mcolour\x7f", "a" * 5000, " " * 3000 + "x", "\n" * 500,
    "mixed 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 🤖🤖🤖🤖 and \U0010fffd",
    "Tab\there\tand\tthere.\n-- Author, 1999\n%\n",
]


def train_byte_level(corpus, vocab_size, pre_tokenizer, specials, normalizer=None, ignore_merges=False):
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    return tokenizer


def byte_level_split(pattern):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])


def sentencepiece_style(corpus, vocab_size, metaspace_pre_tokenizer):
    """Llama 2 and Mistral: ▁ for spaces, byte fallback through <0xXX> tokens (ids 3 to 258, as theirs)."""
    trainer_tokenizer = Tokenizer(models.BPE())
    trainer_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SENTENCEPIECE_SPECIALS, show_progress=False,
                                  limit_alphabet=90)
    trainer_tokenizer.train_from_iterator(corpus, trainer)
    trained = json.loads(trainer_tokenizer.to_str())["model"]
    vocab = {token: i for i, token in enumerate(SENTENCEPIECE_SPECIALS)}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ")) for merge in trained["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if metaspace_pre_tokenizer:  # Mistral's and TinyLlama's newer files
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tokenizer.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                                               decoders.ByteFallback(), decoders.Fuse()])
    else:  # Llama 2's file
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                               decoders.Strip(content=" ", left=1, right=0)])
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in SENTENCEPIECE_SPECIALS])
    if not metaspace_pre_tokenizer:  # a user's token, matched in the normalized text (Prepend's ▁ before it) and decoded so
        tokenizer.add_tokens([AddedToken("fortune", normalized=True)])
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tokenizer


def gpt2_style(corpus, vocab_size):
    tokenizer = train_byte_level(corpus, vocab_size, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                                 ["<|endoftext|>"])
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    return tokenizer


def llama3_style(corpus, vocab_size, extra_added_tokens=True):
    tokenizer = train_byte_level(corpus, vocab_size, byte_level_split(LLAMA3_SPLIT), LLAMA3_SPECIALS, ignore_merges=True)
    begin = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", begin)])])
    if extra_added_tokens:  # one matched in normalized text, one that takes the whitespace around it
        tokenizer.add_tokens([AddedToken("fortune", normalized=True), AddedToken("<tab>", lstrip=True, rstrip=True, normalized=False)])
    return tokenizer


def qwen2_style(corpus, vocab_size):
    tokenizer = train_byte_level(corpus, vocab_size, byte_level_split(QWEN2_SPLIT), CHATML_SPECIALS, normalizer=normalizers.NFC())
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def smollm2_style(corpus, vocab_size):
    tokenizer = train_byte_level(corpus, vocab_size, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]), CHATML_SPECIALS)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def styles(corpus):
    return {"gpt2": gpt2_style(corpus, 1200), "llama3": llama3_style(corpus, 1500), "qwen2": qwen2_style(corpus, 1300),
            "smollm2": smollm2_style(corpus, 1100), "llama2": sentencepiece_style(corpus, 1000, False),
            "mistral": sentencepiece_style(corpus, 1000, True)}


def write_texts(out, files, hostile):
    """OUT_DIR/texts.json: the files and the hostile strings, each written to
    OUT_DIR/texts/hostile-<i>.txt; returns their contents, in that order."""
    os.makedirs(os.path.join(out, "texts"), exist_ok=True)
    texts = list(files)
    for i, text in enumerate(hostile):
        path = os.path.join(out, "texts", "hostile-%02d.txt" % i)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        texts.append(path)
    with open(os.path.join(out, "texts.json"), "w") as f:
        json.dump(texts, f)
    contents = []
    for path in texts:
        with open(path, encoding="utf-8", newline="") as f:
            contents.append(f.read())
    return contents


def main():
    out, files = sys.argv[1], sys.argv[2:]
    contents = write_texts(out, files, HOSTILE)
    corpus = contents[:len(files)]
    for name, tokenizer in styles(corpus).items():
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        tokenizer.save(os.path.join(folder, "tokenizer.json"))
        encodings = tokenizer.encode_batch(contents, add_special_tokens=True)
        for n, encoding in enumerate(encodings):
            with open(os.path.join(folder, "%d.ids" % n), "wb") as f:
                f.write(b"".join(i.to_bytes(4, "little") for i in encoding.ids))
            with open(os.path.join(folder, "%d.decoded" % n), "w", encoding="utf-8", newline="") as f:
                f.write(tokenizer.decode(encoding.ids, skip_special_tokens=False))


if __name__ == "__main__":
    main()
