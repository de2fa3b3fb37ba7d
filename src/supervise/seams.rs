//! The supervisor's seam of the deterministic simulation (tests/sim), with the feature
//! `sim-seams` only: the deadlines it keeps for a run (the lease's moments as `Lease::timeline`
//! made them and each renewal moved them, the lost-signal, SIGKILL), so that the simulation's
//! holders are stopped at the moments the binary's supervisor and guardian count down to.

pub use super::deadlines::{Deadlines, Due};
