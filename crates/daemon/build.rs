//! Links criusd with packed relative relocations (DT_RELR; binutils 2.38+, glibc 2.36+). A PIE of criusd's size has
//! ~27,000 relative relocations: as RELA entries they are 650 KB that the dynamic linker reads at every start and
//! that stay resident; packed, they take a few KiB.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
