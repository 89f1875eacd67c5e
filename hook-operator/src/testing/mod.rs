//! Hostile inputs shared by the property tests, `hook-fuzz` and the end-to-end hostile-hook suite: generated ones
//! ([`fuzz`]) and the corpus of known bounds ([`hostile`]).

pub mod fuzz;
pub mod hostile;
