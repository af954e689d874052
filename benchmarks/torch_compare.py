#!/usr/bin/python3
"""torch.distributed all_reduce and DDP step time: backend "axon" against "gloo".

    PYTHONPATH=build/release/python /usr/bin/python3 benchmarks/torch_compare.py [--json out.json]
    PYTHONPATH=build/release/python /usr/bin/python3 benchmarks/torch_compare.py --quick

For each world size (--ranks, default 2 and 8) one job of that many processes
(torch.multiprocessing, env:// rendezvous) holds a gloo group and an axon group
side by side and measures, interleaved (the order alternates every repeat).
Each rank is pinned to its own CPUs as axon-launch pins the axon-bench runs
it is compared with (--bind core, the default; none with more ranks than
CPUs); --bind none leaves them to the scheduler, as torch.multiprocessing
does, which then at times puts two ranks' communicating threads on one CPU:

  all_reduce  float32 SUM of 4 B to 256 MiB (x4 steps; --min/--max/--factor):
              per iteration the slowest rank's time, the median of a repeat's
              iterations, the median over --repeats repeats (axon-bench's
              statistic). Every size's result is checked on every rank, for
              both backends; a wrong element fails the run.
  DDP step    an MLP 1024-2048-2048-10 (6.3M parameters), batch 32 per rank,
              torch.set_num_threads(1), SGD: forward, backward, step; steps
              with and without no_sync() in turn (the slowest rank's time of
              each); communication = the median over those pairs of step -
              no_sync step (a pair sees one moment of the machine), with
              its quartiles and a 95% confidence interval of the median
              (order statistics; it narrows with more pairs: --ddp-steps x
              --ddp-repeats, and bounds the ratio to gloo's). A third
              replica, "none", runs DDP with a communication hook that
              communicates nothing: its figure is DDP's own bucket work,
              which every backend pays. Then
              the gloo and axon replicas restart from the same parameters,
              take 3 synchronised steps on the same data and must agree
              (1e-5 of the largest parameter, relative). DDP's defaults,
              or with --gradient-as-bucket-view every replica's gradients
              as views into its buckets (no copies into or out of them).

With --zero-copy a third column, axon-zc, runs in the same interleaved job:
another axon group with room in its shared memory, whose all_reduce tensors
are placed there (axonml_torch.place_in_arena) and whose DDP replica uses
axonml_torch.zero_copy_allreduce_hook; its results are checked the same way.

Prints the tables (µs and ms, ratio axon/gloo) and, with --json, writes every
figure. Above each table: PyTorch's call path alone, dist.all_reduce of 4 B on
a one-rank axon group (no peer to meet): what any backend pays a call and
axon-bench does not. Beside all_reduce it prints the runtime's own axon-bench time at the
same size and ranks when build/release has axon-bench (--build-dir;
--no-axon-bench skips it), and at n=2 the copy floor axon-bench measured
just before its row (one core writes the size, the other reads it) and that
floor over Gloo's time: axon-bench runs after the job, so the floor is of
the same minutes, not interleaved with Gloo's repeats. With --fresh-inputs
it also prints "rw alone": the same loop with an axon barrier in place of
the all_reduce, interleaved with the backends' repeats: what the writes
before the calls and the reads after them cost by themselves (with more
ranks than cores every rank's write and read fall into the others' timed
calls). An estimate of what any backend pays in this loop where they
dominate (MiB sizes), not a bound: small rows are the ranks' turns on the
cores, and an all_reduce can come out below it there. --quick is the smoke
test ctest runs: n=2, three sizes, a few iterations, two DDP steps, every
result still checked.

Long (a full run takes tens of minutes) and sensitive to other load: run it on
a quiet machine.
"""
import argparse
import copy
import json
import os
import queue as queue_module
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BACKENDS = ("gloo", "axon")
MLP_WIDTHS = (1024, 2048, 2048, 10)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# ---------------------------------------------------------------- one rank

def slowest(values, ctl):
    """Element-wise maximum over the ranks (on the control group)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
    return t.tolist()


def pattern(count):
    """1..7 repeating: every sum of it over up to 8 ranks is exact in f32."""
    return torch.arange(1, 8, dtype=torch.float32).repeat((count + 6) // 7)[:count]


def all_reduce_times(group, t, iterations, ctl, fresh=False, barrier_instead=False):
    """Per-iteration µs of `iterations` all_reduces, the slowest rank's each.
    With `fresh`, as a training step uses its gradients: the tensor is
    written (zeroed) before every call, untimed, and one element of every
    cache line of the result is read after it, timed with the call, so a
    backend that leaves the result's lines in another core's cache pays for
    it in its own figure. With `barrier_instead`, the same loop with a
    barrier in place of the all_reduce (writes_reads_alone_times)."""
    lines = t.view(-1)[::16]  # float32: one element per 64-byte line
    dist.barrier(group=group)
    times = []
    last = time.perf_counter_ns()
    for _ in range(iterations):
        if fresh:
            t.zero_()
            last = time.perf_counter_ns()
        if barrier_instead:
            dist.barrier(group=group)
        else:
            dist.all_reduce(t, group=group)
        if fresh:
            lines.sum()
        now = time.perf_counter_ns()
        times.append((now - last) / 1e3)
        last = now
    return slowest(times, ctl)


def call_floor(alone, cfg, ctl):
    """µs of dist.all_reduce of 4 B on a one-rank axon group: PyTorch's own
    call path (Python wrapper, c10d, Work and future) plus the binding's
    checks, with no peer to meet. Every backend pays PyTorch's part;
    axon-bench pays none of it. The slowest rank's median of 5 repeats."""
    t = torch.zeros(1)
    calls = max(50, cfg["max_iterations"])
    medians = []
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(calls):
            dist.all_reduce(t, group=alone)
        medians.append((time.perf_counter_ns() - start) / calls / 1e3)
    return slowest([statistics.median(medians)], ctl)[0]


def writes_reads_alone_times(group, t, iterations, ctl):
    """The fresh-inputs loop with an axon barrier in place of the all_reduce:
    what every rank's untimed write of its tensor and timed read of its
    lines cost the timed calls by themselves. With more ranks than cores
    the ranks' writes and reads run during each other's timed calls, so they
    count in every backend's figure. An estimate, not a bound: where they
    dominate (MiB sizes) no backend can do much better; at small sizes the
    figure is the ranks' turns on the cores, and a barrier (19-21 us at n=8
    here) is no cheaper than a 4-byte all_reduce (25-28 us; a review)."""
    return all_reduce_times(group, t, iterations, ctl, fresh=True, barrier_instead=True)


def variants_of(cfg):
    """gloo, axon, and with --zero-copy axon-zc: an axon group with room in
    its shared memory, its tensors placed there (zero copy)."""
    return BACKENDS + (("axon-zc",) if cfg.get("zero_copy") else ())


def sweep(rank, n, cfg, groups, ctl):
    rows = []
    variants = variants_of(cfg)
    for nbytes in cfg["sizes"]:
        count = max(1, nbytes // 4)
        row = {"bytes": count * 4, "count": count}
        tensors = {b: torch.zeros(count) for b in variants}  # sums of zeros stay zero while timed
        if "axon-zc" in variants:
            import axonml_torch
            if not axonml_torch.place_in_arena(tensors["axon-zc"], groups["axon-zc"]):
                raise RuntimeError(f"--zero-copy: no room for {human(count * 4)} in the axon-zc group's arena")
        iterations = {}
        for b in variants:  # warm up and size the repeat to about --seconds
            dist.barrier(group=groups[b])
            start = time.perf_counter()
            dist.all_reduce(tensors[b], group=groups[b])
            warm = slowest([time.perf_counter() - start], ctl)[0]
            iterations[b] = int(min(cfg["max_iterations"], max(3, cfg["seconds"] / max(warm, 1e-9))))
        medians = {b: [] for b in variants}
        fresh = cfg.get("fresh_inputs", False)
        rw_tensor = torch.zeros(count) if fresh else None
        rw_medians = []
        for repeat in range(cfg["repeats"]):
            for b in (variants if repeat % 2 == 0 else variants[::-1]):
                medians[b].append(statistics.median(all_reduce_times(groups[b], tensors[b], iterations[b], ctl,
                                                                       fresh)))
            if fresh:  # interleaved with the backends' repeats
                rw_medians.append(statistics.median(writes_reads_alone_times(groups["axon"], rw_tensor,
                                                                      iterations["axon"], ctl)))
        if fresh:
            row["rw_alone"] = {"us": statistics.median(rw_medians), "repeats_us": rw_medians}
        for b in variants:
            # Check: the timed tensor is still zero, and a known pattern sums right
            # (in the timed tensor itself, so a placed one is checked where it lies).
            wrong = int(torch.count_nonzero(tensors[b]))
            check = tensors[b]
            check.copy_(pattern(count) * (rank + 1))
            dist.all_reduce(check, group=groups[b])
            wrong += int(torch.count_nonzero(check != pattern(count) * (n * (n + 1) // 2)))
            total = torch.tensor([wrong])
            dist.all_reduce(total, group=ctl)
            row[b] = {"us": statistics.median(medians[b]), "repeats_us": medians[b],
                      "iterations": iterations[b], "wrong": int(total)}
        rows.append(row)
        del tensors
    return rows


def mlp():
    layers = []
    for i in range(len(MLP_WIDTHS) - 1):
        layers.append(torch.nn.Linear(MLP_WIDTHS[i], MLP_WIDTHS[i + 1]))
        if i + 2 < len(MLP_WIDTHS):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def no_communication_hook(state, bucket):
    """A DDP communication hook that communicates nothing."""
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def quartiles(values):
    """The first and third quartiles: how far a median of differences of steps can be trusted."""
    if len(values) < 2:
        return [values[0], values[0]] if values else [0.0, 0.0]
    q = statistics.quantiles(values, n=4, method="inclusive")  # within the data, even for few pairs
    return [q[0], q[2]]


def median_interval(values):
    """A 95% confidence interval for the median of `values`, free of any
    assumption about their distribution: the order statistics k and n + 1 - k,
    k from the normal approximation to Binomial(n, 1/2). Needs at least 6
    values (below that it is the whole range)."""
    v = sorted(values)
    if not v:
        return [0.0, 0.0]
    # The j-th smallest and the j-th largest, j = floor(n/2 - 0.98 sqrt(n)) (1-based).
    k = int(len(v) / 2 - 0.98 * len(v) ** 0.5) - 1  # 0-based
    if k < 0 or len(v) < 6:
        return [v[0], v[-1]]
    return [v[k], v[len(v) - 1 - k]]


def ddp_steps(rank, n, cfg, groups, ctl):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = mlp()
    view = cfg["bucket_view"]
    ddps = {b: DDP(copy.deepcopy(model), process_group=groups[b], gradient_as_bucket_view=view)
            for b in variants_of(cfg)}
    # DDP's own cost: the same DDP with a communication hook that hands the
    # bucket back untouched (no collective), so its step - no_sync step is
    # what DDP spends on buckets (copies in and out, hooks) by itself.
    ddps["none"] = DDP(copy.deepcopy(model), process_group=groups["axon"], gradient_as_bucket_view=view)
    ddps["none"].register_comm_hook(None, no_communication_hook)
    if "axon-zc" in ddps:
        import axonml_torch
        ddps["axon-zc"].register_comm_hook(groups["axon-zc"], axonml_torch.zero_copy_allreduce_hook)
    variants = variants_of(cfg) + ("none",)
    opts = {b: torch.optim.SGD(ddps[b].parameters(), lr=0.01) for b in variants}
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(cfg["batch"], MLP_WIDTHS[0], generator=g)
    y = torch.randint(0, MLP_WIDTHS[-1], (cfg["batch"],), generator=g)

    def step(b, sync):
        ddp, opt = ddps[b], opts[b]
        opt.zero_grad()
        if sync:
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        else:
            with ddp.no_sync():
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    def timed_step(b, sync):
        dist.barrier(group=groups.get(b, groups["axon"]))
        start = time.perf_counter()
        step(b, sync)
        return (time.perf_counter() - start) * 1e3

    for b in variants:
        for _ in range(cfg["ddp_warmup"]):
            for sync in (True, False):
                timed_step(b, sync)
    # A step with and one without no_sync() in turn, so that both see the
    # same moment of the machine (its speed drifts by tens of percent over
    # seconds here); the backends take turns by repeat.
    ms = {(b, sync): [] for b in variants for sync in (True, False)}
    diffs = {b: [] for b in variants}
    for repeat in range(cfg["ddp_repeats"]):
        for b in (variants if repeat % 2 == 0 else variants[::-1]):
            times = []
            for i in range(cfg["ddp_steps"]):
                order = (True, False) if i % 2 == 0 else (False, True)
                times += [(sync, timed_step(b, sync)) for sync in order]
            slowest_ms = slowest([t for _, t in times], ctl)
            for (sync, _), t in zip(times, slowest_ms):
                ms[(b, sync)].append(t)
            for i in range(0, len(times), 2):  # each pair: step - no_sync step
                first_sync = times[i][0]
                pair = (slowest_ms[i], slowest_ms[i + 1]) if first_sync else (slowest_ms[i + 1], slowest_ms[i])
                diffs[b].append(pair[0] - pair[1])

    # The check: no_sync steps above let each rank's replica drift from the
    # others (they step on local gradients), and from there the two backends'
    # different summation orders grow step by step. So both replicas restart
    # from the model's first parameters, take 3 synchronised steps on the
    # same data, and must then agree.
    for b in variants_of(cfg):
        with torch.no_grad():
            for p, q in zip(ddps[b].module.parameters(), model.parameters()):
                p.copy_(q)
        for _ in range(3):
            step(b, True)
    biggest, diff = 0.0, 0.0
    for b in variants_of(cfg)[1:]:
        for p, q in zip(ddps["gloo"].module.parameters(), ddps[b].module.parameters()):
            biggest = max(biggest, float(p.detach().abs().max()))
            diff = max(diff, float((p.detach() - q.detach()).abs().max()))
    relative = slowest([diff / max(biggest, 1e-30)], ctl)[0]
    result = {"parameters": sum(p.numel() for p in model.parameters()), "batch_per_rank": cfg["batch"],
              "steps": cfg["ddp_steps"], "repeats": cfg["ddp_repeats"], "bucket_view": view, "max_relative_difference": relative,
              "parameters_match": relative <= 1e-5}
    for b in variants:
        step_ms = statistics.median(ms[(b, True)])  # over every step of every repeat
        no_sync_ms = statistics.median(ms[(b, False)])
        result[b] = {"step_ms": step_ms, "no_sync_ms": no_sync_ms, "comm_ms": statistics.median(diffs[b]),
                     "comm_quartiles_ms": quartiles(diffs[b]), "comm_median_ci_ms": median_interval(diffs[b]),
                     "pairs": len(diffs[b]),
                     "steps_ms": ms[(b, True)], "no_sync_steps_ms": ms[(b, False)]}
    return result


def bind_like_axon_launch(rank, n, how):
    """With how == "core" and no more ranks than allowed CPUs, pins this
    process (before it starts any thread) to its own block of them in
    order, as axon-launch --bind core (its default) pins the axon-bench runs
    beside: rank r gets CPUs [r*k, (r+1)*k) of the sorted allowed ones, k =
    CPUs // n. Otherwise, as axon-launch then does, binds nothing. Returns
    the CPUs bound to, or None."""
    cpus = sorted(os.sched_getaffinity(0))
    if how != "core" or n > len(cpus):
        return None
    per = len(cpus) // n
    mine = cpus[rank * per:(rank + 1) * per]
    os.sched_setaffinity(0, mine)
    return mine


def rank_main(rank, n, port, cfg, queue):
    bound = bind_like_axon_launch(rank, n, cfg.get("bind", "none"))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import axonml_torch  # noqa: F401  (registers "axon" in this process)
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=n)
        ctl = dist.group.WORLD  # the measurements' own groups carry nothing else
        options = {}
        if cfg.get("zero_copy"):
            import axonml_torch
            # Every rank's largest sweep tensor and two sets of DDP buckets
            # (DDP rebuilds them after its first step).
            model_mb = sum(p.numel() for p in mlp().parameters()) * 4 / 2**20
            room_mb = int(n * (max(cfg["sizes"]) / 2**20 + 2 * model_mb)) + 16
            options["axon-zc"] = axonml_torch.Options(shared_mb=room_mb)
        groups = {b: dist.new_group(backend=b) for b in BACKENDS}
        if options:
            groups["axon-zc"] = dist.new_group(backend="axon", pg_options=options["axon-zc"])
        # One one-rank axon group per rank (every rank takes part in making each).
        alone = [dist.new_group([r], backend="axon") for r in range(n)][rank]
        result = {"ranks": n, "bound_cpus_rank0": bound, "bind": cfg.get("bind", "none"),
                  "call_floor_us": call_floor(alone, cfg, ctl),
                  "all_reduce": sweep(rank, n, cfg, groups, ctl)}
        if cfg["ddp_steps"] > 0:
            result["ddp"] = ddp_steps(rank, n, cfg, groups, ctl)
        dist.barrier(group=ctl)
        if rank == 0:
            queue.put(result)
        dist.destroy_process_group()
    except BaseException as e:
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})
        raise


def run_job(n, cfg):
    # The rendezvous port, held (bound, never listening, SO_REUSEADDR set
    # after the bind) until the job is done, so that nothing takes it before
    # rank 0's store, which sets SO_REUSEADDR too, binds it (examples/torch_spawn.py).
    held = socket.socket()
    held.bind(("", 0))
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        return run_held_job(n, cfg, held.getsockname()[1])
    finally:
        held.close()


def run_held_job(n, cfg, port):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    context = mp.start_processes(rank_main, args=(n, port, cfg, queue), nprocs=n, join=False, start_method="spawn")
    result = None
    try:
        # Read while waiting, so that rank 0 never blocks on a full queue;
        # join() ends every rank once one has failed.
        while True:
            if result is None:
                try:
                    result = queue.get(timeout=1)
                except queue_module.Empty:
                    pass
            if context.join(timeout=0 if result is None else 1):
                break
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        raise SystemExit(f"torch_compare: the job on {n} ranks failed:\n{e}")
    if result is None:
        result = queue.get(timeout=10)
    if "error" in result:
        raise SystemExit(f"torch_compare: {result['error']}")
    return result


# ---------------------------------------------------------------- axon-bench

def axon_bench_times(build_dir, n, sizes, seconds, fresh=False):
    """The runtime's own all_reduce time (µs, its median of the slowest rank)
    per size, and the copy floor axon-bench measured just before each row
    (µs: one core writes that many bytes, the other reads them)."""
    launcher = os.path.join(build_dir, "launcher", "axon-launch")
    bench = os.path.join(build_dir, "benchmarks", "axon-bench")
    if not (os.access(launcher, os.X_OK) and os.access(bench, os.X_OK)):
        return {}, {}
    times, copy_floors = {}, {}
    with tempfile.TemporaryDirectory(prefix="torch-compare-") as tmp:
        for nbytes in sizes:
            out = os.path.join(tmp, "bench.json")
            cmd = [launcher, "-n", str(n), "--no-tag-output", bench, "-c", "all_reduce", "-b", str(nbytes),
                   "-e", str(nbytes), "--seconds-per-size", str(seconds), "--json", out]
            if fresh:
                cmd.append("--fresh-inputs")
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"axon-bench at {human(nbytes)} on {n} ranks failed ({done.returncode}), column left out:\n"
                      f"{done.stdout[-2000:]}{done.stderr[-2000:]}", file=sys.stderr)
                return {}, {}
            with open(out) as f:
                for row in json.load(f)["rows"]:
                    if row["wrong"]:
                        raise SystemExit(f"axon-bench: {row['wrong']} wrong elements at {row['bytes']} B on {n} ranks")
                    times[row["bytes"]] = row["time_us"]
                    if row.get("floor_copy_us"):
                        copy_floors[row["bytes"]] = row["floor_copy_us"]
    return times, copy_floors


# ---------------------------------------------------------------- report

def fmt(us):
    return f"{us:,.1f}".replace(",", " ") if us < 100 else f"{us:,.0f}".replace(",", " ")


def report(results):
    failed = []
    for res in results:
        n = res["ranks"]
        bench = res.get("axon_bench_us", {})
        # At n=2 a private all-reduce moves every rank's input to the other
        # core, as this copy does (both ways at once, so under L2's size it
        # can take less); with more ranks it is not the same measure.
        floors = res.get("copy_floor_us", {}) if n == 2 else {}
        zc = "axon-zc" in res["all_reduce"][0] if res["all_reduce"] else False
        print(f"\nall_reduce float32 SUM on {n} ranks, µs (median of the slowest rank; every result checked)")
        if zc:
            print("axon-zc: another axon group, its tensors placed in its shared memory "
                  "(axonml_torch.place_in_arena: zero copy)")
        if res.get("fresh_inputs"):
            print("fresh inputs: every tensor written before each call (untimed), every cache line of the "
                  "result read after it (timed with the call); axon-bench --fresh-inputs alike")
        rw_alone = bool(res["all_reduce"]) and all("rw_alone" in row for row in res["all_reduce"])
        if rw_alone:
            print("rw alone: the same loop with an axon barrier in place of the all_reduce, interleaved with it: "
                  "the writes and reads by themselves (with more ranks than cores they run in each other's timed "
                  "calls); an estimate of what any backend pays where they dominate (MiB sizes), not a bound "
                  "(small rows are the ranks' turns on the cores); rw/gloo: its time over Gloo's")
        if "bind" in res:
            print("ranks bound as axon-launch --bind core binds them (rank 0 to CPUs "
                  f"{res['bound_cpus_rank0']})" if res.get("bound_cpus_rank0") is not None else
                  f"ranks not bound ({'--bind none' if res['bind'] == 'none' else 'more ranks than CPUs'}): "
                  "the scheduler places them")
        if "call_floor_us" in res:
            print(f"PyTorch's call path alone (dist.all_reduce of 4 B on a one-rank axon group): "
                  f"{res['call_floor_us']:.1f} µs a call")
        head = f"{'size':>9} {'gloo':>11} {'axon':>11} {'axon/gloo':>10}"
        if zc:
            head += f" {'axon-zc':>11} {'zc/gloo':>8} {'zc/axon':>8}"
        if bench:
            head += f" {'axon-bench':>11} {'axon/bench':>10}"
        if floors:
            print("copy floor: axon-bench's copy, measured just before its row: one core writes the size, the other "
                  "reads it, as a private all-reduce at n=2 moves each rank's input to the other; floor/gloo: its "
                  "time over Gloo's")
            head += f" {'copy floor':>11} {'floor/gloo':>10}"
        if rw_alone:
            head += f" {'rw alone':>11} {'rw/gloo':>8}"
        print(head + f" {'wrong':>6}")
        for row in res["all_reduce"]:
            g, a = row["gloo"]["us"], row["axon"]["us"]
            line = f"{human(row['bytes']):>9} {fmt(g):>11} {fmt(a):>11} {a / g:>10.3f}"
            if zc:
                z = row["axon-zc"]["us"]
                line += f" {fmt(z):>11} {z / g:>8.3f} {z / a:>8.2f}"
            if bench:
                ab = bench.get(row["bytes"]) or bench.get(str(row["bytes"]))
                line += f" {fmt(ab):>11} {a / ab:>10.2f}" if ab else f" {'-':>11} {'-':>10}"
            if floors:
                floor = floors.get(row["bytes"]) or floors.get(str(row["bytes"]))
                line += f" {fmt(floor):>11} {floor / g:>10.3f}" if floor else f" {'-':>11} {'-':>10}"
            if rw_alone:
                rw = row["rw_alone"]["us"]
                line += f" {fmt(rw):>11} {rw / g:>8.3f}"
            wrong = {b: row[b]["wrong"] for b in ("gloo", "axon", "axon-zc") if b in row}
            print(line + f" {sum(wrong.values()):>6}")
            if sum(wrong.values()):
                failed.append(f"all_reduce of {human(row['bytes'])} on {n} ranks: wrong elements {wrong}")
        if "ddp" in res:
            d = res["ddp"]
            print(f"\nDDP step on {n} ranks: MLP {'-'.join(map(str, MLP_WIDTHS))} ({d['parameters'] / 1e6:.1f}M "
                  f"parameters), batch {d['batch_per_rank']} per rank, 1 thread per rank"
                  f"{', gradient_as_bucket_view=True' if d.get('bucket_view') else ''}, ms"
                  f"{' (axon-zc: with zero_copy_allreduce_hook)' if 'axon-zc' in d else ''}")
            print(f"{'backend':>8} {'step':>9} {'no_sync':>9} {'comm':>9} {'beyond DDP':>11} {'comm q1..q3':>17}"
                  f" {'comm 95% CI':>17}")
            own = d["none"]["comm_ms"] if "none" in d else None
            for b in BACKENDS + (("axon-zc",) if "axon-zc" in d else ()) + (("none",) if "none" in d else ()):
                beyond = f"{d[b]['comm_ms'] - own:>11.2f}" if own is not None and b != "none" else f"{'':>11}"
                q1, q3 = d[b].get("comm_quartiles_ms", (float("nan"), float("nan")))
                spread = f"{q1:.1f}..{q3:.1f}"
                lo, hi = d[b].get("comm_median_ci_ms", (float("nan"), float("nan")))
                ci = f"{lo:.1f}..{hi:.1f}"
                print(f"{b:>8} {d[b]['step_ms']:>9.2f} {d[b]['no_sync_ms']:>9.2f} {d[b]['comm_ms']:>9.2f} {beyond}"
                      f" {spread:>17} {ci:>17}")
            if own is not None:
                print("(none: DDP with a hook that communicates nothing; its comm is DDP's own bucket work, and")
                print(" 'beyond DDP' is each backend's comm less that; comm is the median over "
                      f"{d['axon'].get('pairs', '?')} pairs of steps, q1..q3 their quartiles, and the 95% CI that of")
                print(" the median, from order statistics: it narrows as 1/sqrt(pairs), the quartiles do not)")
            if d["gloo"]["comm_ms"] > 0:
                print(f"communication axon/gloo: {d['axon']['comm_ms'] / d['gloo']['comm_ms']:.3f}")
                if "axon-zc" in d:
                    print(f"communication axon-zc/gloo: {d['axon-zc']['comm_ms'] / d['gloo']['comm_ms']:.3f}")
                # The ratio's bounds from the two intervals: each end a 95% bound, so
                # together at least 90% (Bonferroni); meaningful once gloo's lower end is above 0.
                gloo_lo, gloo_hi = d["gloo"].get("comm_median_ci_ms", (0.0, 0.0))
                if gloo_lo > 0:
                    for b in ("axon",) + (("axon-zc",) if "axon-zc" in d else ()):
                        lo, hi = d[b].get("comm_median_ci_ms", (float("nan"), float("nan")))
                        print(f"communication {b}/gloo, from the 95% CIs: {lo / gloo_hi:.3f}..{hi / gloo_lo:.3f}")
            print(f"parameters gloo vs {'each axon replica' if 'axon-zc' in d else 'axon'}: largest difference {d['max_relative_difference']:.2e} of the largest "
                  f"parameter ({'match' if d['parameters_match'] else 'DIFFER'})")
            if not d["parameters_match"]:
                failed.append(f"DDP on {n} ranks: gloo and axon parameters differ by "
                              f"{d['max_relative_difference']:.2e} relative")
    return failed


def plot(results, png):
    """all_reduce µs against size, gloo and axon (and axon-bench) per world
    size, on log scales, into `png` with gnuplot."""
    import shutil
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no plot")
        return
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for res in results:
            n = res["ranks"]
            bench = res.get("axon_bench_us", {})
            dat = os.path.join(tmp, f"n{n}.dat")
            with open(dat, "w") as f:
                for row in res["all_reduce"]:
                    ab = bench.get(row["bytes"]) or bench.get(str(row["bytes"])) or "NaN"
                    zc = row["axon-zc"]["us"] if "axon-zc" in row else "NaN"
                    f.write(f"{row['bytes']} {row['gloo']['us']} {row['axon']['us']} {ab} {zc}\n")
            lines.append(f"'{dat}' using 1:2 with linespoints title 'gloo n={n}'")
            lines.append(f"'{dat}' using 1:3 with linespoints title 'axon n={n}'")
            if bench:
                lines.append(f"'{dat}' using 1:4 with lines dashtype 2 title 'axon-bench n={n}'")
            if res["all_reduce"] and "axon-zc" in res["all_reduce"][0]:
                lines.append(f"'{dat}' using 1:5 with linespoints title 'axon zero copy n={n}'")
        script = f"""set terminal pngcairo size 1000,600 noenhanced
set output '{png}'
set title 'torch.distributed all_reduce float32 SUM: time against size'
set logscale x 2
set logscale y 10
set format x '%.0b%B'
set xlabel 'size (bytes)'
set ylabel 'time (us), median of the slowest rank'
set key left top
set grid
plot {', '.join(lines)}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"plot: {png}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,8", help="world sizes, comma-separated (default 2,8)")
    p.add_argument("--min", default="4", help="smallest all_reduce size in bytes (K, M suffixes; default 4)")
    p.add_argument("--max", default="256M", help="largest size (default 256M)")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats per size (default 5)")
    p.add_argument("--seconds", type=float, default=0.25, help="about this long per backend, size and repeat")
    p.add_argument("--max-iterations", type=int, default=2000, help="at most this many iterations per repeat")
    p.add_argument("--ddp-steps", type=int, default=10, help="DDP steps per repeat (0: no DDP part)")
    p.add_argument("--ddp-repeats", type=int, default=5)
    p.add_argument("--ddp-warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="DDP batch per rank (default 32)")
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="every DDP replica with gradient_as_bucket_view=True (the gradients live in the "
                        "buckets, so DDP copies nothing into or out of them)")
    p.add_argument("--zero-copy", action="store_true",
                   help="axon's all_reduce tensors placed in its group's shared memory (axonml_torch.place_in_arena) "
                        "and its DDP replica with axonml_torch.zero_copy_allreduce_hook")
    p.add_argument("--fresh-inputs", action="store_true",
                   help="all_reduce as a training step uses its gradients: every backend's tensor written before "
                        "each call (untimed) and every cache line of the result read after it (timed); "
                        "axon-bench the same (its --fresh-inputs)")
    p.add_argument("--bind", choices=("core", "none"), default="core",
                   help="core (default): each rank pinned to its own block of the allowed CPUs, as axon-launch "
                        "pins the axon-bench runs beside (none when ranks outnumber CPUs, as axon-launch); "
                        "none: the scheduler places them, as torch.multiprocessing leaves them")
    p.add_argument("--build-dir", default="build/release",
                   help="for axon-bench, and for axonml_torch when PYTHONPATH lacks it (default build/release)")
    p.add_argument("--no-axon-bench", action="store_true", help="leave out the axon-bench column")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--plot", help="draw all_reduce time against size into this PNG (needs gnuplot)")
    p.add_argument("--replot", metavar="JSON", help="measure nothing: print and plot the figures of an earlier --json")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: n=2, 4 B, 64 KiB and 1 MiB, a few iterations, 2 DDP steps; no axon-bench")
    a = p.parse_args()

    if a.replot:
        with open(a.replot) as f:
            results = json.load(f)["results"]
        report(results)
        if a.plot:
            plot(results, a.plot)
        return
    if a.quick:
        ranks, sizes = [2], [4, 64 << 10, 1 << 20]
        cfg = dict(repeats=2, seconds=0.01, max_iterations=20, ddp_steps=2, ddp_repeats=1, ddp_warmup=1)
        use_bench = False
    else:
        ranks = [int(r) for r in a.ranks.split(",")]
        lo, hi = parse_size(a.min), parse_size(a.max)
        if lo < 4 or hi < lo or a.factor < 2:
            p.error(f"sizes {lo}..{hi} with factor {a.factor}: need 4 <= min <= max and factor >= 2")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= a.factor
        cfg = dict(repeats=a.repeats, seconds=a.seconds, max_iterations=a.max_iterations, ddp_steps=a.ddp_steps,
                   ddp_repeats=a.ddp_repeats, ddp_warmup=a.ddp_warmup)
        use_bench = not a.no_axon_bench
    if any(r < 1 for r in ranks) or cfg["repeats"] < 1 or cfg["ddp_repeats"] < 1:
        p.error("--ranks, --repeats and --ddp-repeats must be at least 1")
    cfg.update(sizes=sizes, batch=a.batch, bucket_view=a.gradient_as_bucket_view, zero_copy=a.zero_copy,
               fresh_inputs=a.fresh_inputs, bind=a.bind)

    # The ranks import axonml_torch; a run from the source tree finds the
    # build's module without PYTHONPATH (spawned ranks inherit the variable).
    try:
        import axonml_torch  # noqa: F401
    except ImportError:
        module_dir = os.path.abspath(os.path.join(a.build_dir, "python"))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [module_dir, os.environ.get("PYTHONPATH")]))
        sys.path.insert(0, module_dir)
        try:
            import axonml_torch  # noqa: F401,F811
        except ImportError as e:
            p.error(f"cannot import axonml_torch ({e}): build first (make build), or set PYTHONPATH or --build-dir")

    started = time.time()
    results = []
    for n in ranks:
        print(f"running on {n} ranks ...", flush=True)
        res = run_job(n, cfg)
        res["fresh_inputs"] = a.fresh_inputs
        if use_bench:
            res["axon_bench_us"], res["copy_floor_us"] = axon_bench_times(a.build_dir, n, sizes, min(a.seconds, 1.0),
                                                                          a.fresh_inputs)
        results.append(res)
    failed = report(results)
    if a.plot:
        plot(results, a.plot)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)), "torch": torch.__version__,
                       "cpus": os.cpu_count(), "command": sys.argv, "config": cfg, "results": results}, f, indent=1)
        print(f"\nwrote {a.json}")
    if failed:
        raise SystemExit("torch_compare: wrong results:\n  " + "\n  ".join(failed))
    print(f"\ntorch_compare: every result checked, done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
