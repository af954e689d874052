"""The axonml shared-memory runtime as a torch.distributed backend.

    import axonml_torch            # registers the backend "axon"
    torch.distributed.init_process_group("axon")

Works under any launcher on one machine (axon-launch, torch.multiprocessing,
env:// or tcp:// rendezvous); every process group makes its own shared memory
through the store torch.distributed passes in.
"""
import torch
import torch.distributed

import atexit

from ._C import _finish_pending, create_process_group



def _create_from_options(options, pg_options=None):
    """The creator torch.distributed calls (register_backend's extended_api):
    besides the store, rank, size and timeout it gives the group's members as
    global ranks (empty for the default group), which the set-up needs to
    name a process of the job that died before the group was made."""
    return create_process_group(options.store, options.group_rank, options.group_size, options.timeout,
                                list(options.global_ranks_in_group))


if "AXON" not in torch.distributed.Backend._plugins:
    torch.distributed.Backend.register_backend("axon", _create_from_options, extended_api=True)
    # A program may end without destroy_process_group(), with ops (and their
    # callbacks) still running on a group's threads; once the interpreter is
    # finalizing, those threads can no longer drop the Python objects they
    # hold. Let them finish while it still can.
    atexit.register(_finish_pending)

__all__ = ["create_process_group"]
