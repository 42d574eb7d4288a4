"""pride inside Hugging Face's Trainer and PyTorch Lightning (from PyPI; each skipped without them).

Two CPU ranks train a tiny GPT-2 with DistributedLion under Trainer, started the supported way
(pride.integrations.hf.init_process_group() before TrainingArguments): the loss falls, from the second
step on the bytes pride sends are the vote's (DDP's gradient allreduce is gone), the replicas stay
identical, and a checkpoint resumes. The same for Lightning's Trainer with
DDPStrategy(process_group_backend="pride").
"""

import os
import socket

import pytest
import torch
import torch.distributed as dist

from distributed_harness import run



def _need_hf():
    pytest.importorskip("transformers")
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
    _need_hf()
    run(_hf_trainer, 2, _free_port(), deadline_s=300)


# ---- PyTorch Lightning: Trainer(strategy=DDPStrategy(process_group_backend="pride")) ----

def _lightning(rank, world, store_path, port, attach):
    import logging

    # What torchrun gives each rank: Lightning then runs in these processes instead of spawning its own.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      GROUP_RANK="0", ROLE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCHELASTIC_RUN_ID="pride-test", OMP_NUM_THREADS="1")
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    import pride

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
            self.losses = []

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            opt = pride.optim.DistributedLion(self.parameters(), lr=1e-2)
            if attach:  # Lightning has wrapped the model in DDP by now
                opt.attach(self.trainer.strategy.model)
            return opt

    per_step = []

    class CountBytes(L.Callback):
        def on_train_batch_start(self, *args):
            pride.reset_stats()

        def on_train_batch_end(self, *args):
            per_step.append(pride.stats()["bytes_sent"])

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 32, generator=g)
    y = (x[:, :4].argmax(dim=1))  # learnable: the largest of the first four features
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    out = os.path.join(os.path.dirname(store_path), "lightning")

    def trainer(steps, callbacks):
        # (DDPStrategy(ddp_comm_hook=...) registers hooks on CUDA only; opt.attach works everywhere.)
        strategy = DDPStrategy(process_group_backend="pride")
        return L.Trainer(accelerator="cpu", devices=world, num_nodes=1, strategy=strategy, max_steps=steps,
                         callbacks=callbacks, default_root_dir=out, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, use_distributed_sampler=True)

    model = Net()
    fit = trainer(16, [CountBytes()])
    fit.fit(model, data)
    assert dist.get_backend() == "pride"
    assert sum(model.losses[-4:]) < 0.85 * sum(model.losses[:4]), model.losses
    fp32_gradient_bytes = 4 * sum(p.numel() for p in model.parameters())
    # Attached in configure_optimizers, even the first step sends only the vote; otherwise the optimizer
    # attaches the hook at its first step and DDP's allreduce happens once.
    first = 0 if attach else 1
    assert attach or per_step[0] > fp32_gradient_bytes / 2, per_step
    assert all(sent < fp32_gradient_bytes / 8 for sent in per_step[first:]), (per_step, fp32_gradient_bytes)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1])

    # Lightning's checkpoint holds rank 0's optimizer state: resuming starts every rank from it (logged).
    ckpt = os.path.join(out, "step16.ckpt")
    fit.save_checkpoint(ckpt)
    notes = []
    handler = logging.Handler()
    handler.emit = lambda record: notes.append(record.getMessage())
    logging.getLogger("pride").addHandler(handler)
    resumed = Net()
    trainer(20, []).fit(resumed, data, ckpt_path=ckpt)
    logging.getLogger("pride").removeHandler(handler)
    assert any("rank 0 of 2 saved" in n for n in notes) == (rank != 0), notes
    flat = torch.cat([p.detach().flatten() for p in resumed.parameters()])
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1])
    dist.destroy_process_group()


def test_lightning_ddp_with_distributed_lion_sends_only_the_vote():
    # opt.attach in configure_optimizers, the way the README shows; the optimizer attaching the hook at
    # its first step is tested under Hugging Face's Trainer above (and in test_ddp.py). Both variants
    # pass here; one is run to keep CI short.
    pytest.importorskip("lightning")
    run(_lightning, 2, _free_port(), True, deadline_s=300)
