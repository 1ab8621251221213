#!/usr/bin/env python3
"""Writes a small word-level tokenizer (tokenizer.json + tokenizer_config.json) that both the Rust
`tokenizers` crate (`pagedkv serve --tokenizer DIR/tokenizer.json`) and transformers'
AutoTokenizer (`vllm bench serve --tokenizer DIR`) load, with no network: WORDS words w0, w1, …
(default 131,072) and [UNK], split on whitespace, so decoding N ids and encoding the text again
gives N tokens. A large vocabulary keeps the random dataset's prompts (runs of consecutive ids
from random offsets) from sharing blocks by chance. Run outside CI with a Python that has
`tokenizers`:  python scripts/minimal-tokenizer.py DIR [WORDS]"""

import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

out = sys.argv[1]
words = int(sys.argv[2]) if len(sys.argv) > 2 else 131072
os.makedirs(out, exist_ok=True)
vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(words)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
               "model_max_length": 131072}, f)
print(out)
