fn main() {
    tasklock::install_panic_hook();
    std::process::exit(tasklock::run(std::env::args_os()));
}
