//! containerd-shim-crius-v2: see the crius-shim crate.

fn main() {
    // What the shim's starter leaked (any descriptor above stderr it did not mark close-on-exec) reaches none of
    // the runtime processes the shim runs; the shim makes all its own descriptors close-on-exec too.
    // SAFETY: close_range with integer arguments; CLOSE_RANGE_CLOEXEC only changes descriptor flags.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    // criusd raised its own descriptor limit: the shim, its runtime and the containers get back the one criusd
    // started with.
    crius_common::nofile::restore_inherited();
    std::process::exit(crius_shim::run(std::env::args().skip(1)));
}
