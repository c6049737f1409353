"""``vllm bench serve`` against fastmode, unchanged: the legacy /v1/completions endpoint as
benchmark tools use it.

vLLM is a large GPU-oriented install, so it is not a fastmode dependency: point ``--vllm`` (or
``$VLLM``) at a ``vllm`` executable from its own virtualenv (``python -m venv v &&
v/bin/pip install vllm``; on a machine without CUDA, uninstall the ``torchvision``,
``torchaudio`` and ``torchcodec`` wheels it pulls in if their native libraries fail to load:
the benchmark client needs none of them). Without one, the script says so and exits 0.

The random dataset needs a tokenizer and fastmode has no vocabulary, so a small word-level
Hugging Face tokenizer is built locally (with the ``tokenizers`` package vLLM already has):
nothing is downloaded. The script starts ``fastmode serve`` on a free loopback port, runs

    vllm bench serve --backend openai --endpoint /v1/completions --model frontier \\
        --tokenizer DIR --dataset-name random --random-input-len 1024 \\
        --random-output-len 128 --num-prompts N --request-rate R --ignore-eos

and prints vLLM's own summary (TTFT, TPOT, ITL, throughput) as it reports it.

Usage: python bench/vllm_bench_serve.py [--vllm PATH] [--num-prompts N] [--request-rate R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from bench.harness import start_gateway, stop

TOKENIZER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    words = ["[UNK]"] + [f"w{i}" for i in range(4000)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    out = Path(sys.argv[1])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
        "model_max_length": 131072}))
''')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", default=os.environ.get("VLLM") or shutil.which("vllm"))
    ap.add_argument("--num-prompts", type=int, default=100)
    ap.add_argument("--request-rate", type=float, default=5.0)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=128)
    args = ap.parse_args()
    if not args.vllm or not Path(args.vllm).exists():
        print("skipped: no vllm executable (pass --vllm or set $VLLM); see the docstring")
        return 0
    python = str(Path(args.vllm).parent / "python")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([python, "-c", TOKENIZER, tmp], check=True)
        proc, url = start_gateway()
        try:
            cmd = [args.vllm, "bench", "serve", "--backend", "openai", "--base-url", url,
                   "--endpoint", "/v1/completions", "--model", "frontier", "--tokenizer", tmp,
                   "--dataset-name", "random", "--random-input-len", str(args.input_len),
                   "--random-output-len", str(args.output_len), "--num-prompts",
                   str(args.num_prompts), "--request-rate", str(args.request_rate),
                   "--ignore-eos", "--seed", "1"]
            print("$", " ".join(cmd[1:]))
            done = subprocess.run(cmd, capture_output=True, text=True,
                                  env={**os.environ, "OPENAI_API_KEY": "fastmode"})
            out = done.stdout
            start = out.find("============ Serving Benchmark Result")
            print(out[start:] if start >= 0 else out[-4000:])
            if done.returncode != 0:
                print(done.stderr[-4000:], file=sys.stderr)
                return done.returncode
        finally:
            stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
