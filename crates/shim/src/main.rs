//! containerd-shim-crius-v2: see the crius-shim crate.

fn main() {
    std::process::exit(crius_shim::start::main(std::env::args().skip(1)));
}
