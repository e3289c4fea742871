//! The live view that `tasklock top` starts: a binary of its own, so that no other
//! command pays at start-up for the terminal code it links (docs/performance.md).

fn main() {
    tasklock::install_panic_hook();
    std::process::exit(tasklock::top::main(std::env::args_os().collect()));
}
