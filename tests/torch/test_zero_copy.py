"""Tensors placed in a group's shared memory (axonml_torch.place_in_arena)
all-reduce without a copy in and give the same bytes as private ones; the
ranks agree on whether a placement happened (no room, a numpy-owned storage
on one rank: none moves); the space comes back when the tensors go; a placed
tensor outlives its group; DDP with zero_copy_allreduce_hook ends with
Gloo's parameters and its gradients live in the arena, also under join()
with uneven inputs (a joined rank's fresh zero buckets meet placed ones),
and, on a group whose size is a power of two, bitwise PyTorch's
allreduce_hook's (its mean taken by AVG, not div_ then SUM);
without room the hook warns and all-reduces with a copy; a plain all_reduce
where one rank's tensor is placed and another's is not still sums right; a
numpy array taken before a move keeps valid memory.

    PYTHONPATH=<build>/python:tests/torch /usr/bin/python3 tests/torch/test_zero_copy.py N
"""
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import axonml_torch
from harness import run_ranks
from test_ddp import train


def data(count, dtype, rank, salt):
    g = torch.Generator().manual_seed(7919 * salt + rank)
    return torch.randn(count, generator=g).to(dtype)


def same_results_as_private(rank, n):
    """Placed and private tensors of every size class reduce to the same bytes."""
    checked = 0
    sizes = (256, 16 * 1024 + 1, 1_000_003)  # one round, pipelined, large and odd
    for salt, count in enumerate(sizes):
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
                private = data(count, dtype, rank, salt)
                placed = private.clone()
                view = placed[count // 2:]            # a view of the same storage follows the move
                assert axonml_torch.place_in_arena(placed), f"no room for {count} {dtype}"
                assert axonml_torch.in_arena(placed) and axonml_torch.in_arena(view)
                assert not axonml_torch.in_arena(private)
                assert torch.equal(placed, private), "the move changed the values"
                dist.all_reduce(private, op=op)
                dist.all_reduce(placed, op=op)
                assert torch.equal(placed, private), f"{count} {dtype} {op}: placed != private"
                assert torch.equal(view, private[count // 2:])
                checked += 1
                del placed, view
    return checked


def ranks_agree_and_space_returns(rank, n, room_mb):
    # No room (beyond the room asked for, the arena's own spare space for
    # subgroups is a few MiB): every rank gets False and keeps its tensor.
    too_big = torch.full((((room_mb + 32) << 20) // 4 // n,), float(rank))
    assert axonml_torch.place_in_arena(too_big) is False
    assert not axonml_torch.in_arena(too_big) and bool((too_big == rank).all())
    # One rank's storage belongs to numpy: nothing moves anywhere.
    owned = np.full(1024, rank, dtype=np.float32)
    t = torch.from_numpy(owned) if rank == n - 1 else torch.full((1024,), float(rank))
    assert axonml_torch.place_in_arena(t) is False
    assert not axonml_torch.in_arena(t)
    if rank == n - 1:
        t += 1
        assert owned[0] == rank + 1, "the numpy array no longer shares the tensor's memory"
    # Placing again and again more than the room holds at once: the space of
    # the tensors that went comes back.
    chunk = (room_mb << 20) // n // 3 // 4
    for i in range(12):
        t = torch.full((chunk,), float(rank + i))
        assert axonml_torch.place_in_arena(t), f"round {i}: the space of the earlier tensors did not come back"
        dist.all_reduce(t)
        assert bool((t == sum(r + i for r in range(n))).all())
    # Placing a placed tensor again is a no-op that says True.
    assert axonml_torch.place_in_arena(t) and axonml_torch.in_arena(t)
    return True


def outlives_its_group(rank, n):
    g = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=8))
    t = torch.full((100_000,), float(rank + 1))
    assert axonml_torch.place_in_arena(t, g)
    assert axonml_torch.in_arena(t, g) and not axonml_torch.in_arena(t)  # the default group's arena is another
    dist.all_reduce(t, group=g)
    dist.destroy_process_group(g)
    del g
    want = n * (n + 1) / 2
    assert bool((t == want).all()), "a placed tensor changed when its group went"
    t += 1
    assert bool((t == want + 1).all())
    # A later group (its object may sit where the destroyed one's did) does
    # not take the tensor for its own, and moves it over when asked.
    for _ in range(3):
        g2 = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=8))
        assert not axonml_torch.in_arena(t, g2), "a tensor in a destroyed group's arena counted as in a new one's"
        assert axonml_torch.place_in_arena(t, g2) and axonml_torch.in_arena(t, g2)
        t.fill_(rank + 1)
        dist.all_reduce(t, group=g2)
        assert bool((t == want).all())
        dist.destroy_process_group(g2)
        del g2
    return True


def gradients_in_arena(group):
    def check(ddp, step):
        in_arena = [axonml_torch.in_arena(p.grad, group) for p in ddp.parameters()]
        assert all(in_arena), f"step {step}: gradients outside the arena: {in_arena}"
    return check


def ddp_equals_gloo(rank, n):
    gloo_world = dist.new_group(backend="gloo")
    members = [0, 1]
    axon_sub = dist.new_group(members, pg_options=axonml_torch.Options(shared_mb=16))
    gloo_sub = dist.new_group(members, backend="gloo")
    compared = 0
    for accumulate in (False, True):
        cases = [("world", None, gloo_world)]
        if rank in members:
            cases.append((f"subgroup {members}", axon_sub, gloo_sub))
        for name, axon_group, gloo_group in cases:
            got = train(axon_group, rank, 6, accumulate, view=True, hook=axonml_torch.zero_copy_allreduce_hook,
                        after_step=gradients_in_arena(axon_group))
            want = train(gloo_group, rank, 6, accumulate, view=True)
            for i, (a, b) in enumerate(zip(got, want)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7,
                                           msg=lambda m: f"{name} no_sync={accumulate} parameter {i}: {m}")
            compared += 1
    return compared


def hook_equals_pytorchs_default_hook(rank, n):
    """The hook takes the mean in the all-reduce (AVG) instead of dividing
    the bucket first as PyTorch's allreduce_hook does (div_, then SUM): on a
    group whose size is a power of two that gives the same bits for
    float32, so DDP with either hook on the same axon group ends with
    identical parameters; on a group of 3, close."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    members = [0, 1]
    groups = [("world", dist.new_group(pg_options=axonml_torch.Options(shared_mb=16)), n)]
    sub = dist.new_group(members, pg_options=axonml_torch.Options(shared_mb=16))
    if rank in members:
        groups.append((f"subgroup {members}", sub, 2))
    compared = 0
    for name, group, size in groups:
        got = train(group, rank, 6, False, view=True, hook=axonml_torch.zero_copy_allreduce_hook,
                    after_step=gradients_in_arena(group))
        want = train(group, rank, 6, False, view=True, hook=allreduce_hook)
        for i, (a, b) in enumerate(zip(got, want)):
            if size & (size - 1) == 0:
                assert torch.equal(a.view(torch.int32), b.view(torch.int32)), \
                    f"{name} of {size}: parameter {i} differs from allreduce_hook's by {(a - b).abs().max()}"
            else:
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8, msg=lambda m: f"{name} parameter {i}: {m}")
        compared += 1
    return compared


def mixed_places_still_meet(rank, n):
    """allreduce_in_arena (the hook's op) where one rank's tensor lies in the
    arena and another's cannot move there (numpy's): every rank all-reduces
    privately, with the right sum, and the placed one stays placed."""
    group = dist.distributed_c10d._get_default_group()
    placed = torch.full((50_000,), float(rank + 1))
    assert axonml_torch.place_in_arena(placed)
    owned = np.full(50_000, rank + 1, dtype=np.float32)
    t = torch.from_numpy(owned) if rank == n - 1 else placed
    axonml_torch._C.allreduce_in_arena(group, t).wait()
    want = n * (n + 1) / 2
    assert bool((t == want).all()), f"sum {t[:3]} instead of {want}"
    if rank == n - 1:
        assert owned[0] == want, "the numpy array stopped sharing the tensor's memory"
    else:
        assert axonml_torch.in_arena(placed)
    return True


def plain_all_reduce_of_mixed_places(rank, n):
    """dist.all_reduce (and coalesced) where one rank's tensor is placed and
    another's is a private copy: every rank gets the sum, and the group
    stays usable (a collective mismatch before)."""
    for count in (4097, 1_000_000):
        placed = torch.full((count,), float(rank + 1))
        assert axonml_torch.place_in_arena(placed)
        t = placed.clone() if rank == n - 1 else placed
        dist.all_reduce(t)
        assert bool((t == n * (n + 1) / 2).all()), f"{count}: {t[:3]}"
        u = placed.clone() if rank == 0 else placed
        u.fill_(rank + 1)
        dist.all_reduce_coalesced([u, torch.ones(3)])
        assert bool((u == n * (n + 1) / 2).all()), f"coalesced {count}: {u[:3]}"
    dist.barrier()
    return True


def earlier_numpy_views_stay_valid(rank, n):
    """A numpy array taken before the move keeps valid memory (the memory the
    tensor moved from, with the values it had), not freed memory."""
    t = torch.full((4 << 20,), 2.0)
    a = t.numpy()
    assert axonml_torch.place_in_arena(t)
    t += 1
    assert float(a[0]) == 2.0 and float(a[-1]) == 2.0, (a[0], a[-1])
    a[0] = 5.0                      # writes memory the tensor no longer uses
    assert float(t[0]) == 3.0
    b = t.numpy()                   # taken after: the tensor's memory
    b[1] = 7.0
    assert float(t[1]) == 7.0
    sparse = torch.ones(3).to_sparse()
    assert not axonml_torch.in_arena(sparse)
    return True


def join_equals_gloo(rank, n):
    """DDP's join() with uneven inputs: the joined ranks' hook calls get
    fresh zero buckets while the others' lie in the arena."""
    results = []
    gloo = dist.new_group(backend="gloo")
    for group, hook in ((None, axonml_torch.zero_copy_allreduce_hook), (gloo, None)):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
        ddp = DDP(net, process_group=group, gradient_as_bucket_view=True, bucket_cap_mb=0.1)
        if hook:
            ddp.register_comm_hook(group, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)
        with ddp.join():
            for _ in range(3 + 2 * rank):     # uneven: rank 0 joins first
                ddp(torch.randn(4, 64, generator=gen)).square().mean().backward()
                opt.step()
                opt.zero_grad()
        results.append([p.detach().clone() for p in net.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    return True


def two_steps_of_a_linear(group, hook, rank, inputs, outputs, dtype=torch.float32):
    """Two SGD steps of DDP over one Linear layer on this rank's batches
    (the hook registered when given); the layer's parameters after them."""
    torch.manual_seed(0)
    net = torch.nn.Linear(inputs, outputs).to(dtype)
    ddp = DDP(net, process_group=group, gradient_as_bucket_view=True)
    if hook:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(2):
        ddp(torch.randn(4, inputs, generator=gen).to(dtype)).abs().square().mean().backward()
        opt.step()
        opt.zero_grad()
    return net


def hook_without_room(rank, n):
    """A group with no room: the hook warns and all-reduces with a copy."""
    import warnings
    group = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=0))
    gloo = dist.new_group(backend="gloo")
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for g, hook in ((group, axonml_torch.zero_copy_allreduce_hook), (gloo, None)):
            # 16 MiB of gradients: more than the arena's spare space
            net = two_steps_of_a_linear(g, hook, rank, 1024, 4096)
            results.append([p.detach().clone() for p in net.parameters()])
            if hook:
                assert not any(axonml_torch.in_arena(p.grad, g) for p in net.parameters())
    assert any("the axon group was made without room for tensors in its shared memory (shared_mb 0)" in str(w.message)
               and "the bucket was 16.0 MiB" in str(w.message) for w in caught), [str(w.message) for w in caught]
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    return True


def hook_on_complex_buckets(rank, n):
    """A complex model's buckets cannot be placed (no runtime kernel): the
    hook says so, rather than that the arena has no room (a review), and
    ends with the parameters of DDP's own all-reduce on the same group
    (Gloo cannot broadcast complex tensors: "Invalid scalar type")."""
    import warnings
    axonml_torch._warned_no_room = False  # hook_without_room has had this process's warning
    group = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=16))
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for g, hook in ((group, axonml_torch.zero_copy_allreduce_hook), (group, None)):
            net = two_steps_of_a_linear(g, hook, rank, 64, 64, torch.complex64)
            results.append([p.detach().clone() for p in net.parameters()])
    told = [str(w.message) for w in caught if "zero_copy_allreduce_hook" in str(w.message)]
    assert any("DDP's bucket holds torch.complex64, which the runtime does not all-reduce in place" in m
               for m in told), told
    assert not any("no room" in m for m in told), told
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    return True


def a_group_without_room_places_nothing(rank, n):
    """A group made without room (shared_mb=0, the default) places nothing,
    not even a tensor the default arena's spare pages would hold: such a
    group all-reduces without agreeing where tensors lie, so a placed tensor
    would meet another rank's private copy as a collective mismatch."""
    import warnings
    group = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=0))
    t = torch.full((100_003,), float(rank + 1))
    assert axonml_torch.place_in_arena(t, group) is False
    assert not axonml_torch.in_arena(t, group)
    u = t.clone() if rank == 1 else t
    dist.all_reduce(u, group=group)
    assert bool((u == n * (n + 1) / 2).all()), f"{u[:3]}"
    axonml_torch._warned_no_room = False  # hook_without_room has had this process's warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(0)
        net = torch.nn.Linear(64, 64)   # 16 KiB of gradients: would fit in the spare pages
        ddp = DDP(net, process_group=group, gradient_as_bucket_view=True)
        ddp.register_comm_hook(group, axonml_torch.zero_copy_allreduce_hook)
        ddp(torch.randn(4, 64)).square().mean().backward()
        assert not any(axonml_torch.in_arena(p.grad, group) for p in net.parameters())
    # The size as it is (it said "0.0 MiB" for 16 KiB; a review).
    assert any("made without room" in str(w.message) and "the bucket was 16.2 KiB" in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    # A group with room, too little for the bucket: says so.
    small = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=1))
    axonml_torch._warned_no_room = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = torch.nn.Linear(1024, 1024, bias=False)  # one 4 MiB bucket
        ddp = DDP(net, process_group=small, gradient_as_bucket_view=True)
        ddp.register_comm_hook(small, axonml_torch.zero_copy_allreduce_hook)
        ddp(torch.randn(4, 1024)).square().mean().backward()
        assert not axonml_torch.in_arena(net.weight.grad, small)
    assert any("has no room left for a bucket of 4.0 MiB on every rank" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    dist.destroy_process_group(small)
    dist.all_reduce(u, group=group)  # the group is still in step
    dist.barrier(group=group)
    return True


def misuse(rank, n):
    gloo = dist.new_group(backend="gloo")
    for call in (lambda: axonml_torch.place_in_arena(torch.ones(4), gloo),
                 lambda: axonml_torch.in_arena(torch.ones(4), gloo)):
        try:
            call()
        except ValueError as e:
            assert "backend is gloo, not axon" in str(e), str(e)
        else:
            raise AssertionError("a gloo group was taken for an axon one")
    for bad in (-1, 1.5, True):
        try:
            axonml_torch.Options(shared_mb=bad)
        except ValueError as e:
            assert "shared_mb" in str(e), str(e)
        else:
            raise AssertionError(f"Options(shared_mb={bad!r}) was accepted")
    # More room than the machine has: every rank's new_group fails, saying
    # what to ask for less of.
    try:
        dist.new_group(list(range(n)), backend="axon", pg_options=axonml_torch.Options(shared_mb=1 << 24))
    except RuntimeError as e:
        assert "cannot reserve" in str(e) and "axonml_torch.Options(shared_mb=) or AXON_TORCH_SHARED_MB" in str(e), \
            str(e)
    else:
        raise AssertionError("16 TiB of room was reserved")
    # A rank that places while another runs something else: the mismatch
    # names the placement's first step, and on the placing rank its call.
    g = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=4))
    try:
        if rank == 0:
            axonml_torch.place_in_arena(torch.ones(1000), g)
        else:
            dist.barrier(group=g)
    except RuntimeError as e:
        if rank == 0:
            assert "internal step 5: place_in_arena comparing the ranks' tensor sizes" in str(e) and \
                "(this rank called axon place_in_arena" in str(e), str(e)
    else:
        raise AssertionError("place_in_arena against a barrier went through")
    # Tensors of different sizes: every rank is told, and nothing moves (a
    # new group: the mismatch above leaves g unusable).
    g = dist.new_group(list(range(n)), pg_options=axonml_torch.Options(shared_mb=4))
    t = torch.ones(1000 + rank)
    try:
        axonml_torch.place_in_arena(t, g)
    except RuntimeError as e:
        assert "the ranks' tensors differ in size (storages of 4000 to " in str(e) and \
            f"this rank's {4 * (1000 + rank)}" in str(e), str(e)
    else:
        raise AssertionError("tensors of different sizes were placed")
    assert not axonml_torch.in_arena(t, g)
    same = torch.ones(1000)
    assert axonml_torch.place_in_arena(same, g)  # the group goes on
    try:
        dist.new_group(list(range(n)), backend="axon", pg_options={"shared_mb": 4})
    except TypeError as e:
        assert "axonml_torch.Options" in str(e), str(e)
    else:
        raise AssertionError("a dict was taken as the group's options")
    # A rank outside the group (new_group's NON_GROUP_MEMBER) is told so and
    # gets False, as PyTorch's collectives warn and do nothing there; the
    # binding raised an unreadable TypeError (a review).
    only_0 = dist.new_group([0], pg_options=axonml_torch.Options(shared_mb=4))
    t = torch.ones(1000)
    if rank == 0:
        assert axonml_torch.place_in_arena(t, only_0) and axonml_torch.in_arena(t, only_0)
    else:
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert axonml_torch.place_in_arena(t, only_0) is False
            assert axonml_torch.in_arena(t, only_0) is False
        told = [str(w.message) for w in caught]
        assert any(f"global rank {rank} is not a member of the given group" in m for m in told), told
    return True


ROOM_MB = 64


def check(rank, n):
    dist.init_process_group("axon", pg_options=axonml_torch.Options(shared_mb=ROOM_MB))
    results = [same_results_as_private(rank, n), ranks_agree_and_space_returns(rank, n, ROOM_MB),
               outlives_its_group(rank, n), ddp_equals_gloo(rank, n), hook_equals_pytorchs_default_hook(rank, n),
               mixed_places_still_meet(rank, n),
               plain_all_reduce_of_mixed_places(rank, n), earlier_numpy_views_stay_valid(rank, n),
               join_equals_gloo(rank, n), hook_without_room(rank, n), hook_on_complex_buckets(rank, n),
               a_group_without_room_places_nothing(rank, n), misuse(rank, n)]
    dist.barrier()
    dist.destroy_process_group()
    return results


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    results = run_ranks(n, check, timeout=600)
    print(f"test_zero_copy: {results[0][0]} placed all_reduces equal private ones, "
          f"{sum(r[3] for r in results)} DDP runs with zero_copy_allreduce_hook equal Gloo and "
          f"{sum(r[4] for r in results)} equal PyTorch's allreduce_hook on {n} ranks")
