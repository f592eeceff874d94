"""Choosing a partition's leader and ISR: the controller's rules, as pure functions.

A new leader is the first replica, in assignment order, that is live and in the ISR. With none, the
partition has no leader (-1) and keeps its last ISR, so that one of those replicas is elected when it
comes back; unless unclean election is enabled, when the first live replica outside the ISR leads
(and what it lacks is lost). Every change of leader bumps the leader epoch; an ISR change alone does not.
"""

from __future__ import annotations

from typing import NamedTuple


class State(NamedTuple):
    leader: int
    leader_epoch: int
    isr: list[int]


def on_brokers(replicas: list[int], state: State, live: set[int], *, unclean: bool = False) -> State | None:
    """The partition's state once only `live` brokers are up, or None when it stays as it is."""
    isr = [r for r in state.isr if r in live]
    if state.leader in live:
        if isr == state.isr:
            return None
        return State(state.leader, state.leader_epoch, isr or [state.leader])
    for r in replicas:
        if r in isr:
            return State(r, state.leader_epoch + 1, isr)
    if unclean:
        for r in replicas:
            if r in live:
                return State(r, state.leader_epoch + 1, [r])
    if state.leader == -1:
        return None  # offline already: keep the last ISR for when one of it comes back
    return State(-1, state.leader_epoch + 1, state.isr)


def without(replicas: list[int], state: State, leaving: int, live: set[int]) -> State | None:
    """The state once broker `leaving` shuts down (controlled shutdown): it leads nothing and leaves the ISR,
    if another live ISR member can take over; None when there is nothing to move or no one to move it to."""
    if leaving not in state.isr and state.leader != leaving:
        return None
    others = [r for r in state.isr if r != leaving and r in live]
    if not others:
        return None  # the last in-sync replica: stopping it takes the partition offline whatever we do
    if state.leader != leaving:
        return State(state.leader, state.leader_epoch, others)
    leader = next((r for r in replicas if r in others), others[0])
    return State(leader, state.leader_epoch + 1, others)


def preferred(replicas: list[int], state: State, live: set[int]) -> State | None:
    """Leadership back to the first replica of the assignment, if it is live, in the ISR and not leading."""
    if not replicas or state.leader == replicas[0]:
        return None
    first = replicas[0]
    if first not in live or first not in state.isr:
        return None
    return State(first, state.leader_epoch + 1, state.isr)
