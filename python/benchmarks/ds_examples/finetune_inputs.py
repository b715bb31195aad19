"""finetune_inputs.py OUT LAYERS HIDDEN [llama|moe] - local stand-ins for the hub model and dataset that
DeepSpeedExamples' training/DeepSpeed-SuperOffload/finetune_zero3.py downloads (no network here):
  OUT/data/train.json   alpaca-format rows (instruction, input, output) from the fortune files of $ZO_CORPUS
                        (default Debian's, /usr/share/games/fortunes, as vs_deepspeed.py): input the fortune's first
                        line, output the rest; the script's --dataset_name takes the directory
  OUT/model             a byte-level BPE tokenizer (2,000 tokens) trained on the same text, and a randomly
                        initialised (seed 0) Llama (llama) or Qwen3-MoE with 8 experts, 2 per token (moe), saved
                        with save_pretrained; the script's --model_name takes the directory
Needs transformers and tokenizers (the torch 2 venv of scripts/torch2-env.sh has both)."""
import glob
import json
import os
import sys

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)


CORPUS = os.environ.get("ZO_CORPUS", "/usr/share/games/fortunes")


def rows_and_texts():
    rows, texts = [], []
    for f in sorted(glob.glob(os.path.join(CORPUS, "*"))):
        if "." in os.path.basename(f) or os.path.isdir(f) or os.path.islink(f):
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            for fortune in fh.read().split("\n%\n"):
                lines = fortune.strip("\n").split("\n")
                if len(lines) < 2:
                    continue
                rows.append({"instruction": "Continue this fortune from the %s collection." % os.path.basename(f),
                             "input": lines[0], "output": "\n".join(lines[1:])})
                texts.append(fortune)
    if not rows:
        sys.exit("finetune_inputs.py: no fortunes under %s (ZO_CORPUS; Debian's: apt-get install fortunes)" % CORPUS)
    return rows, texts


def main():
    if len(sys.argv) not in (4, 5) or (len(sys.argv) == 5 and sys.argv[4] not in ("llama", "moe")):
        sys.exit(__doc__)
    out, layers, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    kind = sys.argv[4] if len(sys.argv) == 5 else "llama"
    rows, texts = rows_and_texts()
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    with open(os.path.join(out, "data", "train.json"), "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=2000, special_tokens=["<s>", "</s>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(os.path.join(out, "model"))
    torch.manual_seed(0)
    common = dict(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, max_position_embeddings=1024,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    if kind == "moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(intermediate_size=hidden * 2, moe_intermediate_size=hidden // 2,
                                                   num_experts=8, num_experts_per_tok=2, head_dim=64, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(intermediate_size=hidden * 8 // 3 // 64 * 64 + 64, **common))
    model.save_pretrained(os.path.join(out, "model"))
    print("finetune_inputs.py: %d rows, vocabulary %d, %s with %d parameters in %s"
          % (len(rows), len(tok), kind, sum(p.numel() for p in model.parameters()), out))


if __name__ == "__main__":
    main()
