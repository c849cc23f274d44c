//! `Pace`'s hook for an adaptive rate ([`Pace::adapt`](super::Pace::adapt)):
//! each request takes a ticket as it leaves, and its answer (status and
//! time) goes to the [`Adaptive`] with it.

use std::time::Duration;

use crate::adapt::{answer_of, Adaptive, Adjust, Answer, Ticket};

/// An adaptive rate as `Pace` holds it, whatever limit it drives.
pub(super) trait Feedback: Send + Sync {
    /// A ticket for a request leaving now.
    fn send(&self) -> Ticket;

    /// The answer to the request of `ticket`: its status (`None`: no
    /// answer came, the request failed on its way), `latency` after it
    /// left.
    fn answer(&self, ticket: Ticket, status: Option<u16>, latency: Duration);
}

impl<L: Adjust> Feedback for Adaptive<L> {
    fn send(&self) -> Ticket {
        Adaptive::send(self)
    }

    fn answer(&self, ticket: Ticket, status: Option<u16>, latency: Duration) {
        let answer = status.map_or(Answer::Other, |status| answer_of(status, latency));
        Adaptive::answer(self, ticket, answer);
    }
}
