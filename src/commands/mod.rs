//! One module per command family. Commands compute a [`Report`]; they never print.

pub mod agents;
pub mod audit;
pub mod checkout;
pub mod claim;
pub mod codex_config;
pub mod doctor;
pub mod edit_gate;
pub mod freeze;
pub mod git_hook;
pub mod guard;
pub mod heartbeat;
pub mod hook;
pub mod inbox;
pub mod init;
pub mod list;
pub mod note;
pub mod release;
pub mod renew;
pub mod run;
pub mod setup;
pub mod stage;
pub mod status;
pub mod verify;
pub mod wait;
pub mod watch;
pub mod why;

pub use crate::engine::Ctx;
