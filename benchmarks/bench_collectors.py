"""Multi-process collection against one in-process collector, measured alternately in one run.

Compares, on CartPole-v1, the frames/s of ``MultiSyncDataCollector`` with 2 worker processes
against one ``SyncDataCollector`` (the issue's target: >= 1.6x on 2 cores), next to the
ceiling any 2-process collector can reach on the same machine at the same moment: two
independent processes, each running its own ``SyncDataCollector``, that never talk to each
other (their frames/s over one such process is the best ratio the hardware and the current
load allow), and to the bound of any synchronous collector: two processes that collect their
share of each batch in lock-step, as the workers of a synchronous collector must (a batch
starts when it is asked for and is complete when the slower worker is done), and hand no data
over. The ceiling's processes never wait for each other; the lock-step ones wait for the
slower at every batch, which is the price of the synchronous contract on this machine.

Each round measures the four in turn (the order alternates between rounds), skipping the
first ``WARMUP`` batches of each (start-up, then the page faults and cold caches of a fresh
process). Besides frames/s it reports CPU seconds per frame, summed over every process
involved (parent and workers, read from ``/proc``), and the cores kept busy (CPU seconds per
second). frames/s is their quotient, so the ratio to the single collector splits into a
ratio of cores busy (the multi collector's workers wait for the slowest one at every batch)
and a ratio of CPU per frame (what the workers and the parent add per frame):
``2 * cpu(single) / cpu(multi)`` is the ratio the multi collector reaches on two otherwise
idle cores if its workers never wait for each other. The parent's share of that CPU time
shows whether it spins while the workers collect. ``--breakdown`` times, in one process,
what a worker batch costs besides its collection (layout check, copy into shared memory,
pipe round trip, the parent's stacking, garbage collection).

On Linux with ``kernel.sched_autogroup_enabled``, the scheduler shares the CPUs equally among
the busy sessions (autogroups), not among processes: on a machine where other sessions keep
the cores busy, this benchmark's session gets the same share whether it runs 1 process or 3,
and no multi-process collector can beat one process (the ceiling column shows it).
``--autogroup-nice N`` runs the benchmark in a session of its own whose autogroup has nice
value ``N`` (negative values need root): ``-20`` gives it nearly both cores for the length of
the run, as on a machine of its own; the setting ends with the run.

The policy is a small MLP (4-64-64-2, Gumbel-max sampling of the action) by default, as in a
real collection; ``--policy random`` uses the env's random policy instead. Prints a table and
one JSON line with the medians.

Usage: python benchmarks/bench_collectors.py [--quick] [--policy {mlp,random}] [--rounds N]
    [--frames-per-batch N] [--autogroup-nice N] [--breakdown]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import statistics
import time
from functools import partial

import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import MultiSyncDataCollector, SyncDataCollector
from tdrl.collectors._worker import _same_layout as same_layout
from tdrl.envs.libs.gym import GymEnv

ENV_NAME = "CartPole-v1"
WORKERS = 2
FRAMES_PER_BATCH = 1000
#: batches collected before timing starts
WARMUP = 3


class GumbelMLP(torch.nn.Module):
    """A 4-64-64-2 MLP whose one-hot action is drawn from its logits (Gumbel-max)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 2),
        )

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        logits = self.net(observation)
        noise = -torch.empty_like(logits).exponential_().log()
        return torch.nn.functional.one_hot((logits + noise).argmax(-1), 2)


def make_policy(kind: str) -> TensorDictModule | None:
    if kind == "random":
        return None
    torch.manual_seed(0)
    return TensorDictModule(GumbelMLP(), ["observation"], ["action"])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (0.0 where /proc cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(collector, batches: int, workers: list[int]) -> dict:
    """frames/s, CPU seconds per frame, cores kept busy, and the parent's share of the CPU."""
    iterator = iter(collector)
    for _ in range(WARMUP):
        next(iterator)
    frames = 0
    worker_cpu = [_cpu_seconds(pid) for pid in workers]
    parent_cpu = time.process_time()
    start = time.perf_counter()
    for _ in range(batches):
        frames += next(iterator).numel()
    elapsed = time.perf_counter() - start
    parent_cpu = time.process_time() - parent_cpu
    worker_cpu = sum(_cpu_seconds(pid) - cpu for pid, cpu in zip(workers, worker_cpu))
    collector.shutdown()
    cpu = parent_cpu + worker_cpu
    return {
        "fps": frames / elapsed,
        "cpu_per_frame": cpu / frames,
        "cores": cpu / elapsed,
        "parent_share": parent_cpu / cpu,
    }


def _worker_collector(policy_kind: str) -> SyncDataCollector:
    """A collector of one worker's share of a batch, in a process set up as a collector worker."""
    gc.freeze()  # as in a collector worker: inherited objects are never walked
    torch.set_num_threads(1)
    return SyncDataCollector(
        GymEnv(ENV_NAME), make_policy(policy_kind), frames_per_batch=FRAMES_PER_BATCH // WORKERS
    )


def _independent(policy_kind: str, batches: int, barrier, results) -> None:
    """One of the ceiling's processes: a SyncDataCollector collecting on its own."""
    collector = _worker_collector(policy_kind)
    iterator = iter(collector)
    for _ in range(WARMUP):
        next(iterator)
    barrier.wait()
    cpu = time.process_time()
    start = time.perf_counter()
    frames = sum(next(iterator).numel() for _ in range(batches))
    results.put((frames, time.perf_counter() - start, time.process_time() - cpu))
    collector.shutdown()


def _ceiling(policy_kind: str, batches: int) -> dict:
    """WORKERS independent collector processes started together; frames/s of them all."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(WORKERS), context.Queue()
    processes = [
        context.Process(target=_independent, args=(policy_kind, batches, barrier, results))
        for _ in range(WORKERS)
    ]
    for process in processes:
        process.start()
    outcome = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    frames = sum(frames for frames, _, _ in outcome)
    elapsed = max(elapsed for _, elapsed, _ in outcome)
    cpu = sum(cpu for _, _, cpu in outcome)
    return {"fps": frames / elapsed, "cpu_per_frame": cpu / frames, "cores": cpu / elapsed}


def _lockstep_worker(policy_kind: str, conn) -> None:
    """Collect one batch per message and answer it, handing no data over (until False)."""
    iterator = iter(_worker_collector(policy_kind))
    while conn.recv():
        next(iterator)
        conn.send(True)


class LockStep:
    """The bound of any synchronous multi-process collector on this machine.

    ``WORKERS`` processes collect their share of each batch in lock-step, as the workers of
    ``MultiSyncDataCollector`` must (a batch starts when it is asked for and ends when the
    slowest worker is done), with nothing else: no data is handed over, nothing is stacked.
    Iterating yields the frame count of each batch (``.numel()``, as a batch has).
    """

    def __init__(self, policy_kind: str) -> None:
        context = multiprocessing.get_context("fork")
        self._connections, self._processes = [], []
        for _ in range(WORKERS):
            parent, child = context.Pipe()
            process = context.Process(target=_lockstep_worker, args=(policy_kind, child))
            process.start()
            child.close()
            self._connections.append(parent)
            self._processes.append(process)
        self.worker_pids = [process.pid for process in self._processes]

    def __iter__(self):
        frames = torch.empty(FRAMES_PER_BATCH)
        while True:
            for conn in self._connections:
                conn.send(True)
            for conn in self._connections:
                conn.recv()
            yield frames

    def shutdown(self) -> None:
        for conn in self._connections:
            conn.send(False)
        for process in self._processes:
            process.join()


def _report(run, conn) -> None:
    conn.send(run())
    conn.close()


def _in_fresh_process(run) -> dict:
    """``run()`` in a child forked from this (otherwise idle) process.

    No measurement inherits the heap, the garbage and the thread pools that the previous
    ones left: the collector workers of one are forked from a parent as fresh as the
    processes they are compared with.
    """
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_report, args=(run, child))
    process.start()
    child.close()
    try:
        return parent.recv()
    finally:
        process.join()


def _echo(conn) -> None:
    """Answer each message as a collector worker answers "collect" (until None)."""
    while conn.recv() is not None:
        conn.send(("ok", None))


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def per_batch_costs(policy_kind: str, batches: int) -> dict:
    """What one worker batch costs besides collecting it, timed in this process.

    A worker of ``MultiSyncDataCollector`` collects ``FRAMES_PER_BATCH / WORKERS`` frames with
    its own ``SyncDataCollector``, checks that the batch has the layout of its shared buffer,
    copies it there and answers the parent through a pipe; the parent stacks the workers'
    buffers. Each of these is timed on a real batch (median of many calls) next to the
    collection of the batch itself, with the garbage collector's time during collection.
    """
    torch.set_num_threads(1)  # as in a collector worker
    collector = SyncDataCollector(
        GymEnv(ENV_NAME), make_policy(policy_kind), frames_per_batch=FRAMES_PER_BATCH // WORKERS
    )
    iterator = iter(collector)
    data = next(iterator)
    gc_time, gc_start = [0.0], [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_start[0]

    gc.callbacks.append(on_gc)
    collect = _median_us(lambda: next(iterator), batches)
    gc.callbacks.remove(on_gc)
    shared = data.clone().share_memory_()
    parent, child = multiprocessing.Pipe()
    echo = multiprocessing.get_context("fork").Process(target=_echo, args=(child,))
    echo.start()

    def round_trip() -> None:
        parent.send(("collect", None))
        parent.recv()

    costs = {
        "collect_batch_us": collect,
        "gc_us": gc_time[0] / batches * 1e6,
        "layout_check_us": _median_us(lambda: same_layout(shared, data), 500),
        "copy_to_shared_us": _median_us(lambda: shared.update_(data), 500),
        "pipe_round_trip_us": _median_us(round_trip, 2000),
        "parent_stack_us": _median_us(lambda: torch.stack([shared] * WORKERS, 0), 500),
    }
    parent.send(None)
    echo.join()
    collector.shutdown()
    return costs


def _own_autogroup(nice: int) -> None:
    """Continue in a child process leading a new session whose autogroup has ``nice``.

    The calling process waits for that child and exits with its status.
    """
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        raise SystemExit(os.waitstatus_to_exitcode(status))
    os.setsid()  # a new session is a new autogroup
    with open("/proc/self/autogroup", "w") as autogroup:
        autogroup.write(str(nice))


def _autogroup() -> str:
    try:
        with open("/proc/self/autogroup") as autogroup:
            return autogroup.read().strip()
    except OSError:
        return "n/a"


def main() -> None:
    global FRAMES_PER_BATCH  # set from the arguments; read by the processes forked below
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--policy", choices=["mlp", "random"], default="mlp")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6, quick 3)")
    parser.add_argument(
        "--autogroup-nice",
        type=int,
        default=None,
        help="run in a new session whose autogroup has this nice value (Linux)",
    )
    parser.add_argument(
        "--frames-per-batch",
        type=int,
        default=FRAMES_PER_BATCH,
        help=f"frames of one batch, summed over the workers (default {FRAMES_PER_BATCH})",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="time what a worker batch costs besides its collection, then exit",
    )
    args = parser.parse_args()
    FRAMES_PER_BATCH = args.frames_per_batch
    if args.autogroup_nice is not None:
        _own_autogroup(args.autogroup_nice)
    if args.breakdown:
        costs = per_batch_costs(args.policy, 10 if args.quick else 40)
        batch = costs["collect_batch_us"]
        print(f"one worker batch of {FRAMES_PER_BATCH // WORKERS} frames ({args.policy} policy)")
        for name, value in costs.items():
            print(f"{name:<24}{value:>12.1f} us{value / batch:>9.2%}")
        print(json.dumps({"benchmark": "collectors_per_batch", **costs}))
        return
    rounds = args.rounds or (3 if args.quick else 6)
    batches = 8 if args.quick else 20
    make_env = partial(GymEnv, ENV_NAME)
    load_before = os.getloadavg()

    def single() -> dict:
        collector = SyncDataCollector(
            make_env(), make_policy(args.policy), frames_per_batch=FRAMES_PER_BATCH
        )
        return _timed(collector, batches, [])

    def multi() -> dict:
        collector = MultiSyncDataCollector(
            [make_env] * WORKERS, make_policy(args.policy), frames_per_batch=FRAMES_PER_BATCH
        )
        return _timed(collector, batches, collector.worker_pids)

    def ceiling() -> dict:
        return _ceiling(args.policy, batches)

    def lockstep() -> dict:
        bound = LockStep(args.policy)
        return _timed(bound, batches, bound.worker_pids)

    runs = {"single": [], "multi": [], "lockstep": [], "ceiling": []}
    order = [("single", single), ("multi", multi), ("lockstep", lockstep), ("ceiling", ceiling)]
    for round_ in range(rounds):
        for name, run in order if round_ % 2 == 0 else order[::-1]:
            runs[name].append(_in_fresh_process(run))
        line = ", ".join(f"{name} {runs[name][-1]['fps']:.0f}" for name in runs)
        print(f"round {round_}: frames/s {line}; load {os.getloadavg()[0]:.2f}", flush=True)

    def median(name: str, field: str) -> float:
        return statistics.median(run[field] for run in runs[name])

    def paired(name: str) -> float:
        """Median over the rounds of name's frames/s over the single collector's."""
        return statistics.median(
            run["fps"] / base["fps"] for run, base in zip(runs[name], runs["single"])
        )

    cpu_single, cpu_multi = median("single", "cpu_per_frame"), median("multi", "cpu_per_frame")
    result = {
        "benchmark": "collectors",
        "env": ENV_NAME,
        "policy": args.policy,
        "workers": WORKERS,
        "frames_per_batch": FRAMES_PER_BATCH,
        "rounds": rounds,
        "sync_frames_per_s": round(median("single", "fps")),
        "multisync_frames_per_s": round(median("multi", "fps")),
        "independent_frames_per_s": round(median("ceiling", "fps")),
        "ratio": round(paired("multi"), 3),
        "ceiling_ratio": round(paired("ceiling"), 3),
        "lockstep_ratio": round(paired("lockstep"), 3),
        "multisync_over_lockstep": round(
            statistics.median(
                run["fps"] / bound["fps"] for run, bound in zip(runs["multi"], runs["lockstep"])
            ),
            3,
        ),
        "sync_cpu_us_per_frame": round(cpu_single * 1e6, 1),
        "multisync_cpu_us_per_frame": round(cpu_multi * 1e6, 1),
        "independent_cpu_us_per_frame": round(median("ceiling", "cpu_per_frame") * 1e6, 1),
        "lockstep_cpu_us_per_frame": round(median("lockstep", "cpu_per_frame") * 1e6, 1),
        "sync_cores": round(median("single", "cores"), 3),
        "multisync_cores": round(median("multi", "cores"), 3),
        "independent_cores": round(median("ceiling", "cores"), 3),
        "lockstep_cores": round(median("lockstep", "cores"), 3),
        "multisync_parent_cpu_share": round(median("multi", "parent_share"), 4),
        "idle_cores_ratio": round(WORKERS * cpu_single / cpu_multi, 3),
        "load_before": round(load_before[0], 2),
        "load_after": round(os.getloadavg()[0], 2),
        "autogroup": _autogroup(),
    }
    print(f"{'collector':<44}{'frames/s':>10}{'CPU us/frame':>14}{'cores busy':>12}")
    rows = [
        ("SyncDataCollector", "single"),
        (f"MultiSyncDataCollector ({WORKERS} workers)", "multi"),
        (f"{WORKERS} processes collecting in lock-step", "lockstep"),
        (f"{WORKERS} independent SyncDataCollector processes", "ceiling"),
    ]
    for label, name in rows:
        fps, cpu = median(name, "fps"), median(name, "cpu_per_frame") * 1e6
        print(f"{label:<44}{fps:>10.0f}{cpu:>14.1f}{median(name, 'cores'):>12.2f}")
    print(
        f"ratio {result['ratio']:.2f}x (ceiling on this machine now: "
        f"{result['ceiling_ratio']:.2f}x; on {WORKERS} idle cores: "
        f"{result['idle_cores_ratio']:.2f}x); parent CPU share "
        f"{result['multisync_parent_cpu_share']:.1%}; load {result['load_before']} -> "
        f"{result['load_after']}; {result['autogroup']}"
    )
    print(
        f"lock-step bound (any synchronous collector): {result['lockstep_ratio']:.2f}x; "
        f"MultiSyncDataCollector reaches {result['multisync_over_lockstep']:.1%} of it"
    )
    # frames/s = cores busy / CPU per frame, so the ratio is the product of these two
    print(
        f"ratio = cores busy {result['multisync_cores'] / result['sync_cores']:.2f}x "
        f"* CPU per frame {cpu_single / cpu_multi:.2f}x (medians; the ceiling's: "
        f"{result['independent_cores'] / result['sync_cores']:.2f}x * "
        f"{cpu_single / median('ceiling', 'cpu_per_frame'):.2f}x)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
