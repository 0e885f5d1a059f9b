"""A build's attempts, as the pipeline runs them (tenacity): each one cibuildwheel run in one
container; an OOM kill retries at half the parallelism, keeping every unit that finished, until
one succeeds or the smallest plan is killed too. What an attempt's result means is
attempt/outcome.py's; the container is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable

import tenacity

from ..attempt.config import AttemptConfig
from ..attempt.outcome import AttemptResult, Failed, OOMKilled, Outcome, classify
from ..engine.ports import Engine
from ..errors import OutOfMemory
from ..plan.dist import dist_summary
from ..plan.planner import Plan
from ..progress.console import Console
from ..units import format_bytes

__all__ = ["attempts_until_built"]


def attempts_until_built(
    engine: Engine, plan: Plan, configure: Callable[[int, Plan], AttemptConfig], console: Console
) -> list[tuple[Plan, AttemptResult]]:
    """Attempts until one succeeds: an OOM kill retries at half the parallelism, keeping every
    finished unit (sccache has them, so the retry resumes rather than restarts). Attempt n runs
    plan.halved(n - 1). Any other failure is final, and so is an OOM kill of the smallest plan."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda outcome: isinstance(outcome, OOMKilled)),
        stop=lambda state: plan.halved(state.attempt_number) is None,
        before_sleep=lambda state: _say_retry(state, plan.halved(state.attempt_number), console),
        retry_error_callback=lambda state: state.outcome,  # stopped: the last outcome decides
    )
    done: list[tuple[Plan, Outcome]] = []
    for attempt in retrying:
        number = attempt.retry_state.attempt_number
        current = plan.halved(number - 1)
        assert current is not None  # the stop ends the loop first
        done.append((current, _attempt(engine, number, current, configure(number, current), console)))
        attempt.retry_state.set_result(done[-1][1])
    last, outcome = done[-1]
    if isinstance(outcome, OOMKilled):
        raise OutOfMemory(
            f"even the smallest plan (MAX_JOBS={last.max_jobs}, NVCC_THREADS={last.nvcc_threads}) was "
            f"OOM-killed in {format_bytes(last.memory)} after {len(done)} attempt(s)",
            f"give the build more memory than {format_bytes(last.memory)} (--memory), or fewer archs",
            details=outcome.error.details,
        )
    if isinstance(outcome, Failed):
        raise outcome.error
    return [(p, o.result) for p, o in done]


def _attempt(engine: Engine, number: int, plan: Plan, config: AttemptConfig, console: Console) -> Outcome:
    console.step(
        f"attempt {number}: MAX_JOBS={plan.max_jobs}, NVCC_THREADS={plan.nvcc_threads}, "
        f"{format_bytes(plan.memory)} (log: {config.log_path})"
    )
    with console.build_view(plan.memory) as view:
        outcome = classify(engine.run_attempt(config, view.line, view.memory))
    if config.dist is not None:
        console.info(dist_summary(outcome.result.dist_by_server, outcome.result.dist_local))
    return outcome


def _say_retry(state: tenacity.RetryCallState, smaller: Plan | None, console: Console) -> None:
    assert state.outcome is not None and smaller is not None
    killed: OOMKilled = state.outcome.result()
    console.warn(
        f"attempt {state.attempt_number} was OOM-killed ({'; '.join(killed.result.oom.fired)}); "
        f"retrying at MAX_JOBS={smaller.max_jobs}, NVCC_THREADS={smaller.nvcc_threads}, "
        "keeping every unit that finished"
    )
