import pytest

from mtad.base import errors, lifecycle
from mtad.base.lifecycle import Reason, State


def test_every_state_has_a_row_and_final_states_lead_nowhere() -> None:
    assert set(lifecycle.TRANSITIONS) == set(State)
    assert {State.DELIVERED, State.BOUNCED, State.FAILED, State.CANCELLED} == lifecycle.FINAL
    for state in lifecycle.FINAL:
        assert not lifecycle.TRANSITIONS[state]


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
        (State.LEASED, State.CANCELLED),  # in flight: cannot be cancelled under the sender
        (State.CANCELLED, State.QUEUED),
    ],
)
def test_illegal_moves_are_refused(old: State, new: State) -> None:
    assert not lifecycle.can_move(old, new)
    with pytest.raises(errors.IllegalTransition):
        lifecycle.transition(old, new, Reason.ADMIN)


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
