"""Where a run's time goes: the driver's wall time by phase and the Spark jobs each
phase started, recorded while the run goes and read once at its end.

    profiler = Profiler.start(spark)
    with profiler.phase("changed_index"):
        ...
    profile = profiler.finish()      # a RunProfile: into the RunResult, the log, the report

A phase is a named stretch of the driver's work (`PHASES` lists the engine's). Its time
is its own: a phase entered inside another stops the outer one's clock until it ends,
so the phases and `other` (the time outside every phase) add up to the run's wall time.

Jobs are attributed with Spark job tags, like `count_spark_jobs` (`spark_jobs.py`): a tag
for the whole run, and one for the phase under way (an inner phase swaps its tag for the
outer's, so a job carries exactly one); at the end, one status-store read finds the
run's jobs and each one's phase. Profiling starts no Spark job: two JVM calls per phase
entered, and at the end three per phase and about ten per job. Tags are per thread: jobs other Python
threads start are not the run's (nor counted by `count_spark_jobs`).

Besides its phases and jobs, a run's driver JVM spends time no phase or job shows: its
JIT compiler's, garbage collection, and compiling the Java code Spark generates for a
query's expressions (`DriverJvmTime`, read from the JVM's counters at the start and the
end: about 40 JVM calls, a few milliseconds), and beside them the JVM process's CPU time
(from `/proc`): a driver whose CPU time is near the run's wall time is busy, not waiting
(a young JVM interprets and compiles Spark's own code; a query whose literals make its
code new compiles that). The counters are the JVM's, not the run's: work of other threads
at the same time (another run in the same session) counts too.

Tagging is public API; finding the jobs by tag and reading the JVM's counters reach
past it (`spark_internals.py`): where a PySpark version lacks them, the profile has the
driver's times only and says its jobs were not counted, or has no driver JVM figures.

Over Spark Connect the client has no SparkContext to tag jobs with or status store to
read, nor the server's JVM: the profile then has the driver's times only and says its
jobs were not counted.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from offset_assets import spark_internals
from offset_assets.spark_jobs import SparkJobCountError, jobs_by_tag, spark_context

TAG_PREFIX = "offset-assets-run-"
# The engine's phases (`run.py`), in the order a run enters them.
PHASES = ("open", "changed_index", "input_reads", "function", "output_write", "commit")
OTHER = "other"  # time and jobs outside every phase (e.g. between the IO manager's calls)
NOT_COUNTED_CONNECT = "Spark Connect: the client has no status store to read jobs from"


@dataclass(frozen=True)
class ProfiledJob:
    """One Spark job of a run: the phase that started it, the call site Spark names it
    after and its wall time from submission to completion (None when unknown)."""

    job_id: int
    phase: str
    name: str
    seconds: float | None

    def __str__(self) -> str:
        took = "?" if self.seconds is None else f"{self.seconds:.3f} s"
        return f"job {self.job_id} [{self.phase}] {took}: {self.name or '(no name)'}"


@dataclass(frozen=True)
class DriverJvmTime:
    """The driver JVM's CPU time (all its threads; None where the process's counters
    cannot be read, `jvm_pid`), of it the JIT compiler's and the garbage collectors' seconds, and
    the compilation of Spark's generated code (classes compiled, seconds): as counters
    since the JVM started (`read`), or what a run added to them (`since`)."""

    cpu_s: float | None
    jit_s: float
    gc_s: float
    classes_compiled: int
    compile_s: float

    @classmethod
    def read(cls, sc: SparkContext, pid: int | None) -> DriverJvmTime | None:
        """The counters of the driver JVM `sc` runs on, whose process is `pid` (`jvm_pid`);
        None where the JVM's counters cannot be read (`spark_internals`)."""
        counters = spark_internals.driver_jvm_counters(sc)
        if counters is None:
            return None
        return cls(_process_cpu_s(pid), counters.jit_s, counters.gc_s, counters.classes_compiled, counters.compile_s)

    def since(self, start: DriverJvmTime) -> DriverJvmTime:
        cpu = None if self.cpu_s is None or start.cpu_s is None else self.cpu_s - start.cpu_s
        return DriverJvmTime(cpu, self.jit_s - start.jit_s, self.gc_s - start.gc_s,
                             self.classes_compiled - start.classes_compiled, self.compile_s - start.compile_s)

    def __str__(self) -> str:
        cpu = "" if self.cpu_s is None else f"CPU {self.cpu_s:.3f} s, "
        return (f"{cpu}JIT compilation {self.jit_s:.3f} s, garbage collection {self.gc_s:.3f} s, "
                f"{self.classes_compiled} classes of generated code compiled in {self.compile_s:.3f} s")


def jvm_pid(sc: SparkContext) -> int | None:
    """The process ID of the driver JVM when this process launched it (PySpark's gateway,
    as in every classic session started from Python) and `/proc` shows its counters
    (Linux); else None: a JVM attached to from elsewhere is not read."""
    pid = spark_internals.driver_jvm_pid(sc)
    stat = None if pid is None else _proc_stat(pid)
    return pid if stat is not None and int(stat[1]) == os.getpid() else None


def _process_cpu_s(pid: int | None) -> float | None:
    """User and system CPU seconds of process `pid` so far (None: unknown)."""
    stat = None if pid is None else _proc_stat(pid)
    return None if stat is None else (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of `/proc/PID/stat` after the command name (state, parent, ...), None
    where there is no such file."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


@dataclass(frozen=True)
class PhaseProfile:
    """One phase's driver wall time (its own, without inner phases) and the Spark jobs
    it started (None when jobs were not counted) with their summed wall time."""

    name: str
    seconds: float
    jobs: int | None
    job_seconds: float | None


@dataclass(frozen=True)
class RunProfile:
    """Where a run's time went: per phase (`other` last: outside every phase) the
    driver's wall time and the Spark jobs, and each job with its phase.

    `wall_s` is the run's wall time up to reading the profile; the phases add up to
    it. `jobs_counted` is False when the jobs could not be read (`not_counted` says
    why: Spark Connect, or more jobs than the status store keeps); `jobs` is then
    empty. `status_store_s` is what reading the jobs cost the driver. `driver_jvm`: the
    driver JVM's CPU, JIT compilation, garbage collection and compilation of generated
    code during the run (None over Spark Connect)."""

    wall_s: float
    phases: tuple[PhaseProfile, ...]
    jobs: tuple[ProfiledJob, ...] = ()
    jobs_counted: bool = True
    not_counted: str | None = None
    status_store_s: float = 0.0
    driver_jvm: DriverJvmTime | None = None

    @property
    def job_count(self) -> int | None:
        return len(self.jobs) if self.jobs_counted else None

    def phase(self, name: str) -> PhaseProfile | None:
        return next((phase for phase in self.phases if phase.name == name), None)

    def markdown(self) -> str:
        """A table a person reads: one row per phase, then the total."""
        lines = ["| phase | driver s | Spark jobs | jobs' s |", "|---|---|---|---|"]
        for phase in self.phases:
            lines.append(f"| {phase.name} | {phase.seconds:.3f} | {_text(phase.jobs)} | "
                         f"{_text(phase.job_seconds, '.3f')} |")
        job_seconds = sum(job.seconds or 0.0 for job in self.jobs) if self.jobs_counted else None
        lines.append(f"| **total** | {self.wall_s:.3f} | {_text(self.job_count)} | {_text(job_seconds, '.3f')} |")
        if self.driver_jvm is not None:
            lines += ["", f"Driver JVM during the run: {self.driver_jvm}."]
        if not self.jobs_counted:
            lines += ["", f"Spark jobs not counted: {self.not_counted}."]
        return "\n".join(lines)

    def describe(self) -> str:
        """Phases, then one line per job: for the debug log and benchmark reports."""
        phases = ", ".join(f"{phase.name} {phase.seconds:.3f} s/{_text(phase.jobs)} jobs" for phase in self.phases)
        head = f"{self.wall_s:.3f} s, {_text(self.job_count)} Spark jobs: {phases}"
        if self.driver_jvm is not None:
            head += f"; driver JVM: {self.driver_jvm}"
        if not self.jobs_counted:
            return f"{head}; jobs not counted: {self.not_counted}"
        return "\n".join([head, *(f"  {job}" for job in self.jobs)])

    def as_dict(self) -> dict[str, Any]:
        """The profile as JSON-ready values (benchmark reports)."""
        return {
            "wall_s": round(self.wall_s, 4),
            "spark_jobs": self.job_count,
            "not_counted": self.not_counted,
            "status_store_s": round(self.status_store_s, 4),
            "driver_jvm": None if self.driver_jvm is None else {
                "cpu_s": None if self.driver_jvm.cpu_s is None else round(self.driver_jvm.cpu_s, 4),
                "jit_s": round(self.driver_jvm.jit_s, 4), "gc_s": round(self.driver_jvm.gc_s, 4),
                "classes_compiled": self.driver_jvm.classes_compiled, "compile_s": round(self.driver_jvm.compile_s, 4)},
            "phases": {phase.name: {"seconds": round(phase.seconds, 4), "jobs": phase.jobs,
                                    "job_seconds": None if phase.job_seconds is None else round(phase.job_seconds, 4)}
                       for phase in self.phases},
            "jobs": [{"id": job.job_id, "phase": job.phase, "name": job.name, "seconds": job.seconds}
                     for job in self.jobs],
        }


def _text(value: float | None, spec: str = "") -> str:
    return "not counted" if value is None else format(value, spec)


@dataclass
class Profiler:
    """Records one run's phases (see the module docstring); `finish` reads its jobs."""

    sc: SparkContext | None
    run_tag: str
    started: float
    seconds: dict[str, float] = field(default_factory=dict)
    _stack: list[str] = field(default_factory=list)
    _since: float = 0.0
    _tagging: bool = False
    _driver_pid: int | None = None
    _driver_at_start: DriverJvmTime | None = None
    _jobs_at_start: int | None = None
    _without_session: bool = False

    @classmethod
    def start(cls, spark: SparkSession | None) -> Profiler:
        """Start the run's clock and, on a classic session, tag its jobs. None: no session
        has started yet (`attach` it when one does; until then the run has no job)."""
        profiler = cls(None, f"{TAG_PREFIX}{uuid.uuid4().hex}", time.monotonic())
        if spark is None:
            profiler._without_session = True
        else:
            profiler._tag(spark)
        return profiler

    def attach(self, spark: SparkSession) -> None:
        """The session that started during a run started without one: its jobs are the
        run's from now, in the phase the run is in."""
        if self._without_session:
            self._without_session = False
            self._tag(spark)
            if self._tagging and self._stack:
                self.sc.addJobTag(self._phase_tag(self._stack[-1]))

    def _tag(self, spark: SparkSession) -> None:
        self.sc = spark_context(spark)
        if self.sc is not None:
            self.sc.addJobTag(self.run_tag)
            self._tagging = True
            self._jobs_at_start = spark_internals.jobs_submitted(self.sc)
            self._driver_pid = jvm_pid(self.sc)
            self._driver_at_start = DriverJvmTime.read(self.sc, self._driver_pid)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the block's driver time and Spark jobs as `name`'s (see the module docstring)."""
        outer = self._stack[-1] if self._stack else None
        self.seconds.setdefault(name, 0.0)  # phases listed in the order first entered
        self._switch(outer, name)
        self._stack.append(name)
        try:
            yield
        finally:
            self._stack.pop()
            self._switch(name, outer)

    def _switch(self, leaving: str | None, entering: str | None) -> None:
        now = time.monotonic()
        if leaving is not None:
            self.seconds[leaving] = self.seconds.get(leaving, 0.0) + now - self._since
        self._since = now
        if self._tagging and leaving != entering:
            if leaving is not None:
                self.sc.removeJobTag(self._phase_tag(leaving))
            if entering is not None:
                self.sc.addJobTag(self._phase_tag(entering))

    def _phase_tag(self, name: str) -> str:
        return f"{self.run_tag}-{name}"

    def finish(self) -> RunProfile:
        """The run's profile so far, its jobs read from the status store; tagging stops.
        Call it outside every phase."""
        wall = time.monotonic() - self.started
        self.stop()
        seconds = dict(self.seconds)
        seconds[OTHER] = max(0.0, wall - sum(seconds.values()))
        if self._without_session:  # no session started: no Spark job
            return RunProfile(wall, tuple(PhaseProfile(name, s, 0, 0.0) for name, s in seconds.items()))
        if self.sc is None:
            return RunProfile(wall, tuple(PhaseProfile(name, s, None, None) for name, s in seconds.items()),
                              jobs_counted=False, not_counted=NOT_COUNTED_CONNECT)
        reading = time.monotonic()
        at_end = None if self._driver_at_start is None else DriverJvmTime.read(self.sc, self._driver_pid)
        driver_jvm = None if at_end is None else at_end.since(self._driver_at_start)
        try:
            jobs = self._jobs(list(self.seconds))
        except SparkJobCountError as exc:
            return RunProfile(wall, tuple(PhaseProfile(name, s, None, None) for name, s in seconds.items()),
                              jobs_counted=False, not_counted=str(exc),
                              status_store_s=time.monotonic() - reading, driver_jvm=driver_jvm)
        counts = Counter(job.phase for job in jobs)
        phases_profiled = tuple(
            PhaseProfile(name, s, counts[name], sum(job.seconds or 0.0 for job in jobs if job.phase == name))
            for name, s in seconds.items())
        return RunProfile(wall, phases_profiled, tuple(jobs), status_store_s=time.monotonic() - reading,
                          driver_jvm=driver_jvm)

    def _jobs(self, phases: list[str]) -> list[ProfiledJob]:
        """The run's jobs, each with the phase whose tag it carried (`other`: none); none
        without reading the status store when the context started no job since the run
        began (a small run's usual case: listing jobs by tag scans the store's jobs)."""
        if self._jobs_at_start is not None and spark_internals.jobs_submitted(self.sc) == self._jobs_at_start:
            return []
        found = jobs_by_tag(self.sc, [self.run_tag, *(self._phase_tag(name) for name in phases)])
        phase_of = {job.job_id: name for name in phases for job in found[self._phase_tag(name)]}
        return [ProfiledJob(job.job_id, phase_of.get(job.job_id, OTHER), job.name, job.seconds)
                for job in found[self.run_tag]]

    def stop(self) -> None:
        """Stop tagging the thread's jobs (idempotent): a run that ends, by `finish` or
        by an error, must not leave its tag on the jobs that follow."""
        if self._tagging:
            self._tagging = False
            if self._stack:
                self.sc.removeJobTag(self._phase_tag(self._stack[-1]))
            self.sc.removeJobTag(self.run_tag)

