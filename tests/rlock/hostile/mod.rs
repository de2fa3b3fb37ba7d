//! Hostile input, round three: output that cannot be written, bytes other users wrote, hints
//! that must run as printed, files that are not files.

mod failed_writes;
mod files;
mod foreign_bytes;
mod lying_server;
mod slow_server;
mod smaller;
