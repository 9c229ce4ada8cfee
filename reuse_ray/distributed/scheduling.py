"""Scheduling a round's work on the pool: largest clients first, small ones batched, and the
validation of w_t split into parts that fill the round's tail."""

from __future__ import annotations

import ray

from ..engine.records import combine_batches
from ..engine.round import vector_groups
from .actors import TaskHandle
from .proxy import Result, _get_unwrapped

VALIDATION_PARTS_PER_WORKER = 2  # a validation's parts: at most this many per worker
DISPATCH_SPREAD = 4  # a batch holds at most 1 / (spread × workers) of the work still queued


def dispatch_batches(
    costs: list[int], workers: int, items: list, spread: int = DISPATCH_SPREAD
) -> list[list]:
    """Cut ``items`` (already in LPT order, largest first; ``costs`` theirs) into the batches
    one worker call runs back to back: each batch takes items while its cost stays within
    the work still queued ÷ (``spread`` × ``workers``), and at least one item. Large clients
    therefore go alone, as in plain LPT, and small ones travel together, in batches that
    shrink towards the round's end, so the workers finish together. Where a call's round trip
    is comparable to a client's training (many small clients, or a GPU), the workers would
    otherwise idle between calls. Results do not depend on the batching: every client is
    computed from the same inputs, whichever call runs it."""
    batches: list[list] = []
    remaining = sum(costs)
    k = 0
    while k < len(items):
        target = remaining / (spread * max(workers, 1))
        batch, cost = [items[k]], costs[k]
        k += 1
        while k < len(items) and cost + costs[k] <= target:
            batch.append(items[k])
            cost += costs[k]
            k += 1
        batches.append(batch)
        remaining -= cost
    return batches


class ValidationPart:
    """Some evaluation batches of an evaluation (of the validation split, or of a split in
    the object store), one worker task."""

    def __init__(
        self,
        w_ref: ray.ObjectRef,
        batches: range,
        cost: int,
        split_ref: ray.ObjectRef | None = None,
    ):
        self.w_ref, self.batches, self.cost, self.ref = w_ref, batches, cost, None
        self.split_ref = split_ref

    def submit(self, worker, setup_box: list) -> ray.ObjectRef:
        self.ref = worker.validate.remote(self.w_ref, setup_box, self.batches, self.split_ref)
        return self.ref


class WorkerValidation:
    """A validation of fixed weights that client workers run as tasks of a round's queue
    (:meth:`RayBackend.validate_next_round`), cut into parts of whole evaluation batches so
    the smallest tasks come last and even out the round's end; ``result()`` is its
    (accuracy, loss), the parts' batches added in order (:func:`combine_batches`)."""

    def __init__(self, parts: list[ValidationPart], n: int, dispatch_now):
        self.parts, self.n = parts, n
        self._dispatch_now = dispatch_now  # for parts no round took

    def result(self) -> tuple[float, float]:
        if any(part.ref is None for part in self.parts):
            self._dispatch_now(self)
        got = _get_unwrapped([part.ref for part in self.parts])
        return combine_batches([b for part in got for b in part], self.n)


def with_side_jobs(queue: list, jobs: list, cost) -> list:
    """``queue`` (batches in LPT order) with each side job inserted, on its own, before the
    first batch that costs less (``cost(batch)``): the jobs take their LPT place."""
    out = list(queue)
    for job in jobs:
        cheaper = (
            i for i, b in enumerate(out) if not isinstance(b, ValidationPart) and cost(b) < job.cost
        )
        k = next(cheaper, len(out))
        out.insert(k, job)
    return out


class RayPool:
    """Client tasks over a pool of worker actors, largest clients first (LPT), small ones in
    batches (:func:`dispatch_batches`)."""

    def __init__(
        self,
        workers: list,
        sizes: dict[int, int],
        setup_box: list,
        vectorize_group: int = 0,
        side: list | None = None,
    ):
        """``setup_box``: ``[setup ref, training split ref]`` (:meth:`ClientWorkerActor.load`).
        ``vectorize_group`` > 0: tasks go to workers in the vectorized groups of
        :func:`~reuse_ray.engine.worker.vector_groups` (one call trains a group). ``side``:
        :class:`ValidationPart` tasks the round's main run takes into its queue (and removes
        from the list)."""
        self.workers, self.sizes, self.setup_box = workers, sizes, setup_box
        self.vectorize_group = vectorize_group
        self.side = side if side is not None else []

    def run(
        self, tasks: list[TaskHandle], w_ref: ray.ObjectRef, main: bool = False
    ) -> list[Result]:
        """Run every task on idle workers; the refs come back in client order. The main run
        also runs the side jobs, each in its LPT place, and returns when they are done too."""
        refs: dict[int, Result] = {}
        pending: dict[ray.ObjectRef, int] = {}

        def cost(group: list[TaskHandle]) -> int:
            return sum(self.sizes.get(x.client, 0) for x in group)

        # largest clients (or groups) first (LPT scheduling) keeps the pool busy until the
        # round's end; results do not depend on which worker runs what, or in which order
        if self.vectorize_group:
            queue = sorted(
                vector_groups(tasks, self.vectorize_group), key=lambda g: (-cost(g), g[0].client)
            )
        else:
            lpt = sorted(tasks, key=lambda x: (-self.sizes.get(x.client, 0), x.client))
            queue = dispatch_batches(
                [self.sizes.get(x.client, 0) for x in lpt], len(self.workers), lpt
            )
        if main and self.side:
            queue = with_side_jobs(queue, self.side, cost)
            self.side.clear()
        idle = list(range(len(self.workers)))
        while queue or pending:
            while queue and idle:
                group, wid = queue.pop(0), idle.pop(0)
                if isinstance(group, ValidationPart):
                    pending[group.submit(self.workers[wid], self.setup_box)] = wid
                    continue
                method = "run_group" if self.vectorize_group else "run_many"
                run = getattr(self.workers[wid], method).options(num_returns=3)
                out = run.remote(group, w_ref, self.setup_box)
                for k, task in enumerate(group):
                    refs[task.client] = (*out, k)
                pending[out[0]] = wid
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                idle.append(pending.pop(ref))
        return [refs[c] for c in sorted(refs)]
