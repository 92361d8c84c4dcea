"""Prints the tables of tokenizer/tokenizers_unicode.cpp: where the Unicode
tables inside PyPI's `tokenizers` and Debian's utf8proc (2.8, Unicode 15)
give other answers. Each is measured on tokenizers itself, over every code
point, so the tables say what tokenizers does, not what a Unicode version
says; TokenizerPartsTest checks basin against tokenizers over every code
point again.

    python unicode_tables.py > tables.txt   (needs tokenizers, libutf8proc.so.2, perl)

- punctuation: what the Punctuation pre-tokenizer isolates (its crate's
  tables are Unicode 8.0's P*, with ASCII's symbols);
- word characters of the Whitespace pre-tokenizer's \\w (Rust's regex crate,
  Unicode 16) that utf8proc's general categories do not make word ones:
  the Other_Alphabetic symbols, and what utf8proc 2.8 does not know yet;
- lowercase mappings that utf8proc_tolower lacks (Rust's char::to_lowercase
  follows the newest Unicode; U+0130 is handled apart, a mapping to two);
- code points that tokenizers' normal forms (Unicode 9.0 tables) treat as
  unassigned but utf8proc gives a combining class, a decomposition or a part
  in a composition: assigned after Unicode 9.0 (perl's Present_In).
"""
import ctypes
import subprocess

from tokenizers import normalizers, pre_tokenizers

UTF8PROC = ctypes.CDLL("libutf8proc.so.2")
UTF8PROC.utf8proc_category.restype = ctypes.c_int
UTF8PROC.utf8proc_tolower.restype = ctypes.c_int32
UTF8PROC.utf8proc_tolower.argtypes = [ctypes.c_int32]


class Property(ctypes.Structure):  # utf8proc_property_t of utf8proc 2.8
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16), ("bidi_class", ctypes.c_int16),
                ("decomp_type", ctypes.c_int16), ("decomp_seqindex", ctypes.c_uint16),
                ("casefold_seqindex", ctypes.c_uint16), ("uppercase_seqindex", ctypes.c_uint16),
                ("lowercase_seqindex", ctypes.c_uint16), ("titlecase_seqindex", ctypes.c_uint16),
                ("comb_index", ctypes.c_uint16), ("bits", ctypes.c_uint32)]


UTF8PROC.utf8proc_get_property.restype = ctypes.POINTER(Property)
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
# utf8proc's categories that make \w: L*, Mn, Mc, Me, Nd, Nl, Pc.
WORD_CATEGORIES = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12}
JOIN_CONTROLS = {0x200C, 0x200D}
WHITE_SPACE = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F,
               0x3000}


def ranges(code_points):
    out = []
    for c in sorted(code_points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def print_ranges(name, code_points):
    items = ["{0x%X, 0x%X}" % (first, last) for first, last in ranges(code_points)]
    print("// %s: %d code points, %d ranges" % (name, len(code_points), len(items)))
    for i in range(0, len(items), 6):
        print("    " + ", ".join(items[i:i + 6]) + ",")


def punctuation():
    text = "a" + "a".join(chr(c) for c in CODE_POINTS) + "a"
    pieces = pre_tokenizers.Punctuation().pre_tokenize_str(text)
    return {ord(piece) for piece, _ in pieces if len(piece) == 1 and piece != "a"}


def extra_word_characters():
    # " a" before each: a word character stays with the a, any other is cut off.
    text = "".join(" a" + chr(c) for c in CODE_POINTS)
    pieces = iter(piece for piece, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text))
    extra = set()
    for c in CODE_POINTS:
        piece = next(pieces)
        if piece == "a" + chr(c):
            if UTF8PROC.utf8proc_category(c) not in WORD_CATEGORIES and c not in JOIN_CONTROLS:
                extra.add(c)
        elif c not in WHITE_SPACE:
            assert piece == "a" and next(pieces) == chr(c), hex(c)
    return extra


def lowercase_additions():
    text = "\n".join(chr(c) for c in CODE_POINTS if c != 0x0A)
    lowered = normalizers.Lowercase().normalize_str(text).split("\n")
    additions = []
    for c, lower in zip((c for c in CODE_POINTS if c != 0x0A), lowered):
        if c != 0x130 and lower != chr(UTF8PROC.utf8proc_tolower(c)):
            assert len(lower) == 1, hex(c)
            additions.append((c, ord(lower) - c))
    return additions


def after_unicode_9_with_normalization():
    listed = subprocess.run(["perl", "-MUnicode::UCD=prop_invlist", "-e",
                             'print join(",", prop_invlist("Present_In=9.0"))'], capture_output=True, text=True,
                            check=True).stdout
    bounds = [int(x) for x in listed.split(",")] + [0x110000]
    in_9 = bytearray(0x110000)
    for i in range(0, len(bounds) - 1, 2):
        in_9[bounds[i]:bounds[i + 1]] = b"\x01" * (bounds[i + 1] - bounds[i])
    opaque = set()
    for c in CODE_POINTS:
        p = UTF8PROC.utf8proc_get_property(c).contents
        if not in_9[c] and p.category != 0 and (p.combining_class != 0 or p.decomp_seqindex != 0xFFFF or
                                                   p.comb_index != 0xFFFF):
            opaque.add(c)
    return opaque


def main():
    print_ranges("punctuation", punctuation())
    print_ranges("extra word characters", extra_word_characters())
    additions = lowercase_additions()
    print("// lowercase additions: %d code points" % len(additions))
    runs = []
    for c, delta in additions:
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == delta:
            runs[-1][1] = c
        else:
            runs.append([c, c, delta])
    print("    " + ", ".join("{0x%X, 0x%X, %d}" % tuple(run) for run in runs))
    print_ranges("after Unicode 9.0, with normalization data", after_unicode_9_with_normalization())


if __name__ == "__main__":
    main()
