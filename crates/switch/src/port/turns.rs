//! Serving several queues of one port in turns: each queue gets its budget
//! of a round, a turn at a time, so a frame on a quiet queue waits for at
//! most a turn of each busy one. An uplink's receive queues and a
//! multiqueue vNIC's transmit queues are served this way.

/// Frames an uplink receive queue gives per turn before the next queue's
/// turn (a round gives each queue up to the budget, in turns). Small enough
/// that a frame on its own queue waits a few frames' work behind a flood on
/// the shared one, large enough that a busy queue still goes in bursts.
pub const QUEUE_TURN: usize = 8;

/// Serves `nq` queues, each up to `budget` items, in turns of up to `turn`:
/// queue 0, 1, .., nq-1, then again, until every queue has had its budget
/// or none gave a full turn (all drained). `serve(q, limit)` takes up to
/// `limit` items from queue `q` and says how many it took. A lone queue is
/// served its whole budget at once (no turns to take). Returns the items
/// taken.
#[inline]
pub(crate) fn in_turns(
    nq: usize,
    budget: usize,
    turn: usize,
    mut serve: impl FnMut(usize, usize) -> usize,
) -> usize {
    if nq == 1 {
        return serve(0, budget);
    }
    let turn = turn.max(1);
    let mut n = 0;
    let mut given = 0;
    while given < budget {
        let limit = turn.min(budget - given);
        // Whether some queue gave a full turn (it may have more).
        let mut more = false;
        for q in 0..nq {
            let m = serve(q, limit);
            more |= m == limit;
            n += m;
        }
        given += limit;
        if !more {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::{in_turns, QUEUE_TURN};

    /// Queues of items (the item is the queue's index), served through
    /// `in_turns` one round; the order in which items were taken.
    fn serve(queues: &mut [usize], budget: usize) -> Vec<usize> {
        let mut order = Vec::new();
        let n = in_turns(queues.len(), budget, QUEUE_TURN, |q, limit| {
            let m = queues[q].min(limit);
            queues[q] -= m;
            order.extend(std::iter::repeat_n(q, m));
            m
        });
        assert_eq!(n, order.len());
        order
    }

    #[test]
    fn a_frame_on_its_own_queue_waits_at_most_one_turn_of_a_flood() {
        // A flood of 1000 frames on the shared queue 0, one latency frame on
        // queue 1 (and an empty queue 2).
        let mut q = [1000, 1, 0];
        let order = serve(&mut q, 64);
        let at = order.iter().position(|&x| x == 1).unwrap();
        assert_eq!(at, QUEUE_TURN, "{order:?}");
        // The flood still gets its whole budget in the round.
        assert_eq!(order.iter().filter(|&&x| x == 0).count(), 64);
        assert_eq!(q, [1000 - 64, 0, 0]);
    }

    #[test]
    fn each_queue_gets_its_budget_in_turns_and_no_more() {
        let mut q = [100, 100, 5];
        let order = serve(&mut q, 20);
        assert_eq!(q, [80, 80, 0]);
        // Turns of 8, then the budget's remaining 4.
        let mut want = Vec::new();
        for (lim, last) in [(8, 5), (8, 0), (4, 0)] {
            want.extend(std::iter::repeat_n(0, lim));
            want.extend(std::iter::repeat_n(1, lim));
            want.extend(std::iter::repeat_n(2, last));
        }
        assert_eq!(order, want);
    }

    #[test]
    fn drained_queues_end_the_round_early_and_a_lone_queue_goes_whole() {
        let mut calls = 0;
        let n = in_turns(3, 64, QUEUE_TURN, |_, _| {
            calls += 1;
            0
        });
        assert_eq!((n, calls), (0, 3), "one pass over empty queues");
        let mut limits = Vec::new();
        in_turns(1, 64, QUEUE_TURN, |_, limit| {
            limits.push(limit);
            limit
        });
        assert_eq!(limits, [64], "a lone queue is served in one go");
        let mut q = [3, 9];
        assert_eq!(serve(&mut q, 64), [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    }
}
