"""The random-token dataset the Hugging Face tests train on (test_hf_trainer.py, hf_torchrun.py): @n windows of
SEQ tokens below VOCAB from a fixed generator, each its own labels (GPT2LMHeadModel shifts them)."""
import torch

VOCAB, SEQ = 96, 16


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=160):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}
