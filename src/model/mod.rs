//! The model: the pure steps every store runs, with no atomics, no clock
//! and no storage. [`schedule`] is the pacing step (GCRA's, packed into one
//! word of state) and what surrounds it: the rebase across a change of
//! limit, the state at rest, saturation; [`warm_up`] extends it with
//! Guava's warm-up; [`window`] is the second step, a quota per window of
//! the wall clock (fixed, or by the [`calendar`]). Every store, in process
//! or in a server, decides through these, and the property tests hold each
//! store to them decision for decision. [`aimd`] is the step of an
//! adaptive rate: how a rate moves on the far side's answers (it decides
//! no permit; the rate it returns is set on a limiter, whose step then
//! paces by it).

pub mod aimd;
pub mod calendar;
pub mod schedule;
pub mod warm_up;
pub mod window;
