"""The axonml shared-memory runtime as a torch.distributed backend.

    import axonml_torch            # registers the backend "axon"
    torch.distributed.init_process_group("axon")

Works under any launcher on one machine (axon-launch, torch.multiprocessing,
env:// or tcp:// rendezvous); every process group makes its own shared memory
through the store torch.distributed passes in.
"""
import atexit
import os
import sys
import warnings
import weakref

try:
    import torch
    import torch.distributed
except ImportError as error:
    # Often the python3 first on PATH is another interpreter than Debian's,
    # which is the one with python3-torch (found by a review).
    raise ImportError(
        f"axonml_torch needs PyTorch (1.13, Debian 12's python3-torch), and this Python ({sys.executable}) "
        f"cannot import it: {error}. Run the program with /usr/bin/python3, or install python3-torch") from error

from ._C import (_close_store_together_as_it_goes, _exited_processes, _note_failure_elsewhere,
                 _process_gone_with_the_store, _program_ends)
from ._C import _excepthook_running_signal_handlers_first, _world_begins
from ._C import create_process_group
from ._C import __version__
from ._C import allreduce_in_arena as _allreduce_in_arena
from ._C import in_arena as _in_arena
from ._C import _has_room_for_placing, _runtime_reduces
from ._C import place_in_arena as _place_in_arena


def _axon_group(group):
    return group if group is not None else torch.distributed.distributed_c10d._get_default_group()


def _not_a_member(group, what):
    """Whether this rank is outside ``group`` (what ``new_group`` returns on
    the ranks it leaves out), warning as PyTorch's collectives do there
    instead of failing in the binding with an unreadable TypeError (found by
    a review)."""
    if group is not torch.distributed.GroupMember.NON_GROUP_MEMBER:
        return False
    warnings.warn(f"axonml_torch.{what}: global rank {torch.distributed.get_rank()} is not a member of the "
                  f"given group; nothing done, False returned")
    return True


def place_in_arena(tensor, group=None):
    """Moves the memory under ``tensor``'s storage into ``group``'s shared
    memory (every tensor and view of that storage follows), so that an
    all_reduce of it over ``group`` reads the peers' tensors in place instead
    of copying them through the shared slots (zero copy).

    Collective: every rank of the group calls it, in the same order as the
    group's other collectives, with a tensor of the same size (else every
    rank raises, naming the sizes, and nothing moves). Returns True
    on every rank when all moved (or were there already), else False on every
    rank and nothing moved: the arena has no room (``Options(shared_mb=)``
    or ``AXON_TORCH_SHARED_MB`` reserve it when the group is made; every
    rank's tensor takes its share; a group made without them places
    nothing),
    or a rank's storage is not PyTorch's own CPU memory (a numpy array's).

    The memory the tensor moved from is kept until the tensor goes: a numpy
    array or raw pointer taken before the move still points at valid memory,
    but no longer the tensor's (take them after placing). Do not place a
    tensor while an op of another group still runs on it: that op finishes
    on the old memory, and its result is lost.
    """
    if _not_a_member(group, "place_in_arena"):
        return False
    return _place_in_arena(_axon_group(group), tensor)


def in_arena(tensor, group=None):
    """Whether ``tensor``'s storage lies in ``group``'s shared memory (False
    on a rank outside the group)."""
    if _not_a_member(group, "in_arena"):
        return False
    return _in_arena(_axon_group(group), tensor)


_warned_no_room = False  # the hook says so once a process


def _size_text(size):
    """A size in the largest unit it fills: 2.0 KiB, not 0.0 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def zero_copy_allreduce_hook(process_group, bucket):
    """A DDP communication hook: DDP's default all-reduce, the mean of the
    ranks' gradients, with every bucket moved into the group's shared memory
    the first time it is seen, so that it is all-reduced without a copy in.
    The mean is taken in the all-reduce's own pass (AVG: summed in rank order,
    then scaled by 1/size), not by a division pass over the bucket first, as
    PyTorch's default hook does. For float32, float64 and bfloat16 on a
    group whose size is a power of two the result is bitwise that hook's
    (divide, then sum), except where a sum overflows or a gradient divided
    by the size falls below the normal range; float16 gradients below
    size * 6.1e-5, other sizes and complex gradients differ by a few
    roundings of the gradients' magnitude. Register it with
    ``model.register_comm_hook(None, axonml_torch.zero_copy_allreduce_hook)``
    (or a subgroup as the state); give the group room, ``Options(shared_mb=)``
    or ``AXON_TORCH_SHARED_MB``, of at least twice the group's size times the
    model's gradient size in MiB (DDP rebuilds its buckets after the first
    step, and both sets may be alive for a moment), and pass
    ``gradient_as_bucket_view=True`` so that the gradients themselves live in
    the buckets. Without room it works as the default hook does, and warns
    once.
    """
    group = _axon_group(process_group)
    tensor = bucket.buffer()
    placing = not _in_arena(group, tensor)
    # One op: the ranks agree where the buckets lie, then all-reduce. Every
    # call agrees afresh, so ranks whose buckets differ in place still meet
    # (DDP's join() gives a joined rank fresh zero buckets). AVG rather than
    # div_ then SUM: the division is a pass over the whole bucket of its own,
    # and took a third of the time (25 MB at n=2: 3.3 ms with it, 2.1 without;
    # benchmarks/torch_bucket_mean.py).
    fut = _allreduce_in_arena(group, tensor, average=True).get_future()

    def done(f):
        global _warned_no_room
        if placing and not _warned_no_room and not _in_arena(group, tensor):
            _warned_no_room = True
            size = _size_text(tensor.numel() * tensor.element_size())
            advice = ("; give the group room for twice the model's gradients: axonml_torch.Options(shared_mb=...) "
                      "or AXON_TORCH_SHARED_MB")
            if not _runtime_reduces(tensor):
                # A review: a complex bucket was told the arena had no room.
                why = (f"DDP's bucket holds {tensor.dtype}, which the runtime does not all-reduce in place (it "
                       f"places float32, float64, bfloat16, float16, int32 and int64)")
                advice = ""
            elif not _has_room_for_placing(group):
                why = "the axon group was made without room for tensors in its shared memory (shared_mb 0)"
            else:
                why = f"the axon group's shared memory has no room left for a bucket of {size} on every rank"
            warnings.warn(f"axonml_torch.zero_copy_allreduce_hook: {why}; DDP's buckets are all-reduced with a "
                          f"copy, as without the hook (the bucket was {size}{advice})", RuntimeWarning)
        return f.value()[0]
    return fut.then(done)


class Options:
    """Options of one axon group, passed as ``pg_options`` to
    ``init_process_group("axon", pg_options=...)`` or ``new_group(...,
    backend="axon", pg_options=...)``.

    shared_mb: MiB of room in the group's shared memory for tensors moved
    there by ``place_in_arena`` (DDP's buckets, through
    ``zero_copy_allreduce_hook``), shared by all its ranks: at least the
    group's size times the bytes each rank places. Taken from memory when the
    group is made. None: ``AXON_TORCH_SHARED_MB``, else 0.
    """

    def __init__(self, shared_mb=None):
        if shared_mb is not None and (not isinstance(shared_mb, int) or isinstance(shared_mb, bool)
                                      or not 0 <= shared_mb <= 1 << 24):
            raise ValueError(f"axonml_torch.Options: shared_mb={shared_mb!r} is not a whole number of MiB "
                             f"in 0..{1 << 24}")
        self.shared_mb = shared_mb

    def __repr__(self):
        return f"axonml_torch.Options(shared_mb={self.shared_mb!r})"


def _processes_on_this_machine():
    """The job's processes that share this machine's cores, for a subgroup's
    waits: the whole job when its default group is axon (one machine only),
    else LOCAL_WORLD_SIZE where the launcher set it (axon-launch, torchrun),
    else the whole job (a Gloo job across machines that sets neither should
    set AXON_OVERSUBSCRIBED: counting other machines' processes, its
    subgroups would yield rather than spin; a review)."""
    world = torch.distributed.get_world_size()
    if torch.distributed.get_backend() == "axon":
        return world
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and 0 < int(local) <= world else world


def _create_from_options(options, pg_options=None):
    """The creator torch.distributed calls (register_backend's extended_api):
    besides the store, rank, size and timeout it gives the group's members as
    global ranks (empty for the default group), which the set-up needs to
    name a process of the job that died before the group was made."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"backend axon: pg_options must be an axonml_torch.Options, not "
                        f"{type(pg_options).__name__}")
    shared_mb = pg_options.shared_mb if pg_options is not None else None
    # A subgroup's arena holds its members alone, but the job's every process
    # on this machine competes for its cores: new_group([0, 1]) of eight
    # processes on two cores must not spin in its waits (a review found it
    # did, without axon-launch, which sets AXON_OVERSUBSCRIBED).
    job_size = _processes_on_this_machine() if options.global_ranks_in_group else options.group_size
    group = create_process_group(options.store, options.group_rank, options.group_size, options.timeout,
                                 list(options.global_ranks_in_group), shared_mb, job_size)
    if not options.global_ranks_in_group:
        # torch.distributed's default group: its store (rank 0's, under
        # env:// and tcp://) goes with it, and the program may make the
        # group again at once.
        _close_store_together_as_it_goes(group)
    return group


class _BarrierStoreWatchingPeers:
    """The store that PyTorch's store-based barrier at the end of new_group()
    (and init_process_group(), `call`) polls, passed through, watching for processes
    that will never come. Every process of the job adds 1 to the barrier's
    key, then each polls it (add of 0, every 10 ms) until all have: one that
    died before it added leaves the others polling for new_group's timeout,
    30 minutes by default (found by a review). Here each process first marks
    its arrival under a key of its own, and about every tenth poll asks
    whether this process's axon groups saw a process of the job exit (or
    leave the default group: its program is ending); one that did without
    marking its arrival never comes, and the barrier raises, naming it.
    The store failing under a poll (rank 0's process, which hosts it under
    env:// and tcp://, gone) is reported naming that process where one of
    the groups saw it go (a review saw a bare "Connection reset by peer")."""

    def __init__(self, store, rank, world_size, call):
        self._store = store
        self._rank = rank
        self._world_size = world_size
        self._where = f"PyTorch's store-based barrier at the end of {call}"  # "new_group()"
        self._polls = 0

    def add(self, key, value):
        never_comes = None
        try:
            count = self._store.add(key, value)
            # Marked after the count: a process killed between the two then
            # has counted and is taken for one that never came, not the
            # reverse (marked first, it seemed come, and the count it never
            # added left the others waiting for new_group's timeout: a review,
            # about 1 kill in 100).
            if value != 0:
                self._store.add(f"{key}/axon_arrived/{self._rank}", 1)  # add: every store has it (check() is C++ only)
            self._polls += 1
            if value == 0 and count != self._world_size and self._polls % 10 == 0:
                for global_rank, description in _exited_processes():
                    if self._store.add(f"{key}/axon_arrived/{global_rank}", 0) == 0:
                        never_comes = description
                        break
        except RuntimeError as error:
            raise self._store_failed(key, error) from error
        if never_comes is not None:
            # Recorded as this rank's cause, as a store failure is: peers it
            # then leaves waiting are told it.
            reason = (f"rank {self._rank}: {never_comes}, before it came to {self._where} (key {key}), which every "
                      f"process of the job must reach: {count} of {self._world_size} did")
            _note_failure_elsewhere(reason)
            raise RuntimeError(reason)
        return count

    def _store_failed(self, key, error):
        gone = _process_gone_with_the_store()
        where = f"{self._where} (key {key})"
        if gone is None:
            return RuntimeError(
                f"rank {self._rank}: the store failed ({error}) in {where}; under env:// and tcp:// the store lives "
                f"in global rank 0's process, so that process may have failed or exited: see its error")
        reason = (f"rank {self._rank}: {gone[1]}, and the store failed ({error}) while this rank waited in "
                  f"{where}")
        _note_failure_elsewhere(reason)
        return RuntimeError(reason)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _watch_store_based_barrier():
    c10d = torch.distributed.distributed_c10d
    barrier = getattr(c10d, "_store_based_barrier", None)
    if barrier is None or getattr(barrier, "_axon_watches_peers", False):
        return
    last_default_group = [None]  # a weak reference

    def store_based_barrier(*args, **kwargs):
        if len(args) != 3 or kwargs:  # not PyTorch 1.13's (rank, store, timeout): leave it be
            return barrier(*args, **kwargs)
        rank, store, timeout = args
        # A default group other than the last barrier's means that this is
        # init_process_group's barrier of a new world (whatever its backend).
        # Groups the program still holds from the old one number their
        # members as it did, and must not be asked about this one's
        # processes (found by a review). (The count of groups, compared
        # before, also grows at an init_process_group that fails, and the
        # retry's barrier was taken for new_group's: a review.)
        default_group = c10d._get_default_group()
        begins = last_default_group[0] is None or last_default_group[0]() is not default_group
        if begins:
            _world_begins(default_group)
            last_default_group[0] = weakref.ref(default_group)  # PyTorch 1.13's groups take weak references
        watched = _BarrierStoreWatchingPeers(store, rank, c10d.get_world_size(),
                                             "init_process_group()" if begins else "new_group()")
        return barrier(rank, watched, timeout)

    store_based_barrier._axon_watches_peers = True
    c10d._store_based_barrier = store_based_barrier


if "AXON" not in torch.distributed.Backend._plugins:
    torch.distributed.Backend.register_backend("axon", _create_from_options, extended_api=True)
    # A program may end without destroy_process_group(), with ops (and their
    # callbacks) still running on a group's threads; once the interpreter is
    # finalizing, those threads can no longer drop the Python objects they
    # hold. Let them finish while it still can, and release the peers that
    # wait for this rank in an op it will never call (_program_ends).
    atexit.register(_program_ends)
    # Ctrl-C's handler, held off by a wait PyTorch makes in C++ (DDP's
    # backward), runs before an uncaught error is printed, not halfway
    # through printing it ("lost sys.stderr"; see the function's comment);
    # and the error the program ends on is kept for _program_ends.
    sys.excepthook = _excepthook_running_signal_handlers_first(sys.excepthook)
    _watch_store_based_barrier()

__all__ = ["Options", "create_process_group", "in_arena", "place_in_arena", "zero_copy_allreduce_hook"]
