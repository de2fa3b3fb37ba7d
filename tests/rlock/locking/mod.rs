//! The basics on one Redis: `acquire`, `release` and `renew`, each asserting what is in Redis
//! after the command and not only the exit code; locks written by other clients; the scripts
//! surviving flushes, restarts and retries; scripts that refuse before they write; and every key
//! rlock writes expiring.

mod acquire;
mod foreign_keys;
mod hold_at_least;
mod nothing_left_behind;
mod refusals;
mod release_and_renew;
mod scripts;
