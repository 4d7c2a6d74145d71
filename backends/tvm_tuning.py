"""MetaSchedule tuning of one static-shape Relax module under a trial budget.

The module's kernels are extracted as tuning tasks; candidate schedules are built and
timed on this machine, and the best one found per task goes into the compiled library.
The database lives in memory: the exported library carries the tuned code and needs
nothing else at run time.

Two choices keep this working with the `apache-tvm` wheel and without extra packages:
the cost model is "random" (the default "xgb" needs xgboost), and builds get a generous
timeout (building a candidate takes tens of seconds on two cores).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

import tvm
from tvm import relax
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule import relax_integration

from backends.tvm_frames import install, quick_frame_lookups

BUILD_TIMEOUT_S = 120
RUN_TIMEOUT_S = 30

# MetaSchedule prints a table of every task after every round to stdout, at the level this
# logger has when tuning starts; its full logs go to the work directory's files anyway.
_META_SCHEDULE_LOGGER = logging.getLogger("tvm.s_tir.meta_schedule")


@derived_object
class _ReportProgress(ms.measure_callback.PyMeasureCallback):
    """Calls progress(trials measured so far, budget) after every round of measurements."""

    def __init__(self, budget: int, progress: Callable[[int, int], None]) -> None:
        self.done = 0
        self.budget = budget
        self.progress = progress

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        self.done += len(measure_candidates)
        self.progress(min(self.done, self.budget), self.budget)


def _with_core_count(target: tvm.target.Target) -> tvm.target.Target:
    """MetaSchedule sizes CPU parallelism by the target's `num-cores`, which it requires."""
    fields = json.loads(str(target))
    if fields["kind"] != "llvm" or "num-cores" in fields:
        return target
    import psutil

    fields.pop("keys", None)
    return tvm.target.Target({**fields, "num-cores": psutil.cpu_count(logical=False) or 1})


def tune_and_compile(
    module: tvm.IRModule,
    target: tvm.target.Target,
    trials: int,
    work_dir: Path,
    progress: Callable[[int, int], None] | None = None,
) -> relax.Executable:
    """Tune `module`'s kernels with at most `trials` measured candidates in all, then
    compile it with the best schedules found."""
    with quick_frame_lookups():  # TVMScript parses hundreds of intrinsics (tvm_frames.py)
        return _tune_and_compile(module, target, trials, work_dir, progress)


def _tune_and_compile(
    module: tvm.IRModule,
    target: tvm.target.Target,
    trials: int,
    work_dir: Path,
    progress: Callable[[int, int], None] | None,
) -> relax.Executable:
    target = _with_core_count(target)
    with target:
        module = relax.transform.DecomposeOpsForInference()(module)
        module = relax.transform.CanonicalizeBindings()(module)
        module = relax.get_pipeline("zero")(module)  # legalize and fuse into kernels
    tasks = relax_integration.extract_tasks(module, target, params=None)
    work_dir.mkdir(parents=True, exist_ok=True)
    # Reset every time: setting up a tuning run leaves this logger at DEBUG.
    _META_SCHEDULE_LOGGER.setLevel(logging.WARNING)
    contexts, weights = relax_integration.extracted_tasks_to_tune_contexts(
        tasks, work_dir=str(work_dir), num_threads="physical"
    )
    per_task = max(1, math.ceil(trials / max(len(tasks), 1)))
    callbacks = ms.measure_callback.MeasureCallback.create("default")
    if progress is not None:
        callbacks = [*callbacks, _ReportProgress(trials, progress)]
    database = ms.tune.tune_tasks(
        tasks=contexts,
        task_weights=weights,
        work_dir=str(work_dir),
        max_trials_global=trials,
        max_trials_per_task=per_task,
        num_trials_per_iter=min(per_task, 16),
        builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S, initializer=install),
        runner=ms.runner.LocalRunner(timeout_sec=RUN_TIMEOUT_S, initializer=install),
        database=ms.database.MemoryDatabase(),
        cost_model="random",
        measure_callbacks=callbacks,
    )
    if progress is not None:
        progress(trials, trials)  # the search may stop early when a space is exhausted
    return relax_integration.compile_relax(database, module, target, params=None)
