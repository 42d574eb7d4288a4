"""Hugging Face Trainer with pride's DistributedLion: a tiny GPT-2 learns to count, on CPU ranks.

    torchrun --standalone --nproc-per-node 2 examples/hf_trainer_distributed_lion.py [--steps 30]

Needs transformers and accelerate (pip install transformers accelerate). The one pride-specific line
before TrainingArguments starts pride's process group; accelerate then keeps it (on CPUs it would
refuse ddp_backend="pride" and start Gloo). The optimizer's first step registers a DDP hook that
keeps gradients local, so from the second step on only the 1-bit vote crosses the network.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import pride
import pride.integrations.hf


class Counting(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = (torch.arange(32) + i * 7) % 64
        return {"input_ids": ids, "labels": ids}


class BytesPerStep(TrainerCallback):
    """Prints what pride sent in each step (rank 0)."""

    def on_step_begin(self, args, state, control, **kwargs):
        pride.reset_stats()

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(f"step {state.global_step}: pride sent {pride.stats()['bytes_sent'] / 1e3:.1f} kB", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    parser.add_argument("--output-dir", default="hf_trainer_out", help="checkpoints go here (default hf_trainer_out)")
    args = parser.parse_args()

    pride.integrations.hf.init_process_group()  # before TrainingArguments
    training = TrainingArguments(output_dir=args.output_dir, per_device_train_batch_size=8, max_steps=args.steps,
                                 logging_steps=5, report_to=[], use_cpu=True, save_strategy="no", seed=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=2, n_head=2))
    opt = pride.optim.DistributedLion(model.parameters(), lr=3e-3)
    trainer = Trainer(model=model, args=training, train_dataset=Counting(), optimizers=(opt, None),
                      callbacks=[BytesPerStep()])
    trainer.train()
    params = sum(p.numel() for p in model.parameters())
    if trainer.is_world_process_zero():
        print(f"{params} parameters: fp32 gradients would be {4 * params / 1e3:.1f} kB per step")


if __name__ == "__main__":
    main()
