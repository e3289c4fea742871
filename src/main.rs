//! The `tasklock` binary.
//!
//! On glibc Linux it starts without Rust's runtime set-up (`no_main`): that set-up reads
//! `/proc/self/maps` and maps a signal stack, 17 system calls, to report a stack overflow
//! by name; about 5% of the CPU time of a whole `checkout`. What tasklock relies on of it
//! (standard descriptors open, SIGPIPE ignored) is done by `os::start_process`; the
//! arguments are still read by std (glibc hands them to it before `main`). A stack
//! overflow, a bug, then ends the process with SIGSEGV without std's message.
#![cfg_attr(all(target_os = "linux", target_env = "gnu", not(test)), no_main)]

#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    // SAFETY: first thing in the process, before any other thread exists.
    unsafe { tasklock::os::start_process() };
    tasklock::install_panic_hook();
    std::process::exit(tasklock::run(std::env::args_os()));
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(test))))]
fn main() {
    tasklock::install_panic_hook();
    std::process::exit(tasklock::run(std::env::args_os()));
}
