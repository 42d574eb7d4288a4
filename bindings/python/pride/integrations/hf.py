"""pride under Hugging Face's Trainer and accelerate.

accelerate picks the process group's backend itself. On GPUs it passes ``ddp_backend`` on to
``init_process_group`` (``TrainingArguments(ddp_backend="pride")`` works there); on CPUs it knows only
"gloo" and "mpi" and refuses any other name ("Your assigned backend pride is not available"). It does
not start a process group when one exists. So the supported way, on CPUs and GPUs alike, is to start
pride's group before accelerate's state is created, which ``TrainingArguments`` does::

    import pride.integrations.hf
    pride.integrations.hf.init_process_group()        # before TrainingArguments / Accelerator
    args = TrainingArguments(output_dir=..., ...)     # no ddp_backend
    opt = pride.optim.DistributedLion(model.parameters(), lr=3e-4)
    trainer = Trainer(model=model, args=args, optimizers=(opt, None), ...)

The Trainer wraps the model in DistributedDataParallel after the optimizer exists; the optimizer's
first step finds that model and registers pride.ddp_hooks.local_gradients_hook (the first step's
gradients were still all-reduced), so from then on only the vote crosses the network.
"""

import os
from datetime import timedelta

import torch.distributed as dist


def init_process_group(timeout=timedelta(minutes=30)):
    """Starts the default process group with the pride backend from the launcher's environment
    (torchrun, accelerate launch: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), unless a pride group is
    already there. Raises, naming the fix, if another backend's group was started first (accelerate
    starts Gloo on CPUs when TrainingArguments is built before this is called).
    Returns whether this call started the group."""
    import pride  # noqa: F401  registers the backend

    if dist.is_initialized():
        backend = dist.get_backend()
        if "pride" in str(backend):
            return False
        raise RuntimeError(
            f"pride.integrations.hf: a process group with backend {backend!r} exists already (accelerate starts "
            "one when TrainingArguments or Accelerator is created); call pride.integrations.hf.init_process_group() "
            "before creating them")
    if "WORLD_SIZE" not in os.environ:
        raise RuntimeError("pride.integrations.hf: WORLD_SIZE is not set; launch with torchrun or accelerate launch")
    dist.init_process_group("pride", timeout=timeout)
    return True
