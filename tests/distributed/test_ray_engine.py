"""The Ray engine: bit-identical to the local engine, fault tolerant, clear on real failures."""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import numpy as np
import pandas as pd
import pytest
import ray
from conftest import small_config, write_pathmnist

from reuse_ray.config import DataConfig, EngineConfig
from reuse_ray.data import DatasetUnavailableError, load_dataset
from reuse_ray.distributed import RayBackend, kept_workers, pool_size_from_resources
from reuse_ray.engine import ClientError
from reuse_ray.results import TIMING_COLUMNS, read_table
from reuse_ray.results.reader import read_table_if_any
from reuse_ray.runner import run_fl

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    """One Ray instance for the module, its runs on one kept pool of actors (started once;
    every run below loads its own setup, so each is held to the local engine's bits as a
    fresh pool's run would be)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    with kept_workers():
        yield
    ray.shutdown()


# the runs columns that say where and when a run ran, not what it computed
ENGINE_COLUMNS = {
    "backend",
    "wall_s",
    "started_at",
    "attempt_wall_s",
    "attempt_started_at",
    "host",
    "ray_node",
    "cfg.results_dir",
}


def _computed(config_json: str) -> dict:
    """A run's config without the engine and the results folder."""
    cfg = json.loads(config_json)
    cfg.pop("engine"), cfg.pop("results_dir")
    return cfg


def _ray(cfg, **engine):
    return dataclasses.replace(cfg, engine=EngineConfig(backend="ray", **engine))


def _frames(results_dir):
    out = {}
    for table in ("rounds", "client_events", "clients", "levels"):
        df = read_table_if_any(results_dir, table)
        if df is None:  # a run without uplink levels
            continue
        df = df.drop(columns=[c for c in df.columns if c in TIMING_COLUMNS])
        keys = [c for c in ("ledger", "level", "round", "client_id") if c in df.columns]
        out[table] = df.sort_values(keys).reset_index(drop=True)
    return out


METHODS = {
    "fedavg_topk": {"fl__rounds": 3},
    "fedavg_topk_ef": {"fl__rounds": 4, "method__error_feedback": True},
    "dg_fedreuse": {
        "fl__rounds": 8,
        "method__name": "dg_fedreuse",
        "method__dg__tau0": 0.3,
        "method__dg__tau_min": 0.2,
        "fl__eval_every": 4,
    },
    # readings at uplink levels: w_{t-1} held as an object the driver owns, read after round t
    "dg_levels": {
        "fl__rounds": 8,
        "method__name": "dg_fedreuse",
        "method__dg__tau0": 0.3,
        "method__dg__tau_min": 0.2,
        "fl__eval_every": 4,
        "fl__uplink_levels": [0.02, 0.05, 0.1, 0.2],
    },
    # per-client memories in the object store, client-local states, new codecs, empty rounds
    "mifa_bernoulli": {"fl__rounds": 4, "method__name": "mifa", "fl__participation": "bernoulli"},
    # MIFA waiting for every client's first update: rounds whose server step is held back
    "mifa_wait": {
        "fl__rounds": 5,
        "fl__clients_per_round": 5,
        "method__name": "mifa",
        "method__mifa__init": "wait",
    },
    "scaffold": {"fl__rounds": 3, "method__name": "scaffold"},
    "laq": {
        "fl__rounds": 5,
        "method__name": "laq",
        "method__topk_ratio": 1.0,
        "method__laq__bits": 4,
    },
    "fedluar": {"fl__rounds": 4, "method__name": "fedluar", "method__fedluar__delta": 1},
    "fedsteer": {
        "fl__rounds": 4,
        "method__name": "fedsteer",
        "method__topk_ratio": 1.0,
        "method__fedsteer__core_size": 3,
        "method__fedsteer__warmup": 2,
    },
}


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    refs = {}
    for name, kw in METHODS.items():
        cfg = small_config(tmp_path_factory.mktemp(name), **kw)
        assert run_fl(cfg).status == "finished"
        refs[name] = (cfg, _frames(cfg.results_dir))
    return refs


@pytest.mark.parametrize(
    ("method", "workers"),
    [("fedavg_topk", 1), ("fedavg_topk", 2), ("fedavg_topk_ef", 2), ("dg_fedreuse", 2)]
    + [("dg_levels", 2)]
    + [(m, 2) for m in ("mifa_bernoulli", "mifa_wait", "scaffold", "laq", "fedluar", "fedsteer")],
)
def test_ray_engine_is_bit_identical_to_local(tmp_path, local_reference, method, workers):
    local_cfg, local = local_reference[method]
    cfg = _ray(small_config(tmp_path, **METHODS[method]), num_workers=workers)
    summary = run_fl(cfg)
    assert summary.status == "finished" and summary.row["backend"] == "ray"
    assert cfg.run_id == local_cfg.run_id
    theirs = _frames(cfg.results_dir)
    for table in local:
        pd.testing.assert_frame_equal(local[table], theirs[table], check_exact=True)
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    local_runs = read_table(local_cfg.results_dir, "runs").iloc[0]
    # every runs column, test metrics included, except where and when it ran
    differ = [
        c
        for c in local_runs.index
        if c not in ENGINE_COLUMNS | {"config_json"}
        and not c.startswith("cfg.engine.")
        and not (pd.isna(local_runs[c]) and pd.isna(runs[c]))
        and local_runs[c] != runs[c]
    ]
    assert differ == [], {c: (local_runs[c], runs[c]) for c in differ}
    assert _computed(runs["config_json"]) == _computed(local_runs["config_json"])
    assert pd.notna(runs["test_loss"])
    if method == "dg_levels":
        levels = theirs["levels"]
        assert levels["status"].isin(["crossed", "over"]).any() and levels["test_acc"].notna().all()
        assert runs["test_reads"] > 1  # at T and once per earlier reading round
    else:
        assert runs["test_reads"] == 1
    if method == "dg_fedreuse":
        assert (theirs["client_events"]["decision"] == "reused").any()
    if method not in ("fedavg_topk", "fedavg_topk_ef"):
        assert runs["server_memory_bytes"] > 0
    if method == "laq":
        assert (theirs["client_events"]["decision"] == "lazy").any()


@pytest.mark.parametrize("method", ["fedavg_topk", "scaffold", "dg_fedreuse"])
def test_vectorized_groups_on_ray_are_bit_identical_to_local(tmp_path, method):
    """engine.vectorize: groups of 3 spread over 2 workers give the local engine's bits."""
    cfgs = {}
    for backend in ("local", "ray"):
        cfg = small_config(tmp_path / backend, **METHODS[method])
        cfgs[backend] = dataclasses.replace(
            cfg,
            engine=EngineConfig(backend=backend, num_workers=2, vectorize=True, vectorize_group=3),
        )
        assert run_fl(cfgs[backend]).status == "finished"
    local, theirs = (_frames(cfgs[b].results_dir) for b in ("local", "ray"))
    for table in local:
        pd.testing.assert_frame_equal(local[table], theirs[table], check_exact=True)


def test_channels_last_on_ray_is_bit_identical_to_local(tmp_path):
    cfgs = {}
    for backend in ("local", "ray"):
        cfg = small_config(tmp_path / backend, **METHODS["dg_fedreuse"])
        cfgs[backend] = dataclasses.replace(
            cfg, engine=EngineConfig(backend=backend, num_workers=2, channels_last=True)
        )
        assert run_fl(cfgs[backend]).status == "finished"
    local, theirs = (_frames(cfgs[b].results_dir) for b in ("local", "ray"))
    for table in local:
        pd.testing.assert_frame_equal(local[table], theirs[table], check_exact=True)


def _started_backend(cfg) -> RayBackend:
    """A started Ray backend on the digits CNN, for driving rounds by hand."""
    from reuse_ray.engine import make_setup, prepare_data

    data, parts = prepare_data(cfg)
    backend = RayBackend(cfg)
    backend.start(make_setup(cfg, data, parts)[0])
    return backend


def test_dg_cache_lives_in_the_object_store(tmp_path):
    from reuse_ray.algorithms.dg_fedreuse import DGState

    backend = _started_backend(
        _ray(small_config(tmp_path, **METHODS["dg_fedreuse"]), num_workers=2)
    )
    try:
        for t in (1, 2):
            backend.run_round(t, [0, 1, 2, 3])
        # the state as values (a snapshot materialises the table) ...
        state = ray.get(backend.server.__ray_call__.remote(lambda self: self.core.state))
        assert isinstance(state, DGState) and set(state.cache) == {0, 1, 2, 3}
        packed = list(state.cache.values())
        # ... while inside the server actor the cached updates are object-store refs
        refs = ray.get(backend.server.table_handles.remote())
        assert len(refs) == 4 and all(isinstance(h, ray.ObjectRef) for h in refs)
        heads = sum(4 * h.numel() for h in state.signature.values())
        assert backend.memory_bytes()["server"] == sum(p.nbytes for p in packed) + heads > 0
        # every worker said what it computes on: here one kind, this machine's, so no note
        from reuse_ray.machine import machine_kind

        assert backend.machine_kinds == [machine_kind("cpu")] * 2
        assert backend.machine_note is None
    finally:
        backend.close()


def test_a_kept_pool_serves_the_next_run_of_its_shape_and_ends_with_its_block(tmp_path):
    """``kept_workers()``: a closed run's actors, emptied, serve the next run of the same pool
    shape; a run of another shape ends them and starts its own; the block's end ends those."""

    def pids(backend):
        return ray.get([a.pid.remote() for a in [*backend.workers, backend.server]])

    two = _ray(small_config(tmp_path / "a", fl__rounds=2), num_workers=2)
    with kept_workers():  # this test's own block inside the module's
        first = _started_backend(two)
        before, handles = pids(first), list(first.workers)
        first.close()
        # emptied: no worker, no server state left in the kept processes
        assert ray.get([h.__ray_call__.remote(lambda self: self.worker) for h in handles]) == [
            None,
            None,
        ]
        assert not ray.get(handles[0].has_server.remote())
        again = _started_backend(dataclasses.replace(two, results_dir=str(tmp_path / "b")))
        assert pids(again) == before
        again.run_round(1, [0, 1, 2, 3])  # loaded from its own setup: it runs
        again.close()
        one = _started_backend(
            _ray(small_config(tmp_path / "c", fl__rounds=2), num_workers=1)
        )  # another shape: the kept pair ends, a pool of one starts
        last, last_pid = one.workers[0], pids(one)[0]
        assert len(one.workers) == 1 and last_pid not in before
        _dies(handles[1])
        one.close()
        assert ray.get(last.pid.remote(), timeout=60) == last_pid  # kept, alive
    _dies(last)  # the block ended: so did the pool it kept


def _dies(actor, within_s: float = 60.0) -> None:
    """The actor is gone within ``within_s`` (``ray.kill`` is asynchronous: a call sent just
    after it may still be answered)."""
    import time

    from ray.exceptions import RayActorError

    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=within_s)
        except RayActorError:
            return
        time.sleep(0.2)
    pytest.fail(f"{actor} still answers {within_s:g} s after it was ended")


@pytest.mark.parametrize("method", ["mifa", "fedstale", "ef21", "laq", "scaffold"])
def test_per_client_memories_live_in_the_object_store(tmp_path, method):
    kw = {"method__topk_ratio": 1.0} if method == "laq" else {}
    backend = _started_backend(
        _ray(small_config(tmp_path, method__name=method, **kw), num_workers=2)
    )
    try:
        for t in (1, 2):
            backend.run_round(t, [0, 1, 2, 3])

        # memories y_i (or SCAFFOLD's client-kept c_i; LAQ adds its clients' (ε̂, clock))
        refs = ray.get(backend.server.table_handles.remote())
        assert len(refs) == (8 if method == "laq" else 4)
        assert all(isinstance(h, ray.ObjectRef) for h in refs)
        memory = backend.memory_bytes()
        d = ray.get(backend.server.__ray_call__.remote(lambda self: self.core.layout.dim))
        if method == "scaffold":
            assert memory == {"server": 4 * d, "client": 4 * 4 * d}
        else:
            assert memory == {"server": 4 * d * 5, "client": 0 if method != "laq" else 4 * 16}
    finally:
        backend.close()


class _KillOnSubmit:
    """Worker 0's handle, killing its actor (Ray restarts it) right after the first client
    task is submitted to it: the task is then certainly in flight, queued or running."""

    def __init__(self, handle):
        self.handle, self.killed = handle, False

    def __getattr__(self, name):
        return getattr(self.handle, name)

    @property
    def run_many(self):  # the pool calls ``run_many.options(...).remote(...)``
        return self

    def options(self, **kw):
        self.kw = kw
        return self

    def remote(self, *args):
        out = self.handle.run_many.options(**self.kw).remote(*args)
        if not self.killed:
            ray.kill(self.handle, no_restart=False)
            self.killed = True
        return out


class _KillingBackend(RayBackend):
    """Kills worker 0 with round 2's first task in flight; records its pid before and
    after."""

    def run_round(self, t, selected):
        if t != 2:
            return super().run_round(t, selected)
        self.pid_before = ray.get(self.workers[0].pid.remote())
        handle = self.workers[0]
        self.workers[0] = proxy = _KillOnSubmit(handle)
        try:
            report = super().run_round(t, selected)
        finally:
            self.workers[0] = handle
        assert proxy.killed
        self.pid_after = ray.get(self.workers[0].pid.remote())
        return report


def test_killing_a_worker_mid_round_changes_nothing(tmp_path):
    kw = {"fl__rounds": 3, "train__epochs": 8, "train__batch_size": 8}
    calm = small_config(tmp_path / "calm", **kw)  # undisturbed: the local engine's tables
    run_fl(calm)
    hit = _ray(small_config(tmp_path / "hit", **kw), num_workers=2)
    backend = _KillingBackend(hit)
    assert run_fl(hit, backend=backend).status == "finished"
    assert backend.pid_after != backend.pid_before  # the actor really died and restarted
    # worker 0 hosted the server (the default engine.server_process): its state went with
    # the process and was rebuilt from the snapshot once
    assert backend.hosted and backend.restarts == 1
    a, b = _frames(calm.results_dir), _frames(hit.results_dir)
    for table in a:
        pd.testing.assert_frame_equal(a[table], b[table], check_exact=True)


class _CorruptClientBackend(RayBackend):
    """Client 3's data is corrupt: its indices point outside the training split."""

    def build(self, cfg, data, parts):
        parts = list(parts)
        parts[3] = np.array([10**9], dtype=np.int64)
        return super().build(cfg, data, parts)


class _ServerKiller(RayBackend):
    """SIGKILLs the server actor's process before round ``at``, and in round ``at + 2`` after
    the clients worked, just before the server's step."""

    at = 2
    mid_done = False

    def run_round(self, t, selected):
        if t == self.at:
            os.kill(ray.get(self.server.pid.remote()), signal.SIGKILL)
        return super().run_round(t, selected)

    def _play(self, t, selected):
        if t != self.at + 2 or self.mid_done:
            return super()._play(t, selected)
        self.mid_done = True
        import reuse_ray.distributed.backend as rb

        step = rb.RemoteServer.step

        def killing_step(srv, *args, **kwargs):
            os.kill(ray.get(srv.actor.pid.remote()), signal.SIGKILL)
            return step(srv, *args, **kwargs)

        rb.RemoteServer.step = killing_step
        try:
            return super()._play(t, selected)
        finally:
            rb.RemoteServer.step = step


SERVER_KILL = {"fl__rounds": 6, "method__name": "mifa", "fl__participation": "bernoulli"}


@pytest.fixture(scope="module")
def calm_mifa(tmp_path_factory):
    """The tables of the undisturbed run the server-kill tests disturb (the local engine's:
    the Ray engine's are the same, bit for bit)."""
    cfg = small_config(tmp_path_factory.mktemp("calm"), **SERVER_KILL)
    assert run_fl(cfg).status == "finished"
    return _frames(cfg.results_dir)


@pytest.mark.parametrize("place", ["worker", "own"])
def test_killing_the_server_actor_changes_nothing(tmp_path, calm_mifa, place):
    """The server's process dies twice (with ``place`` worker, that is client worker 0's,
    which Ray restarts without the server's state); the tables are those of a calm run."""
    hit = _ray(small_config(tmp_path / "hit", **SERVER_KILL), num_workers=2, server_process=place)
    backend = _ServerKiller(hit)
    assert run_fl(hit, backend=backend).status == "finished"
    assert backend.restarts == 2 and backend.mid_done  # both kills happened and were survived
    assert backend.hosted == (place == "worker")
    a, b = calm_mifa, _frames(hit.results_dir)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)


def test_unretryable_client_failure_names_client_and_round(tmp_path):
    cfg = _ray(
        small_config(
            tmp_path, fl__rounds=4, fl__num_clients=10, fl__clients_per_round=10, fl__eval_every=1
        )
    )
    with pytest.raises(ClientError, match="client 3 failed in round 1 during local training"):
        run_fl(cfg, backend=_CorruptClientBackend(cfg))
    runs = read_table(cfg.results_dir, "runs")
    assert runs.iloc[0]["status"] == "failed" and "client 3" in runs.iloc[0]["error"]
    assert len(read_table(cfg.results_dir, "clients")) == 10  # what was written stays readable


def test_dispatch_batches_keep_lpt_order_and_shrink_to_single_clients():
    from reuse_ray.distributed.backend import dispatch_batches

    # hand case: 8 unit costs, 1 worker, spread 2 — targets 8/2, 4/2, 2/2, 1/2
    assert dispatch_batches([1] * 8, 1, list("abcdefgh"), spread=2) == [
        list("abcd"),
        list("ef"),
        ["g"],
        ["h"],
    ]
    # a client larger than the target goes alone; the small ones after it travel together
    costs = [50, 10, 10, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    out = dispatch_batches(costs, 2, list(range(len(costs))), spread=1)
    assert out[0] == [0] and [x for b in out for x in b] == list(range(len(costs)))
    assert len(out) < len(costs) and len(out[-1]) == 1
    many = dispatch_batches([1] * 1000, 2, list(range(1000)))
    assert [x for b in many for x in b] == list(range(1000)) and len(many) < 100
    assert dispatch_batches([], 2, []) == []


def test_side_jobs_take_their_lpt_place_in_the_queue():
    from reuse_ray.distributed.backend import ValidationPart, with_side_jobs

    sizes = {"a": 5, "b": 3, "c": 1, "d": 1}
    queue = [["a"], ["b"], ["c", "d"]]
    big, small = (ValidationPart(None, range(1), c) for c in (4, 2))
    out = with_side_jobs(queue, [big, small], lambda b: sum(sizes[x] for x in b))
    assert out == [["a"], big, ["b"], ["c", "d"], small]  # [c, d] costs 2: not cheaper
    assert queue == [["a"], ["b"], ["c", "d"]]


def test_workers_validate_w_t_inside_the_next_round(tmp_path, local_reference, monkeypatch):
    """On CPU workers, the validation of every evaluated round but the last is a task of the
    next round on a client worker: only the last round and the test split are evaluated in
    line (by the workers too), and the rounds carry the local engine's numbers bit for bit."""
    calls, deferred = [], []
    real, real_next = RayBackend.evaluate, RayBackend.validate_next_round
    monkeypatch.setattr(RayBackend, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(
        RayBackend, "validate_next_round", lambda *a: deferred.append(1) or real_next(*a)
    )
    local_cfg, local = local_reference["fedavg_topk"]
    cfg = _ray(small_config(tmp_path, **METHODS["fedavg_topk"]), num_workers=2)
    assert run_fl(cfg).status == "finished"
    rounds = _frames(cfg.results_dir)["rounds"]
    assert rounds["val_acc"].notna().sum() == 3  # rounds 1, 2 (eval_every 2) and 3
    assert len(deferred) == 2  # rounds 1 and 2, inside rounds 2 and 3
    assert len(calls) == 2  # round 3's validation and the test split, in line
    pd.testing.assert_frame_equal(local["rounds"], rounds, check_exact=True)


def test_a_validation_no_round_took_runs_when_asked(tmp_path):
    """A validation asked for when no round follows (a round without client work, a failed
    run) is dispatched by ``result()`` itself, with the numbers of an evaluation in this
    process; so are the in-line evaluations of the validation and the test split."""
    from reuse_ray.engine import make_setup, prepare_data
    from reuse_ray.training import evaluate

    cfg = _ray(small_config(tmp_path), num_workers=1)
    data, parts = prepare_data(cfg)
    setup, model = make_setup(cfg, data, parts)
    backend = RayBackend(cfg)
    backend.start(setup)
    try:
        job = backend.validate_next_round()
        want = evaluate(
            model, setup.layout, backend.weights(), data.val, data.info, cfg.train.eval_batch_size
        )
        assert job.result() == want and backend._side == []
        assert backend.evaluate() == want
        test = data.test()
        assert backend.evaluate(test) == evaluate(
            model, setup.layout, backend.weights(), test, data.info, cfg.train.eval_batch_size
        )
    finally:
        backend.close()


def test_pool_sizing_helper():
    size = pool_size_from_resources
    assert size({"CPU": 2.0}, clients_per_round=10, use_gpu=False) == 2
    assert size({"CPU": 16.0}, clients_per_round=10, use_gpu=False) == 10
    assert size({"CPU": 16.0}, clients_per_round=10, use_gpu=False, cpu_per_worker=4) == 4
    assert size({"CPU": 16.0, "GPU": 1.0}, clients_per_round=10, use_gpu=True) == 4
    assert size({"GPU": 2.0}, clients_per_round=10, use_gpu=True, gpu_fraction=0.5) == 4
    assert size({"CPU": 8.0}, clients_per_round=10, use_gpu=False, num_workers=3) == 3
    with pytest.raises(ValueError, match="no client worker fits"):
        size({"CPU": 0.5}, clients_per_round=10, use_gpu=False)


def test_client_worker_processes_import_no_analysis_stack():
    """A worker imports the actors module: no pandas, pyarrow, matplotlib, optuna or Tune."""
    import subprocess
    import sys

    code = (
        "import sys, reuse_ray.distributed.actors; "
        "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib', 'optuna', 'ray.tune', "
        "'sklearn', 'analysis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_run_driver_starts_its_actors_before_importing_pandas():
    """What a Ray run's driver imports before it connects and starts its actors (the config,
    the loop, the results writer, the Ray backend) holds no pandas, pyarrow's dataset layer
    or torch: about 0.45 s less before the workers can start (pyarrow imports pandas later,
    when the first rows are written, while the workers warm up)."""
    import subprocess
    import sys

    code = (
        "import sys, reuse_ray.config, reuse_ray.engine.run_parts, reuse_ray.results, "
        "reuse_ray.distributed.backend; print(sorted(m for m in "
        "('pandas', 'pyarrow.dataset', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_driver_reads_the_dataset_the_loader_task_put_in_the_store(tmp_path, monkeypatch):
    """The Ray engine loads the data in a task on the driver's node: the driver's arrays are
    zero-copy (read-only) views of the object store, equal to a local load, from the driver's
    data root (its environment, not the task's); the workers' split is the same object."""
    write_pathmnist(tmp_path / "envroot")
    monkeypatch.setenv("REUSE_RAY_DATA", str(tmp_path / "envroot"))
    cfg = _ray(
        small_config(
            tmp_path,
            data__name="pathmnist",
            fl__num_clients=4,
            fl__clients_per_round=2,
            fl__rounds=1,
        )
    )
    backend = RayBackend(cfg)
    try:
        data = backend.load_data(cfg.data)
        ref = load_dataset(DataConfig(name="pathmnist"))
        for got, want in ((data.train, ref.train), (data.val, ref.val), (data.test(), ref.test())):
            assert np.array_equal(got.x, want.x) and np.array_equal(got.y, want.y)
        assert not data.train.x.flags.writeable and not data.val.x.flags.writeable
        start, same = backend.start, []

        def start_and_look(setup=None):
            start(setup)
            same.append(backend._setup_box[1] == backend._loaded[1])  # no second copy

        backend.start = start_and_look
        assert run_fl(cfg, backend=backend, data=data).status == "finished"
        assert same == [True]
    finally:
        backend.close()


def test_the_loader_task_imports_no_torch():
    """A task's function is imported by module where it runs: the loader's is the data
    registry's (which imports no torch, tests/data), not the backend's (which does)."""
    from reuse_ray.distributed.backend import _load_remote

    pickled = ray.cloudpickle.dumps(_load_remote._function)
    assert b"reuse_ray.data.registry" in pickled and b"distributed" not in pickled


def test_a_missing_dataset_on_the_ray_engine_is_its_one_line_error(tmp_path):
    cfg = _ray(small_config(tmp_path, data__name="mnist", data__root=str(tmp_path / "empty")))
    with pytest.raises(DatasetUnavailableError) as exc:
        run_fl(cfg)
    msg = str(exc.value)
    assert "\n" not in msg and "'mnist'" in msg and "reuse-ray fetch" in msg
    assert type(exc.value) is DatasetUnavailableError  # not Ray's wrapper, no remote traceback


DRIVER_WITHOUT_TORCH = """
import sys
from reuse_ray.config import RunConfig
from reuse_ray.configio import from_dict
from reuse_ray.engine import RunHooks
from reuse_ray.runner import run_fl
from reuse_ray.engine.observers import SaveCheckpoints

for method in sys.argv[2].split(","):
    base = {"seed": 7, "data": {"name": "digits"}, "model": {"name": "cnn", "hidden": 32},
            "train": {"epochs": 1, "batch_size": 32},
            "fl": {"num_clients": 10, "clients_per_round": 4, "rounds": 3, "eval_every": 1},
            "method": {"name": method},
            "engine": {"backend": "ray", "num_workers": 2, "ray_address": sys.argv[3]},
            "results_dir": f"{sys.argv[1]}/{method}"}
    cfg = from_dict(RunConfig, base)
    blobs = {}
    save = SaveCheckpoints(lambda b, t: blobs.__setitem__(t, b))
    hooks = RunHooks(checkpoint_every=2, observers=(save,))
    first = run_fl(cfg, hooks=hooks)
    again = run_fl(cfg, hooks=RunHooks(resume=blobs[2]), force=True)
    print(method, first.status, again.status, sorted(blobs),
          first.row["test_acc"] == again.row["test_acc"])
print("torch" in sys.modules)
"""


def test_the_ray_engines_driver_never_imports_torch(tmp_path):
    """The driver of a Ray run (setup, rounds, validation, the test split, a checkpoint and a
    resume from it) imports no torch: the workers build the setup, evaluate and read and write
    the checkpoint files — for a stateless method and one with client state, in one driver. A
    resumed run gives the same test accuracy."""
    import subprocess
    import sys

    address = ray.get_runtime_context().gcs_address
    # a block of its own: the module's kept actors end, so the other driver finds the CPUs free
    with kept_workers():
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                DRIVER_WITHOUT_TORCH,
                str(tmp_path / "r"),
                "fedavg,scaffold",
                address,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-4:] == [
        "fedavg finished finished [2] True",
        "scaffold finished finished [2] True",
        "False",
        "",
    ]
