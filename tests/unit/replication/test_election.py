"""The controller's election rules: who leads, who stays in the ISR, when the epoch moves."""

from broker.replication.election import State, on_brokers, preferred, without


def test_a_live_leader_with_its_whole_isr_live_is_left_alone():
    assert on_brokers([1, 2, 3], State(1, 4, [1, 2, 3]), {1, 2, 3}) is None


def test_a_dead_follower_leaves_the_isr_and_the_epoch_stays():
    assert on_brokers([1, 2, 3], State(1, 4, [1, 2, 3]), {1, 3}) == State(1, 4, [1, 3])


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    assert on_brokers([1, 2, 3], State(1, 4, [3, 1, 2]), {2, 3}) == State(2, 5, [3, 2])


def test_a_live_replica_outside_the_isr_is_not_elected_unless_unclean_election_is_on():
    offline = on_brokers([1, 2, 3], State(1, 4, [1]), {2, 3})
    assert offline == State(-1, 5, [1])  # the last ISR is kept: broker 1 leads again when it is back
    assert on_brokers([1, 2, 3], offline, {2, 3}) is None  # and it stays so, epoch and all
    assert on_brokers([1, 2, 3], State(1, 4, [1]), {2, 3}, unclean=True) == State(2, 5, [2])


def test_the_last_isr_member_coming_back_leads_again():
    assert on_brokers([1, 2, 3], State(-1, 5, [1]), {1, 2}) == State(1, 6, [1])


def test_controlled_shutdown_moves_the_lead_and_leaves_the_isr():
    assert without([1, 2, 3], State(1, 0, [1, 2, 3]), 1, {1, 2, 3}) == State(2, 1, [2, 3])
    assert without([1, 2, 3], State(2, 3, [1, 2, 3]), 1, {1, 2, 3}) == State(2, 3, [2, 3])
    assert without([1, 2, 3], State(1, 0, [1]), 1, {1, 2, 3}) is None  # the last in-sync replica
    assert without([1, 2, 3], State(2, 0, [2, 3]), 1, {1, 2, 3}) is None  # nothing of it to move


def test_preferred_election_needs_the_first_replica_live_and_in_sync():
    assert preferred([1, 2, 3], State(2, 5, [2, 3, 1]), {1, 2, 3}) == State(1, 6, [2, 3, 1])
    assert preferred([1, 2, 3], State(2, 5, [2, 3]), {1, 2, 3}) is None
    assert preferred([1, 2, 3], State(1, 5, [1, 2, 3]), {1, 2, 3}) is None
    assert preferred([1, 2, 3], State(2, 5, [2, 3, 1]), {2, 3}) is None
