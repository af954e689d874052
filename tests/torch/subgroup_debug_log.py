"""Run under axon-launch -n 3 with AXON_DEBUG=1: ranks 1 and 2 all-reduce in
new_group([1, 2]). Each collective's debug line must carry the job's rank
(the subgroup's arena numbers its members 0 and 1; the torch test names the
lines it expects)."""
import torch
import torch.distributed as dist

import axonml_torch  # noqa: F401  (registers "axon")

dist.init_process_group("axon")
pair = dist.new_group([1, 2], backend="axon")
if dist.get_rank() in (1, 2):
    dist.all_reduce(torch.ones(4), group=pair)
dist.barrier()
dist.destroy_process_group()
