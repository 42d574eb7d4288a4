"""pride inside Hugging Face's Trainer (transformers + accelerate from PyPI; skipped without them).

Two CPU ranks train a tiny GPT-2 with DistributedLion under Trainer, started the supported way
(pride.integrations.hf.init_process_group() before TrainingArguments): the loss falls, from the second
step on the bytes pride sends are the vote's (DDP's gradient allreduce is gone), the replicas stay
identical, and a checkpoint resumes.
"""

import os
import socket

import pytest
import torch
import torch.distributed as dist

from distributed_harness import run

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Counting(torch.utils.data.Dataset):
    """Sequences that count up modulo the vocabulary: easy to learn, so the loss visibly falls."""

    def __len__(self):
        return 512

    def __getitem__(self, i):
        ids = (torch.arange(32) + i * 7) % 64
        return {"input_ids": ids, "labels": ids}


def _trainer(rank, out, max_steps, callbacks):
    import pride
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=max_steps, logging_steps=1,
                             save_steps=6, save_strategy="steps", report_to=[], use_cpu=True, disable_tqdm=True,
                             seed=0, data_seed=0, dataloader_num_workers=0)
    assert dist.get_backend() == "pride", "accelerate must keep the group pride started"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    opt = pride.optim.DistributedLion(model.parameters(), lr=3e-3)
    trainer = Trainer(model=model, args=args, train_dataset=_Counting(), optimizers=(opt, None), callbacks=callbacks)
    return trainer, model


def _hf_trainer(rank, world, store_path, port):
    import logging

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import pride
    import pride.integrations.hf
    from transformers import TrainerCallback

    assert pride.integrations.hf.init_process_group() is True
    assert pride.integrations.hf.init_process_group() is False  # a second call keeps the group

    per_step = []

    class CountBytes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            pride.reset_stats()

        def on_step_end(self, args, state, control, **kwargs):
            s = pride.stats()
            gradient_allreduce = sum(v["bytes_sent"] for k, v in s["per_algorithm"].items() if k.startswith("allreduce"))
            per_step.append((s["bytes_sent"], gradient_allreduce))

    out = os.path.join(os.path.dirname(store_path), "out")
    trainer, model = _trainer(rank, out, 12, [CountBytes()])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 12 and losses[-1] < 0.9 * losses[0], losses
    fp32_gradient_bytes = 4 * sum(p.numel() for p in model.parameters())
    # Step 1: DDP still all-reduced (the optimizer attaches the hook at its first step). Then: the vote.
    assert per_step[0][1] > fp32_gradient_bytes / 2, per_step[0]
    for sent, allreduce in per_step[1:]:
        assert allreduce < 0.01 * fp32_gradient_bytes and sent < fp32_gradient_bytes / 8, (sent, fp32_gradient_bytes)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1])

    # Resume from the step-6 checkpoint: Trainer saved rank 0's optimizer state only; every rank starts
    # from it (logged on the other ranks), trains to step 12, and the replicas stay identical.
    notes = []
    handler = logging.Handler()
    handler.emit = lambda record: notes.append(record.getMessage())
    logging.getLogger("pride").addHandler(handler)
    resumed_trainer, resumed = _trainer(rank, out + "-resumed", 12, [])
    resumed_trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-6"))
    logging.getLogger("pride").removeHandler(handler)
    assert resumed_trainer.state.global_step == 12
    assert any("rank 0 of 2 saved" in n for n in notes) == (rank != 0), notes
    flat = torch.cat([p.detach().flatten() for p in resumed.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1])
    dist.destroy_process_group()


def test_hf_trainer_with_distributed_lion_sends_only_the_vote():
    run(_hf_trainer, 2, _free_port(), deadline_s=300)
