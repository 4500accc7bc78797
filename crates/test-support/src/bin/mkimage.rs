//! `crius-mkimage`: writes the test images as an OCI image layout (and optionally an OCI archive), offline.
//!
//! ```text
//! crius-mkimage busybox  OUT_DIR [NAME]                 # default name busybox:latest
//! crius-mkimage testprog OUT_DIR TESTPROG_BINARY [NAME] # default name crius-testprog:latest
//! crius-mkimage seeds    OUT_DIR                        # stand-ins for the images the seed manifests name
//! crius-mkimage pause    OUT_DIR NAME                   # a stand-in pause image (for containerd's CRI)
//! crius-mkimage layered  OUT_DIR NAME LAYERS MIB        # busybox and LAYERS-1 layers of MIB random MiB each
//! crius-mkimage archive  LAYOUT_DIR ARCHIVE.tar
//! ```

use std::path::Path;
use std::process::ExitCode;

use crius_test_support::image;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match a.as_slice() {
        ["busybox", out, rest @ ..] => {
            image::busybox(Path::new(out), rest.first().copied().unwrap_or("busybox:latest"))
                .map(|i| println!("{} {}", i.manifest, i.config))
        }
        ["testprog", out, bin, rest @ ..] => image::testprog(
            Path::new(out),
            rest.first().copied().unwrap_or("crius-testprog:latest"),
            Path::new(bin),
        )
        .map(|i| println!("{} {}", i.manifest, i.config)),
        ["seeds", out] => image::seed_images(Path::new(out))
            .map(|v| v.iter().for_each(|(name, i)| println!("{name} {}", i.config))),
        ["pause", out, name] => {
            image::pause(Path::new(out), name).map(|i| println!("{} {}", i.manifest, i.config))
        }
        ["layered", out, name, layers, mib] => match (layers.parse::<usize>(), mib.parse::<usize>()) {
            (Ok(l), Ok(m)) => image::layered(Path::new(out), name, l, m << 20)
                .map(|i| println!("{} {}", i.manifest, i.config)),
            _ => Err(std::io::Error::other("LAYERS and MIB are numbers")),
        },
        ["archive", layout, archive] => image::write_archive(Path::new(layout), Path::new(archive)),
        _ => {
            eprintln!(
                "usage: crius-mkimage busybox OUT [NAME] | testprog OUT BINARY [NAME] | seeds OUT | pause OUT NAME | layered OUT NAME LAYERS MIB | archive LAYOUT ARCHIVE"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crius-mkimage: {e}");
            ExitCode::FAILURE
        }
    }
}
