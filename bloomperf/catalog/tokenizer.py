"""BLOOM's tokenizer files for a built checkpoint: a byte-level BPE trained here in under a
second on the workload's prompts and plain English, with BLOOM's special tokens and ids."""

from __future__ import annotations

import json
from typing import Any

from bloomperf.catalog.models import BOS_ID, EOS_ID, MODEL_SHAPES, PAD_ID, SPECIAL_TOKENS, UNK_ID
from bloomperf.catalog.workload import PROMPTS
from bloomperf.core.errors import BloomperfError

TOKENIZER_VOCAB_SIZE = MODEL_SHAPES["tiny"].vocab_size
# Byte-level BPE starts from all 256 bytes plus BLOOM's 4 special tokens.
MIN_TOKENIZER_VOCAB = 256 + len(SPECIAL_TOKENS)


# The tokenizer's training text: the workload's prompts plus plain English on the blog's topics,
# enough distinct words for TOKENIZER_VOCAB_SIZE byte-level BPE tokens. Written for this project.
TOKENIZER_CORPUS = """\
Large language models are served on machines with several accelerators, because the weights
of the biggest ones do not fit in the memory of a single device. BLOOM has one hundred and
seventy six billion parameters, seventy transformer blocks and a vocabulary of a quarter of a
million tokens. In half precision its weights need three hundred and fifty two gigabytes, so an
inference server splits them over eight GPUs, either layer by layer (pipeline parallelism) or by
cutting every matrix into slices (tensor parallelism).
Accelerate places whole layers on each device and moves the hidden states from one GPU to the
next; only one device works at any moment, which keeps the code simple but leaves most of the
hardware idle. DeepSpeed-Inference shards each matrix across all devices, replaces the attention
and feed-forward modules with fused CUDA kernels, and pre-allocates a workspace for the key and
value cache. ZeRO offloads parameters to the CPU or to fast NVMe storage and gathers every layer
just before it is needed, trading throughput for the ability to run on small clusters.
We measure the time to load the checkpoint, the latency of each generated token, the throughput
at growing batch sizes, and the peak memory on every device. A batch that no longer fits raises an
out-of-memory error; the largest batch that still runs is the boundary we track from release to
release. Greedy decoding with exactly one hundred new tokens keeps the amount of work identical
between backends, so a slower number means slower software, not a longer answer.
Quantization to eight bits halves the memory again and lets the whole model sit on fewer cards,
although the extra conversions make each step slower. Benchmarks are noisy: warm up first,
synchronise the device before reading the clock, repeat the cycle a few times and report the
median together with its spread. Compare every figure against a stored baseline for the same
topology, and flag only the differences that are larger than the noise.
The weather was calm over the harbour this morning. Fishermen mended their nets while children
raced along the quay, shouting at the gulls. A baker opened her shop early; the smell of fresh
bread drifted through the narrow streets toward the old church and the market square. Farmers
arrived with carts of apples, cabbages, cheese, honey and eggs, and a violinist played near the
fountain. Later, clouds gathered above the hills, thunder rumbled in the distance, and everybody
hurried home before the rain. Quietly, the lighthouse keeper climbed the spiral stairs, lit the
lamp and watched the waves breaking against the rocks until midnight.
Mathematics, physics, chemistry, biology, history, geography, literature, music and painting
were taught in the small village school. Students learned to read maps, solve equations, measure
angles, write letters, sing songs, build bridges from paper and grow beans in jars by the window.
Numbers: zero one two three four five six seven eight nine ten twenty thirty forty fifty hundred
thousand million billion; 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 14336.
Punctuation and symbols: . , ; : ! ? ' " ( ) [ ] { } < > / \\ | - _ + = * & ^ % $ # @ ~ `.
"""


def tokenizer_files(vocab_size: int) -> dict[str, dict[str, Any]]:
    """tokenizer.json and tokenizer_config.json: a byte-level BPE trained on TOKENIZER_CORPUS
    (under a second), loadable by AutoTokenizer.

    ``vocab_size`` is at most the model's, so every id it makes is in range.
    """
    if vocab_size < MIN_TOKENIZER_VOCAB:
        raise BloomperfError(f"tokenizer: vocab_size {vocab_size} < {MIN_TOKENIZER_VOCAB} (bytes)")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([*PROMPTS, *TOKENIZER_CORPUS.splitlines()], trainer)
    saved = json.loads(tokenizer.to_str())
    # Merges as "a b" strings, the format tokenizers < 0.20 (transformers 4.43's) can read; newer
    # versions read it too. Byte-level tokens never contain a space, so the split is unambiguous.
    # tokenizers < 0.20 already writes strings: join only pairs.
    saved["model"]["merges"] = [
        pair if isinstance(pair, str) else " ".join(pair) for pair in saved["model"]["merges"]
    ]
    # BloomTokenizerFast: transformers 4.x has that class; 5.x maps the name to its fast backend.
    config = {
        "tokenizer_class": "BloomTokenizerFast",
        "unk_token": SPECIAL_TOKENS[UNK_ID],
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "padding_side": "left",
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
    }
    return {"tokenizer.json": saved, "tokenizer_config.json": config}
