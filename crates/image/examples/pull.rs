//! Pulls (and unpacks) one image into a store: `pull ROOT REFERENCE [--insecure HOST]...`.
//! Used by hack/bench-pull.sh until criusd and `crius images pull` exist.

use crius_image::Store;
use crius_image::pull::{PullOptions, pull};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(root), Some(reference)) = (args.first(), args.get(1)) else {
        eprintln!("usage: pull ROOT REFERENCE [--insecure HOST]...");
        std::process::exit(2)
    };
    let mut opts = PullOptions::default();
    let mut rest = args[2..].iter();
    while let Some(a) = rest.next() {
        match (a.as_str(), rest.next()) {
            ("--insecure", Some(h)) => opts.insecure.push(h.clone()),
            _ => {
                eprintln!("unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    let store = Store::open(std::path::Path::new(root)).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    match pull(&store, reference, &opts).await {
        Ok(r) => println!(
            "{} {} blobs {} bytes",
            r.image.id, r.blobs_fetched, r.bytes_fetched
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}
