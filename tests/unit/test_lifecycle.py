import pytest

from mtad.base import errors, lifecycle
from mtad.base.lifecycle import Reason, State


def test_every_state_has_a_row_and_final_states_lead_nowhere() -> None:
    assert set(lifecycle.TRANSITIONS) == set(State)
    assert {State.DELIVERED, State.BOUNCED, State.FAILED, State.CANCELLED} == lifecycle.FINAL
    for state in lifecycle.FINAL - {State.DELIVERED}:
        assert not lifecycle.TRANSITIONS[state]
    # A delivered delivery leads only to bounced, and only when its bounce comes back.
    assert lifecycle.TRANSITIONS[State.DELIVERED] == {State.BOUNCED}
    assert lifecycle.transition(State.DELIVERED, State.BOUNCED, Reason.ASYNC_BOUNCE) is State.BOUNCED
    with pytest.raises(errors.IllegalTransition, match="only for reason async_bounce"):
        lifecycle.transition(State.DELIVERED, State.BOUNCED, Reason.ADMIN)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (State.QUEUED, State.LEASED),
        (State.LEASED, State.DELIVERED),
        (State.DEFERRED, State.QUEUED),
        (State.DEFERRED, State.LEASED),
    ],
)
def test_allowed_moves_without_reason(old: State, new: State) -> None:
    assert lifecycle.transition(old, new) is new


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (State.QUEUED, State.DELIVERED),  # never sent without a lease
        (State.DELIVERED, State.QUEUED),  # final
        (State.BOUNCED, State.LEASED),
        (State.CANCELLED, State.QUEUED),
    ],
)
def test_illegal_moves_are_refused(old: State, new: State) -> None:
    assert not lifecycle.can_move(old, new)
    with pytest.raises(errors.IllegalTransition):
        lifecycle.transition(old, new, Reason.ADMIN)


def test_a_delivery_in_hand_is_cancelled_only_when_found_suppressed_before_its_attempt() -> None:
    with pytest.raises(errors.IllegalTransition, match="only for reason suppressed"):
        lifecycle.transition(State.LEASED, State.CANCELLED, Reason.ADMIN)  # never under the sender
    assert lifecycle.transition(State.LEASED, State.CANCELLED, Reason.SUPPRESSED) is State.CANCELLED


def test_deferral_and_failure_need_a_reason() -> None:
    with pytest.raises(errors.IllegalTransition, match="needs a reason"):
        lifecycle.transition(State.LEASED, State.DEFERRED)
    assert lifecycle.transition(State.LEASED, State.DEFERRED, Reason.THROTTLED) is State.DEFERRED
    with pytest.raises(errors.IllegalTransition):
        lifecycle.transition(State.QUEUED, State.CANCELLED)
    assert lifecycle.transition(State.QUEUED, State.CANCELLED, Reason.SUPPRESSED) is State.CANCELLED


@pytest.mark.parametrize("old", [State.QUEUED, State.DEFERRED])
def test_an_operator_may_bounce_or_cancel_a_waiting_delivery_with_a_reason(old: State) -> None:
    for new in (State.BOUNCED, State.CANCELLED):
        assert lifecycle.transition(old, new, Reason.ADMIN) is new
        with pytest.raises(errors.IllegalTransition, match="needs a reason"):
            lifecycle.transition(old, new)


@pytest.mark.parametrize("old", [State.QUEUED, State.DEFERRED, State.LEASED])
def test_an_operator_holds_a_delivery_not_being_sent_and_releases_it(old: State) -> None:
    assert lifecycle.transition(old, State.HELD, Reason.ADMIN) is State.HELD
    with pytest.raises(errors.IllegalTransition, match="needs a reason"):
        lifecycle.transition(old, State.HELD)
    assert lifecycle.TRANSITIONS[State.HELD] == {State.QUEUED, State.CANCELLED, State.BOUNCED}
    assert State.HELD not in lifecycle.FINAL  # it waits for its release, and retention keeps it
    assert not lifecycle.can_move(State.HELD, State.LEASED)  # never leased while held
    assert not lifecycle.can_move(State.UNKNOWN, State.HELD)  # its send may have gone out: retry or cancel


def test_only_an_operator_takes_a_leased_delivery_into_hold() -> None:
    with pytest.raises(errors.IllegalTransition, match="only for reason admin"):
        lifecycle.transition(State.LEASED, State.HELD, Reason.SUPPRESSED)
