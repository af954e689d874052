"""The axonml shared-memory runtime as a torch.distributed backend.

    import axonml_torch            # registers the backend "axon"
    torch.distributed.init_process_group("axon")

Works under any launcher on one machine (axon-launch, torch.multiprocessing,
env:// or tcp:// rendezvous); every process group makes its own shared memory
through the store torch.distributed passes in.
"""
import torch
import torch.distributed

from ._C import create_process_group

if "AXON" not in torch.distributed.Backend._plugins:
    torch.distributed.Backend.register_backend("axon", create_process_group)

__all__ = ["create_process_group"]
