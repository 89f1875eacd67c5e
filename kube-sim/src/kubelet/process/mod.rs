//! The process runtime: containers whose image is mapped to a program on this host (see
//! [`images`]) run as real processes instead of simulated ones.
mod env;
mod images;
mod spawn;
mod volumes;
