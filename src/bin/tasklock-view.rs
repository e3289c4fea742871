//! The views that `tasklock top` and `tasklock ui` start: a binary of their own, so that
//! no other command pays at start-up for the terminal and HTTP code they link
//! (docs/performance.md).

fn main() {
    tasklock::install_panic_hook();
    std::process::exit(tasklock::view::main(std::env::args_os().collect()));
}
