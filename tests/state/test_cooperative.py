"""``extender.state.cooperative`` at the state level: ``run`` lets other tasks run at every slice's
end and gives the decision's result (or its exception); ``Pacer`` lets them run once its slice of
work is used up, on a clock the test moves itself (no timing involved)."""

from __future__ import annotations

import asyncio

import pytest

from extender.state import cooperative


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def ran_meanwhile(work: asyncio.Future[object]) -> list[int]:
    """Turns another task got while ``work`` ran (it counts each turn of the event loop)."""
    turns: list[int] = []

    async def other() -> None:
        while not work.done():
            turns.append(len(turns))
            await asyncio.sleep(0)

    await asyncio.gather(work, other())
    return turns


async def test_run_gives_the_result_and_lets_others_run_at_each_slice_end() -> None:
    ends: list[int] = []

    def decision() -> str:
        for i in range(3):
            ends.append(i)
            cooperative.slice_ended()  # the first try is abandoned here, then resumed in a greenlet
        return "done"

    work = asyncio.ensure_future(cooperative.run(decision))
    turns = await ran_meanwhile(work)
    assert work.result() == "done"
    assert ends == [0, 0, 1, 2]  # the synchronous first try gave up at its first slice end
    assert len(turns) == 4  # the other task ran after the first try and at each of the three pauses


async def test_run_passes_the_decisions_exception_on() -> None:
    def decision() -> None:
        cooperative.slice_ended()
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await cooperative.run(decision)


async def test_a_decision_that_never_pauses_runs_at_once() -> None:
    work = asyncio.ensure_future(cooperative.run(lambda: 42))
    assert await ran_meanwhile(work) == []  # no pause: done in its synchronous first try
    assert work.result() == 42


async def test_a_pacer_yields_only_once_its_slice_is_used_up() -> None:
    clock = Clock()
    pace = cooperative.Pacer(0.01, clock=clock)

    async def steps(count: int, advance: float) -> None:
        for _ in range(count):
            clock.now += advance
            await pace()

    cheap = asyncio.ensure_future(steps(5, 0.001))  # 5 ms of work: within the slice
    assert await ran_meanwhile(cheap) == []  # never paused: done before the other task's turn
    costly = asyncio.ensure_future(steps(4, 0.01))  # every step uses a whole slice up
    assert len(await ran_meanwhile(costly)) == 4  # one turn per pause


async def test_a_pacer_step_pauses_a_decision_under_run_only() -> None:
    clock = Clock()
    pace = cooperative.Pacer(0.01, clock=clock)
    pace.step()  # outside run: nothing to pause, nothing raised
    clock.now += 0.02
    pace.step()

    def decision() -> int:
        for _ in range(3):
            clock.now += 0.02
            pace.step()
        return 3

    assert await cooperative.run(decision) == 3
