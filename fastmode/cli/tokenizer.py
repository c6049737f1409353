"""``fastmode tokenizer DIR``: the server's tokenizer as a Hugging Face tokenizer folder.

    fastmode tokenizer ./tok
    aiperf profile ... --tokenizer ./tok        # guidellm: --tokenizer kind=huggingface_auto,model=./tok

``tokenizer.json`` + ``tokenizer_config.json`` (``PreTrainedTokenizerFast``): the ``tokenizers``
and ``transformers`` libraries load it offline, and it counts every text as the server does
(``backends.hf_tokenizer``). See docs/verify.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fastmode.backends import hf_tokenizer
from fastmode.cli._common import UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tokenizer", help="write the server's tokenizer as a Hugging Face tokenizer folder",
        description="Write tokenizer.json and tokenizer_config.json into DIR: a Hugging Face "
                    "tokenizer that counts tokens exactly as fastmode does, for load generators "
                    "(--tokenizer DIR) and routers that need the model's tokenizer offline.")
    p.add_argument("dir", help="the folder to write (made if missing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: exists and is not a folder")
    try:
        files = hf_tokenizer.write(folder)
    except OSError as exc:
        raise UsageError(f"{folder}: {exc}") from None
    for f in files:
        print(f)
    return 0
