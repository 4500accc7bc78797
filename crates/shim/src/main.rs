//! containerd-shim-crius-v2: see the crius-shim crate.

fn main() {
    std::process::exit(crius_shim::run(std::env::args().skip(1)));
}
