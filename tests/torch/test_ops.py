"""Every op of the axon backend against Gloo's result (or, where Gloo 1.13 has
no such op or dtype, against a reference every rank computes from every
rank's deterministic input), on random data of every dtype, contiguous and
not.

    PYTHONPATH=<build>/python:tests/torch /usr/bin/python3 tests/torch/test_ops.py N
"""
import sys

import torch
import torch.distributed as dist

from harness import run_ranks

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
DTYPES = FLOATS + INTS + [torch.bool]
COUNTS = [0, 1, 7, 1000, 70001]
R = dist.ReduceOp


def data(rank, count, dtype, salt, shape=None):
    g = torch.Generator().manual_seed(rank * 7919 + salt * 104729 + count)
    shape = shape or (count,)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    low, high = (1, 4) if dtype in (torch.uint8, torch.int8) else (-50, 50)
    return torch.randint(low, high, shape, generator=g).to(dtype)


HALVES = (torch.bfloat16, torch.float16)


def combine(parts, op):
    """Rank-order reduction. bf16 and f16 in float64, rounded once at the
    end, as the runtime does (it widens to f32 and rounds once)."""
    if parts[0].dtype in HALVES:
        return combine([p.double() for p in parts], op).to(parts[0].dtype)
    acc = parts[0].clone()
    for x in parts[1:]:
        if op in (R.SUM, R.AVG) and acc.dtype.is_complex:
            torch.view_as_real(acc).add_(torch.view_as_real(x))  # part by part, as all_reduce's real view
        elif op in (R.SUM, R.AVG):
            acc.add_(x)
        elif op == R.PRODUCT:
            acc.mul_(x)
        elif op == R.MIN:
            acc = torch.minimum(acc, x)
        elif op == R.MAX:
            acc = torch.maximum(acc, x)
        elif op == R.BAND:
            acc.bitwise_and_(x)
        elif op == R.BOR:
            acc.bitwise_or_(x)
        elif op == R.BXOR:
            acc.bitwise_xor_(x)
    if op == R.AVG:
        if acc.dtype.is_complex:
            torch.view_as_real(acc).div_(len(parts))
        elif acc.dtype.is_floating_point:
            acc = acc / len(parts)
    return acc


def ops_for(dtype):
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype.is_floating_point:
        ops.append(R.AVG)
    if not dtype.is_floating_point:
        ops += [R.BAND, R.BOR, R.BXOR]
    if dtype == torch.bool:
        ops = [R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    return ops


def same(got, want, what, loose=False):
    """Exact for integers; dtype tolerances for floats. `loose` for results
    of Gloo, which rounds bf16 and f16 after every step of a reduction: an
    error of a few units in the last place of the inputs' size."""
    if got.dtype.is_complex:  # part by part: a complex difference beside an infinite part is NaN
        got, want = torch.view_as_real(got), torch.view_as_real(want.to(got.dtype))
    try:
        if got.dtype.is_floating_point:
            tol = 3e-2 if loose and got.dtype in HALVES else None
            torch.testing.assert_close(got, want.to(got.dtype), rtol=tol, atol=tol, equal_nan=True)
        else:
            assert torch.equal(got, want.to(got.dtype)), f"{got} != {want}"
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def with_gloo(fn, gloo, count=1):
    """fn(group) under Gloo, or None when Gloo rejects the op or dtype.
    Gloo 1.13 dies of SIGFPE on empty all_gather inputs: none for count 0."""
    if count == 0:
        return None
    try:
        return fn(gloo)
    except RuntimeError:
        return None


def noncontiguous(t):
    wide = torch.zeros((t.numel(), 2), dtype=t.dtype)
    wide[:, 0] = t
    return wide[:, 0]


def check(rank, n):
    dist.init_process_group("axon")
    gloo = dist.new_group(backend="gloo")
    stats = {"gloo": 0, "reference": 0}
    salt = 0
    for dtype in DTYPES:
        for count in COUNTS:
            salt += 1
            at = f"{dtype} count {count} rank {rank}"
            inputs = [data(r, count, dtype, salt) for r in range(n)]
            mine = inputs[rank]
            for op in ops_for(dtype):
                for layout in ("contiguous", "strided"):
                    t = mine.clone() if layout == "contiguous" else noncontiguous(mine)
                    dist.all_reduce(t, op=op)
                    g_op = R.SUM if op == R.AVG else op
                    g = with_gloo(lambda grp: (lambda x: (dist.all_reduce(x, op=g_op, group=grp), x)[1])(mine.clone()), gloo, count)
                    if g is not None and dtype.is_floating_point and op == R.AVG:
                        g = g / n
                    if g is not None and dtype != torch.bool:
                        stats["gloo"] += 1
                        same(t, g, f"all_reduce {op} {layout} {at} vs gloo", loose=True)
                    else:
                        stats["reference"] += 1
                    same(t, combine(inputs, op), f"all_reduce {op} {layout} {at} vs reference")
            # reduce to the last rank
            for op in (R.SUM, R.MAX):
                if dtype == torch.bool and op == R.SUM:
                    continue
                t = mine.clone()
                dist.reduce(t, dst=n - 1, op=op)
                if rank == n - 1:
                    same(t, combine(inputs, op), f"reduce {op} {at}")
                else:
                    same(t, mine, f"reduce {op} {at}: non-dst tensor changed")
            # all_reduce_coalesced
            if dtype != torch.bool:
                ts = [mine.clone(), (mine * 2 if dtype != torch.bool else mine).clone()]
                dist.all_reduce_coalesced(ts, op=R.MAX)
                same(ts[0], combine(inputs, R.MAX), f"all_reduce_coalesced {at}")
            # broadcast from rank 1 % n
            src = 1 % n
            t = mine.clone()
            dist.broadcast(t, src=src)
            g = with_gloo(lambda grp: (lambda x: (dist.broadcast(x, src=src, group=grp), x)[1])(mine.clone()), gloo, count)
            if g is not None:
                same(t, g, f"broadcast {at} vs gloo")
            same(t, inputs[src], f"broadcast {at}")
            t = noncontiguous(mine)
            dist.broadcast(t, src=src)
            same(t, inputs[src], f"broadcast strided {at}")
            # all_gather, _all_gather_base, all_gather_coalesced
            outs = [torch.empty_like(mine) for _ in range(n)]
            dist.all_gather(outs, mine)
            for r in range(n):
                same(outs[r], inputs[r], f"all_gather block {r} {at}")
            g_outs = [torch.empty_like(mine) for _ in range(n)]
            if with_gloo(lambda grp: dist.all_gather(g_outs, mine, group=grp) or True, gloo, count):
                for r in range(n):
                    same(outs[r], g_outs[r], f"all_gather block {r} {at} vs gloo")
            flat = torch.empty(n * count, dtype=dtype)
            dist._all_gather_base(flat, mine)
            same(flat, torch.cat(inputs), f"_all_gather_base {at}")
            lists = [[torch.empty_like(mine), torch.empty(3, dtype=dtype)] for _ in range(n)]
            dist.all_gather_coalesced(lists, [mine, inputs[rank][:3].clone() if count >= 3 else torch.zeros(3, dtype=dtype)])
            for r in range(n):
                same(lists[r][0], inputs[r], f"all_gather_coalesced {at}")
            # Its future holds one list per rank, as Gloo's does (a review:
            # it held all the tensors in one list).
            lists = [[torch.empty_like(mine), torch.empty(3, dtype=dtype)] for _ in range(n)]
            value = dist.all_gather_coalesced(lists, [mine, torch.zeros(3, dtype=dtype)], async_op=True).wait()
            assert isinstance(value, list) and len(value) == n and \
                all(isinstance(v, list) and len(v) == 2 for v in value), \
                f"all_gather_coalesced's future {at}: not one list of two tensors per rank: {value}"
            for r in range(n):
                same(value[r][0], inputs[r], f"all_gather_coalesced's future, block {r} {at}")
            # gather to rank n-1, scatter from rank 0
            outs = [torch.empty_like(mine) for _ in range(n)] if rank == n - 1 else None
            dist.gather(mine, outs, dst=n - 1)
            if rank == n - 1:
                for r in range(n):
                    same(outs[r], inputs[r], f"gather block {r} {at}")
            pieces = [data(100 + r, count, dtype, salt) for r in range(n)]
            t = torch.empty_like(mine)
            dist.scatter(t, pieces if rank == 0 else None, src=0)
            same(t, pieces[rank], f"scatter {at}")
            # reduce_scatter, _reduce_scatter_base (Gloo 1.13 has neither)
            if dtype != torch.bool:
                wide = [data(r, count * n, dtype, salt + 1) for r in range(n)]
                for op in (R.SUM, R.MIN):
                    want = combine(wide, op)[rank * count:(rank + 1) * count]
                    t = torch.empty_like(mine)
                    dist.reduce_scatter(t, list(wide[rank].chunk(n)) if count else [torch.empty(0, dtype=dtype)] * n, op=op)
                    same(t, want, f"reduce_scatter {op} {at}")
                    t = torch.empty_like(mine)
                    dist._reduce_scatter_base(t, wide[rank].clone(), op=op)
                    same(t, want, f"_reduce_scatter_base {op} {at}")
            # all_to_all_single, even and uneven; all_to_all of a list
            wide = [data(r, count * n, dtype, salt + 2) for r in range(n)]
            out = torch.empty(count * n, dtype=dtype)
            dist.all_to_all_single(out, wide[rank])
            same(out, torch.cat([w[rank * count:(rank + 1) * count] for w in wide]), f"all_to_all_single {at}")
            g_out = torch.empty(count * n, dtype=dtype)
            if with_gloo(lambda grp: dist.all_to_all_single(g_out, wide[rank], group=grp) or True, gloo, count):
                same(out, g_out, f"all_to_all_single {at} vs gloo")
            splits = lambda p: [(p + q) % 3 + (count % 5) for q in range(n)]  # rank p sends splits(p)[q] to q
            send = data(rank, sum(splits(rank)), dtype, salt + 3)
            recv_sizes = [splits(p)[rank] for p in range(n)]
            out = torch.empty(sum(recv_sizes), dtype=dtype)
            dist.all_to_all_single(out, send, output_split_sizes=recv_sizes, input_split_sizes=splits(rank))
            want = []
            for p in range(n):
                theirs = data(p, sum(splits(p)), dtype, salt + 3)
                start = sum(splits(p)[:rank])
                want.append(theirs[start:start + splits(p)[rank]])
            same(out, torch.cat(want), f"all_to_all_single uneven {at}")
            outs = [torch.empty(splits(p)[rank], dtype=dtype) for p in range(n)]
            dist.all_to_all(outs, list(send.split(splits(rank))))
            same(torch.cat(outs), torch.cat(want), f"all_to_all {at}")
            # send / recv around a ring
            nxt, prv = (rank + 1) % n, (rank - 1) % n
            if n > 1:
                got = torch.empty_like(mine)
                reqs = [dist.isend(mine, nxt, tag=5), dist.irecv(got, prv, tag=5)]
                for req in reqs:
                    req.wait()
                same(got, inputs[prv], f"send/recv ring {at}")
            dist.barrier()
    check_nan_min_max(rank, n)
    check_complex(rank, n)
    check_expanded(rank, n, gloo)
    check_view_of_parameter(rank, n)
    check_overlapping_coalesced(rank, n, gloo)
    check_aliased_input(rank, n)
    dist.destroy_process_group()
    return stats


def check_complex(rank, n):
    """Complex SUM and AVG in every reducing op: PyTorch hands all_reduce a
    real view, but reduce and reduce_scatter the complex tensor itself (a
    review saw them refuse AVG that all_reduce took)."""
    for dtype in (torch.complex64, torch.complex128):
        for count in (1, 7, 1000):
            inputs = [torch.complex(data(r, count, torch.float64, 91), data(r, count, torch.float64, 92)).to(dtype)
                      for r in range(n)]
            # An infinite part on the last rank: summed part by part, the
            # other part stays finite (a complex add made it NaN; a review).
            inputs[-1][0] = complex(1.0, -float("inf"))
            blocks = [torch.complex(data(r, n * count, torch.float64, 93), data(r, n * count, torch.float64, 94))
                      .to(dtype) for r in range(n)]
            for op in (R.SUM, R.AVG):
                at = f"{dtype} count {count} {op} rank {rank}"
                want = combine(inputs, op)
                t = inputs[rank].clone()
                dist.all_reduce(t, op=op)
                same(t, want, f"all_reduce {at}")
                t = inputs[rank].clone()
                dist.reduce(t, dst=n - 1, op=op)
                same(t, want if rank == n - 1 else inputs[rank], f"reduce {at}")
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, blocks[rank], op=op)
                same(out, combine(blocks, op)[rank * count:(rank + 1) * count], f"reduce_scatter_tensor {at}")
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, list(blocks[rank].split(count)), op=op)
                same(out, combine(blocks, op)[rank * count:(rank + 1) * count], f"reduce_scatter {at}")
            # PRODUCT, which PyTorch lets through to reduce and reduce_scatter
            # (its all_reduce refuses it), as the README says; finite inputs.
            finite = [torch.complex(data(r, count, torch.float64, 95), data(r, count, torch.float64, 96)).to(dtype)
                      for r in range(n)]
            at = f"{dtype} count {count} PRODUCT rank {rank}"
            t = finite[rank].clone()
            dist.reduce(t, dst=0, op=R.PRODUCT)
            same(t, combine(finite, R.PRODUCT) if rank == 0 else finite[rank], f"reduce {at}")
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out, blocks[rank], op=R.PRODUCT)
            same(out, combine(blocks, R.PRODUCT)[rank * count:(rank + 1) * count], f"reduce_scatter_tensor {at}")


def check_nan_min_max(rank, n):
    """MIN and MAX propagate NaN as torch.minimum and torch.maximum do:
    element i is NaN on rank i % (n + 1) alone, so it must be NaN in the
    result wherever that is a rank, whichever rank it is (Gloo keeps or drops
    it by the order it combines ranks in, so no comparison with Gloo)."""
    count = 1000
    holder = torch.arange(count) % (n + 1)
    for dtype in FLOATS:
        inputs = []
        for r in range(n):
            x = torch.full((count,), float(r + 1), dtype=dtype)
            x[holder == r] = float("nan")
            inputs.append(x)
        for op in (R.MIN, R.MAX):
            at = f"{op} {dtype} with a NaN on one rank, rank {rank}"
            want = combine(inputs, op)
            assert bool(want[holder < n].isnan().all()) and not bool(want[holder == n].isnan().any())
            t = inputs[rank].clone()
            dist.all_reduce(t, op=op)
            same(t, want, f"all_reduce {at}")
            t = inputs[rank].clone()
            dist.reduce(t, dst=n - 1, op=op)
            if rank == n - 1:
                same(t, want, f"reduce {at}")
            wide = torch.cat([inputs[(rank + q) % n] for q in range(n)])
            wants = combine([torch.cat([inputs[(r + q) % n] for q in range(n)]) for r in range(n)], op)
            t = torch.empty(count, dtype=dtype)
            dist._reduce_scatter_base(t, wide, op=op)
            same(t, wants[rank * count:(rank + 1) * count], f"_reduce_scatter_base {at}")


def check_expanded(rank, n, gloo):
    """Expanded tensors (stride 0: elements share memory), which copy_()
    refuses to write, as Gloo leaves them: broadcast into one raised on
    every rank before (found by the review helper)."""
    for group in (None, gloo):
        t = torch.tensor([float(rank + 2)]).expand(5)
        dist.broadcast(t, 0, group=group)
        same(t, torch.full((5,), 2.0), f"broadcast into an expanded tensor, group {group}")
        u = torch.tensor([[1.0, float(rank)]]).expand(3, 2)
        dist.all_reduce(u, group=group)
        same(u, torch.tensor([[float(n), float(n * (n - 1) / 2)]]).expand(3, 2), f"all_reduce of an expanded tensor, group {group}")


def check_view_of_parameter(rank, n):
    """A non-contiguous view of a leaf that requires grad (a transposed
    parameter, a column) takes the result, as under Gloo, which writes through
    data pointers: the write-back's copy_() raised "a view of a leaf Variable
    that requires grad is being used in an in-place operation" on every rank
    (found by a review), short ops and long ones alike. Checked against the
    reference: Gloo 1.13 reduces the wrong elements of a non-contiguous
    all_reduce (it reads the view's numel() elements from its first one).
    Grad mode stays on in the caller."""
    for rows in (4, 512):  # short: on the caller's thread; 1 MiB: on the group's
        w = torch.full((rows, 3 * rows // 4), float(rank + 1), requires_grad=True)
        b = torch.full((rows, 3), float(rank + 5), requires_grad=True)
        dist.broadcast(w.t(), 0)
        dist.all_reduce(b[:, 1])
        work = dist.all_reduce(b[:, 2], op=R.MAX, async_op=True)
        work.wait()
        if not torch.is_grad_enabled():
            raise AssertionError("grad mode was left off after the collectives")
        same(w.detach(), torch.ones(w.shape), f"broadcast into w.t() of a parameter, {rows} rows")
        want = torch.stack([torch.full((rows,), float(rank + 5)),
                            torch.full((rows,), float(sum(r + 5 for r in range(n)))),
                            torch.full((rows,), float(n - 1 + 5))], dim=1)
        same(b.detach(), want, f"all_reduce of column 1 and MAX of column 2 of a parameter, {rows} rows")
        # An inference tensor's view, inside inference mode and outside it
        # (copy_() refuses "inplace update to inference tensor outside
        # InferenceMode"; a review).
        for inside in (True, False):
            with torch.inference_mode():
                x = torch.full((rows, 3 * rows // 4), float(rank + 1))
            with torch.inference_mode(inside):
                dist.all_reduce(x.t())
            same(x, torch.full(x.shape, float(n * (n + 1) // 2)),
                 f"all_reduce of an inference tensor's view, {rows} rows, {'inside' if inside else 'outside'} inference mode")


def check_overlapping_coalesced(rank, n, gloo):
    """all_reduce_coalesced of views that share elements reduces each element
    once, as Gloo does (it flattens the list first); reducing the views one
    after another summed the shared elements twice (found in a review)."""
    def views(base):
        return {"partial": [base[0:6], base[4:10]],
                "same twice": [base[2:8], base[2:8]],
                "strided and dense": [base[::2], base[0:6]],
                "disjoint views": [base[0:5], base[5:10]]}
    for case in views(torch.zeros(10)):
        for op in (R.SUM, R.MAX, R.PRODUCT):
            got = {}
            for name, group in (("axon", None), ("gloo", gloo)):
                base = torch.arange(10, dtype=torch.float32) * (rank + 1) + 1
                dist.all_reduce_coalesced(views(base)[case], op=op, group=group)
                got[name] = base
            same(got["axon"], got["gloo"], f"all_reduce_coalesced of {case} views, {op}")


def check_aliased_input(rank, n):
    """An input that is another part of the output than this rank's block
    gives what separate buffers give: the runtime refuses such overlaps, on
    that rank only, and the ranks fell out of step (found in a review)."""
    k = 5
    mine = torch.arange(k, dtype=torch.float32) + 10 * rank
    every = torch.cat([torch.arange(k, dtype=torch.float32) + 10 * r for r in range(n)])
    # _allgather_base: the input in block 0 of the output on every rank.
    out = torch.zeros(n * k)
    out[:k] = mine
    dist._all_gather_base(out, out[:k])
    same(out, every, "_all_gather_base with the input in block 0 of the output")
    # gather on rank 0 / scatter from rank 0 with the input at an offset of 1.
    root_buffer = torch.zeros(n * k + 1)
    root_buffer[:k] = mine
    if rank == 0:
        dist.gather(root_buffer[:k], gather_list=list(root_buffer[1:].view(n, k).unbind(0)), dst=0)
        same(root_buffer[1:], every, "gather with the input overlapping the gather list")
    else:
        dist.gather(mine, dst=0)
    if rank == 0:
        wide = torch.cat([torch.zeros(1), every])
        dist.scatter(wide[:k], scatter_list=list(wide[1:].view(n, k).unbind(0)), src=0)
        same(wide[:k], every[:k], "scatter into an output overlapping the scatter list")
    else:
        got = torch.zeros(k)
        dist.scatter(got, src=0)
        same(got, every[rank * k:(rank + 1) * k], "scatter beside an overlapping root")
    # _reduce_scatter_base: the output one element into the input.
    x = torch.arange(n * k + 1, dtype=torch.float32) + rank
    want = sum(torch.arange(n * k + 1, dtype=torch.float32) + r for r in range(n))
    dist._reduce_scatter_base(x[1:k + 1], x[:n * k])
    same(x[1:k + 1], want[rank * k:(rank + 1) * k], "_reduce_scatter_base with the output one element into the input")
    t = torch.ones(2)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(n)), "an all_reduce after, in step")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    import axonml_torch  # noqa: F401  (checks the import before spawning)
    results = run_ranks(n, check, timeout=900)
    print(f"test_ops: every op matched on {n} ranks "
          f"({results[0]['gloo']} all_reduce cases against Gloo, {results[0]['reference']} against the reference)")
