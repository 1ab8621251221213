#!/usr/bin/env python3
"""Writes the tokenizer `pagedkv serve` ships and uses by default (data/tokenizer/): one token per
character of printable ASCII, tab, newline, carriage return, Latin-1's printable characters and
typographic quotes and dashes; " the" as one token (the text of every generated token); any other
character an unknown token (a run of them one), and `<|endoftext|>` as the end of text. A Unigram
model whose " the" scores above its four characters, so encoding picks it wherever it occurs;
no pre-tokenizer; the decoder joins the pieces. About 6 KB; loaded by the Rust `tokenizers` crate
(`pagedkv serve`) and by transformers' AutoTokenizer from the folder (`--tokenizer
data/tokenizer` for vllm bench serve, guidellm, inference-perf, AIPerf), with no network.

Why characters and not bytes: clients that build random prompts from random token ids (vllm
bench serve's random dataset, inference-perf's random data, AIPerf) decode them and encode the
text again, expecting the same count; a lone byte above 0x7f decodes to U+FFFD, which a byte-level
vocabulary encodes as three tokens, and inference-perf gives up on such a prompt. Here every
token but the two special ones decodes to text that encodes back to it, and " the" repeated n
times encodes to n tokens, so a client that re-tokenizes the output counts what the server
generated. The chat template joins the messages' text one per line, as the server builds a chat
prompt. Needs only the standard library:
    python3 scripts/write-shipped-tokenizer.py [DIR]     (default data/tokenizer)"""

import json
import os
import sys

CHAR_SCORE = -5.0
# Above four characters (4 x -5), so the best segmentation takes " the" whole.
THE_SCORE = -4.0


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer")
    os.makedirs(out, exist_ok=True)
    chars = ([chr(c) for c in range(0x20, 0x7f)] + ["\t", "\n", "\r"]
             + [chr(c) for c in range(0xa1, 0x100) if c != 0xad]
             + ["\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014", "\u2026"])
    vocab = [["<unk>", 0.0]] + [[c, CHAR_SCORE] for c in chars] + [[" the", THE_SCORE]]
    eos = "<|endoftext|>"
    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special(0, "<unk>"), special(len(vocab), eos)],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": False},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": eos,
        "eos_token": eos,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1048576,
        "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    print(out)


main()
