"""What TokenizerPartsTest holds basin's C++ tokenizer to for the parts
beside the published Llama-family ones: the Punctuation pre-tokenizer with
each behavior (Falcon's file uses it), Whitespace, WhitespaceSplit, and the
Strip and Lowercase normalizers; and what tokenizers makes of every code
point under them (Strip's whitespace is WhitespaceSplit's) and under the
four normal forms.

    python make_parts_fixtures.py ids OUT_DIR TEXT_FILE...
    python make_parts_fixtures.py code-points OUT_DIR

`ids` trains a tokenizer on the files for each style below and writes what
make_fixtures.py writes (OUT_DIR/<style>/tokenizer.json, <n>.ids,
<n>.decoded, OUT_DIR/texts.json) for the files, make_fixtures.py's hostile
strings and this file's. `code-points` writes OUT_DIR/cases.json: for each
component, an input file and what tokenizers gives (the normalized text,
or the pre-tokenizer's pieces as a JSON list).
"""
import json
import os
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from make_fixtures import HOSTILE, write_texts

# Punctuation of many scripts, marks, emoji, the case mappings that change
# lengths or need context, whitespace Rust's char::is_whitespace knows.
PARTS_HOSTILE = [
    "«Quoi ?» ¿Qué? ¡Sí! 「引用」、句点。 ‹single› „low“ ‚x‘", "a‐b–c—d―e ‒f ⸺g⸻h", "(x)[y]{z}<w> 1+2=3 $5 ^_^ `tick` a|b ~c",
    "...!!!???,,,;;;::: --- '''\"\"\"", "a!b!!c!!!d", "!start and end!", "؟،؛ ۔ ። ፣ । ॥ ၊ ။ ៕ ꧁꧂ 〈〉《》【】",
    "İstanbul İİ ıI ẞtraße SS ß", "ΟΔΥΣΣΕΥΣ ΣΑΣ Σ σς", "Ǆemal ǅemal ǆemal ǈ Ǌ", "ÅNGSTRÖM K Ω ﬀ Ⅻ ⓐⒶ 🄰🅐",
    "A\u0301 E\u0300\u0323 O\u0308\u0304 z\u0351\u0352 ﷺ ǅ\u0301",
    "👍🏽 👨‍💻 🏳️‍🌈 #️⃣ 🇯🇵🇺🇸 ☕️!", "\t tabs\tand\nnewlines\r\n and\u00a0nbsp\u2009thin\u3000ideographic ",
    "\u00a0\u00a0lead and trail\u2003\u2003", "\u0085next line\u2028line\u2029para\u000bvt\u000cff", "under_score snake_case_name __init__",
    "a\u200db\u200cc zero\u200bwidth", "x²³ ½ ① ⅷ 10% ١٢٣ 𝟘𝟙", "𐤀𐤁 𑁇𑁈 𝔘𝔫𝔦 ꓽ꓿ 𖩮", "a <|endoftext|> b  <|endoftext|>  ",
    "FORTUNE Fortune fortune", "\u037e;\u0387·",
]


def train(corpus, tokenizer, vocab_size, specials, byte_level):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else [])
    tokenizer.train_from_iterator(corpus, trainer)
    return tokenizer


def byte_level(pre_tokenizer, normalizer=None):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def punctuation_style(behavior):
    return byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior=behavior),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))


def falcon_style():
    """Falcon's pre-tokenizer, as its tokenizer.json has it."""
    return byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False)]))


def whitespace_style():
    """BERT-like: stripped and lowercased, cut by \\w+|[^\\w\\s]+; what the vocabulary lacks is [UNK]."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Strip(left=True, right=True), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def whitespace_split_style():
    return byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(left=True, right=False)]))


def strip_right_style():
    return byte_level(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
                      normalizers.Sequence([normalizers.Strip(left=False, right=True), normalizers.Lowercase()]))


def styles(corpus):
    made = {"punctuation-" + behavior: train(corpus, punctuation_style(behavior), 700, ["<|endoftext|>"], True)
            for behavior in ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")}
    made["falcon"] = train(corpus, falcon_style(), 800, ["<|endoftext|>"], True)
    made["whitespace"] = train(corpus, whitespace_style(), 900, ["[UNK]", "<|endoftext|>"], False)
    made["whitespace-split"] = train(corpus, whitespace_split_style(), 800, ["<|endoftext|>"], True)
    made["strip-right"] = train(corpus, strip_right_style(), 800, ["<|endoftext|>"], True)
    # Added tokens matched in the normalized text: lowercased and stripped as it is.
    made["whitespace"].add_tokens([AddedToken("FORTUNE ", normalized=True)])
    made["strip-right"].add_tokens([AddedToken(" Fortune", normalized=True)])
    return made


def write_ids(out, files):
    contents = write_texts(out, files, HOSTILE + PARTS_HOSTILE)
    for name, tokenizer in styles(contents[:len(files)]).items():
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        tokenizer.save(os.path.join(folder, "tokenizer.json"))
        for n, encoding in enumerate(tokenizer.encode_batch(contents, add_special_tokens=True)):
            with open(os.path.join(folder, "%d.ids" % n), "wb") as f:
                f.write(b"".join(i.to_bytes(4, "little") for i in encoding.ids))
            with open(os.path.join(folder, "%d.decoded" % n), "w", encoding="utf-8", newline="") as f:
                f.write(tokenizer.decode(encoding.ids, skip_special_tokens=False))


# Every code point of planes 0-3 and 14, where all assigned characters lie
# (4-13 hold none, 15 and 16 private use only), but the surrogates and the
# newline that separates the lines.
CODE_POINTS = [c for c in [*range(0x40000), *range(0xE0000, 0xE1000)] if not 0xD800 <= c <= 0xDFFF and c != 0x0A]

# Each code point alone, after a base letter, on either side of U+0323 (a
# below mark of class 220, which marks of other classes reorder with), and
# decomposed by Python's tables (Unicode 14), whose pairs NFC would join.
PATTERNS = {
    "alone": lambda c: chr(c),
    "after-a": lambda c: "a" + chr(c),
    "before-0323": lambda c: "a" + chr(c) + "\u0323",
    "after-0323": lambda c: "a\u0323" + chr(c),
    "decomposed": lambda c: unicodedata.normalize("NFD", chr(c)),
}


def write_code_points(out):
    os.makedirs(out, exist_ok=True)
    cases = []

    def write(name, text, expected, component, kind):
        with open(os.path.join(out, name + ".in"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        with open(os.path.join(out, name + ".out"), "w", encoding="utf-8", newline="") as f:
            f.write(expected if kind == "normalizer" else json.dumps(expected))
        cases.append({"name": name, "kind": kind, "component": json.loads(component.__getstate__())})

    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        normalizer = getattr(normalizers, form)()
        for pattern, make in PATTERNS.items():
            text = "\n".join(make(c) for c in CODE_POINTS)
            write(form + "-" + pattern, text, normalizer.normalize_str(text), normalizer, "normalizer")
    text = "\n".join(chr(c) for c in CODE_POINTS)
    write("Lowercase", text, normalizers.Lowercase().normalize_str(text), normalizers.Lowercase(), "normalizer")
    # Each code point between letters: its own piece where it is punctuation
    # or neither \w nor \s, a cut where it is whitespace.
    pre_tokenizer_inputs = {
        "Punctuation": "a" + "a".join(chr(c) for c in CODE_POINTS) + "a",
        "Whitespace": "".join(" a" + chr(c) for c in CODE_POINTS),
        "WhitespaceSplit": "".join("a" + chr(c) for c in CODE_POINTS),
    }
    for name, text in pre_tokenizer_inputs.items():
        pre_tokenizer = getattr(pre_tokenizers, name)()
        write(name, text, [piece for piece, _ in pre_tokenizer.pre_tokenize_str(text)], pre_tokenizer, "pre_tokenizer")
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "ids":
        write_ids(out, sys.argv[3:])
    elif mode == "code-points":
        write_code_points(out)
    else:
        sys.exit("expected 'ids' or 'code-points', not " + mode)


if __name__ == "__main__":
    main()
