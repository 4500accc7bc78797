//! `crius images`: pull (with progress), import (a path or `-`, streamed: see [`crate::import`]), tag, ls,
//! inspect, rm.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use clap::Subcommand;
use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_api::images as api;

#[derive(Debug, Subcommand)]
pub enum Images {
    /// Pull an image from its registry (short names are Docker Hub's: busybox = docker.io/library/busybox:latest).
    Pull {
        /// Image reference: `name[:tag]` or `name@sha256:…`
        reference: String,
        /// Registry credentials as USER:PASSWORD.
        #[arg(long, value_name = "USER:PASSWORD")]
        creds: Option<String>,
        /// A bearer token for the registry (instead of --creds).
        #[arg(long, value_name = "TOKEN", conflicts_with = "creds")]
        registry_token: Option<String>,
        /// Print only the image id.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Import an OCI layout directory, an OCI archive or a docker-archive, read with your own rights and
    /// streamed to criusd (`-` reads an archive from stdin, as `kind load` and `docker save | ...` give it).
    Import {
        /// Path of the archive or layout, or `-`.
        path: std::path::PathBuf,
    },
    /// Give an image another name (moved from any image that had it).
    Tag {
        /// The image: id, name or repo@digest.
        source: String,
        /// The new name, `repo[:tag]`.
        target: String,
    },
    /// List images.
    #[command(visible_alias = "list")]
    Ls {
        /// Only show image ids.
        #[arg(short, long)]
        quiet: bool,
        /// Show repo digests too.
        #[arg(long)]
        digests: bool,
        /// Only images matching this reference.
        filter: Option<String>,
    },
    /// Show an image's status and config as JSON (the CRI's verbose ImageStatus).
    Inspect {
        /// Image id, name or repo@digest.
        reference: String,
    },
    /// Remove images (with all their names) by id, name or repo@digest.
    #[command(visible_alias = "remove")]
    Rm {
        /// Images to remove.
        #[arg(required = true)]
        references: Vec<String>,
    },
}

fn grpc(e: tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

/// Runs an images command against criusd at `address`.
pub async fn run(address: &str, cmd: Images) -> Result<(), String> {
    let channel = crius_api::connect(address).await.map_err(|e| e.to_string())?;
    let mut cri = ImageServiceClient::new(channel.clone());
    match cmd {
        Images::Pull {
            reference,
            creds,
            registry_token,
            quiet,
        } => {
            let (username, password) = match creds {
                Some(c) => {
                    let (u, p) = c.split_once(':').ok_or("--creds: use USER:PASSWORD")?;
                    (u.to_string(), p.to_string())
                }
                None => Default::default(),
            };
            let req = api::PullRequest {
                reference,
                username,
                password,
                registry_token: registry_token.unwrap_or_default(),
            };
            pull(channel, req, quiet).await
        }
        Images::Import { path } => {
            let (resp, _) = crate::import::import(channel, &path).await?;
            for i in resp.images {
                println!("{} {}", i.image_id, i.repo_tags.join(" "));
            }
            Ok(())
        }
        Images::Tag { source, target } => {
            let resp = api::images_client::ImagesClient::new(channel)
                .tag(api::TagRequest { source, target })
                .await
                .map_err(grpc)?
                .into_inner();
            println!("{} {}", resp.image_id, resp.repo_tags.join(" "));
            Ok(())
        }
        Images::Ls {
            quiet,
            digests,
            filter,
        } => {
            let filter = filter.map(|image| cri::ImageFilter {
                image: Some(cri::ImageSpec {
                    image,
                    ..Default::default()
                }),
            });
            let images = cri
                .list_images(cri::ListImagesRequest { filter })
                .await
                .map_err(grpc)?
                .into_inner()
                .images;
            print_list(&images, quiet, digests);
            Ok(())
        }
        Images::Inspect { reference } => {
            let resp = cri
                .image_status(cri::ImageStatusRequest {
                    image: Some(spec(&reference)),
                    verbose: true,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            let image = resp
                .image
                .ok_or_else(|| format!("image {reference:?} not found"))?;
            // Field names as the CRI's JSON spells them (and crictl prints them): repoTags, not repo_tags.
            let status = camel_keys(serde_json::to_value(&image).map_err(|e| e.to_string())?);
            let mut out = serde_json::json!({ "status": status });
            for (k, v) in resp.info {
                out[k] = serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v));
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        Images::Rm { references } => {
            let mut failed = Vec::new();
            for r in references {
                // The CRI call succeeds for unknown images; the CLI says so.
                let found = cri
                    .image_status(cri::ImageStatusRequest {
                        image: Some(spec(&r)),
                        verbose: false,
                    })
                    .await
                    .map_err(grpc)?
                    .into_inner()
                    .image;
                let Some(image) = found else {
                    eprintln!("crius: image {r:?} not found");
                    failed.push(r);
                    continue;
                };
                cri.remove_image(cri::RemoveImageRequest {
                    image: Some(spec(&image.id)),
                })
                .await
                .map_err(grpc)?;
                println!("removed {} {}", image.id, image.repo_tags.join(" "));
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(format!("not removed: {}", failed.join(", ")))
            }
        }
    }
}

fn camel_keys(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let mut out = String::new();
                    let mut up = false;
                    for c in k.chars() {
                        if c == '_' {
                            up = true;
                        } else if up {
                            out.extend(c.to_uppercase());
                            up = false;
                        } else {
                            out.push(c);
                        }
                    }
                    (out, camel_keys(v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(camel_keys).collect()),
        other => other,
    }
}

fn spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

fn human(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.3}{}", units[i])
    }
}

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..hex.len().min(13)]
}

/// The annotation criusd puts on a listed OCI artifact's spec: its type (`crius_cri::images`).
const ARTIFACT_TYPE_ANNOTATION: &str = "io.crius.image.artifact-type";

fn print_list(images: &[cri::Image], quiet: bool, digests: bool) {
    if quiet {
        for i in images {
            println!("{}", i.id);
        }
        return;
    }
    print!("{}", table(images, digests));
}

/// The listing's table, a line for each name of each image.
fn table(images: &[cri::Image], digests: bool) -> String {
    let mut rows = vec![vec![
        "IMAGE".to_string(),
        "TAG".to_string(),
        "IMAGE ID".to_string(),
        "SIZE".to_string(),
    ]];
    if digests {
        rows[0].insert(2, "DIGEST".into());
    }
    // OCI artifacts (image volumes) are listed with their type, in a column of their own when there are any.
    let artifact_type = |i: &cri::Image| {
        i.spec
            .as_ref()
            .and_then(|s| s.annotations.get(ARTIFACT_TYPE_ANNOTATION))
            .cloned()
    };
    let artifacts = images.iter().any(|i| artifact_type(i).is_some());
    if artifacts {
        rows[0].push("ARTIFACT TYPE".into());
    }
    for i in images {
        let tags: Vec<(String, String)> = if i.repo_tags.is_empty() {
            let repo = i
                .repo_digests
                .first()
                .and_then(|d| d.split_once('@'))
                .map(|(r, _)| r.to_string())
                .unwrap_or_else(|| "<none>".into());
            vec![(repo, "<none>".into())]
        } else {
            i.repo_tags
                .iter()
                .map(|t| match t.rfind(':') {
                    Some(p) if !t[p..].contains('/') => (t[..p].to_string(), t[p + 1..].to_string()),
                    _ => (t.clone(), "<none>".into()),
                })
                .collect()
        };
        let by_repo: HashMap<&str, &str> = i.repo_digests.iter().filter_map(|d| d.split_once('@')).collect();
        for (repo, tag) in tags {
            let mut row = vec![repo.clone(), tag, short_id(&i.id).to_string(), human(i.size)];
            if digests {
                let d = by_repo
                    .get(repo.as_str())
                    .map(|d| short_id(d))
                    .unwrap_or("<none>");
                row.insert(2, d.to_string());
            }
            if artifacts {
                row.push(artifact_type(i).unwrap_or_else(|| "-".into()));
            }
            rows.push(row);
        }
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out += line.join("   ").trim_end();
        out.push('\n');
    }
    out
}

/// Pulls through the project API, drawing progress on a terminal (one line per event otherwise).
async fn pull(channel: tonic::transport::Channel, req: api::PullRequest, quiet: bool) -> Result<(), String> {
    use api::pull_event::Event;
    let reference = req.reference.clone();
    let mut stream = api::images_client::ImagesClient::new(channel)
        .pull(req)
        .await
        .map_err(grpc)?
        .into_inner();
    let tty = std::io::stderr().is_terminal() && !quiet;
    let mut sizes: HashMap<String, u64> = HashMap::new();
    let mut done: HashMap<String, u64> = HashMap::new();
    let mut err = std::io::stderr();
    while let Some(msg) = stream.message().await.map_err(grpc)? {
        let Some(ev) = msg.event else { continue };
        match ev {
            Event::Resolved(r) => {
                for b in &r.blobs {
                    if !b.present {
                        sizes.insert(b.digest.clone(), b.size);
                    }
                }
                if !quiet {
                    let total: u64 = sizes.values().sum();
                    let _ = writeln!(
                        err,
                        "{reference}: manifest {}, {} blobs, {} to fetch ({})",
                        r.manifest_digest,
                        r.blobs.len(),
                        sizes.len(),
                        human(total)
                    );
                }
            }
            Event::Progress(p) => {
                done.insert(p.digest, p.bytes_done);
                if tty {
                    let (d, t): (u64, u64) = (done.values().sum(), sizes.values().sum());
                    let _ = write!(err, "\r\x1b[Kdownloading {} / {}", human(d), human(t));
                }
            }
            Event::Stored(s) => {
                if tty {
                    let _ = write!(err, "\r\x1b[K");
                }
                if !quiet {
                    let _ = writeln!(err, "stored {} ({})", s.digest, human(s.size));
                }
            }
            Event::Unpacking(u) => {
                if !quiet {
                    let _ = writeln!(err, "unpacking {}", u.diff_id);
                }
            }
            Event::Done(d) => {
                if !quiet {
                    let _ = writeln!(
                        err,
                        "pulled {} ({} blobs, {} fetched)",
                        d.repo_tags
                            .first()
                            .or(d.repo_digests.first())
                            .unwrap_or(&reference),
                        d.blobs_fetched,
                        human(d.bytes_fetched)
                    );
                }
                println!("{}", d.image_id);
                return Ok(());
            }
        }
    }
    Err(format!(
        "pull of {reference}: criusd ended the stream without a result"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_camel_cased_like_the_cri_json() {
        let v = camel_keys(serde_json::json!({"repo_tags": ["a"], "spec": {"user_specified_image": ""}}));
        assert_eq!(
            v,
            serde_json::json!({"repoTags": ["a"], "spec": {"userSpecifiedImage": ""}})
        );
    }

    #[test]
    fn artifacts_are_listed_with_their_type() {
        let image = |id: &str, tag: &str, artifact: Option<&str>| cri::Image {
            id: id.into(),
            repo_tags: vec![tag.into()],
            size: 1000,
            spec: Some(cri::ImageSpec {
                annotations: artifact
                    .map(|t| (ARTIFACT_TYPE_ANNOTATION.to_string(), t.to_string()))
                    .into_iter()
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let plain = table(&[image("sha256:aaaa", "r/busybox:1", None)], false);
        assert!(
            !plain.contains("ARTIFACT"),
            "no column without artifacts: {plain}"
        );
        let both = table(
            &[
                image("sha256:aaaa", "r/busybox:1", None),
                image(
                    "sha256:bbbb",
                    "r/model:1",
                    Some("application/vnd.example.model.v1"),
                ),
            ],
            false,
        );
        let lines: Vec<&str> = both.lines().collect();
        assert!(lines[0].ends_with("ARTIFACT TYPE"), "{both}");
        assert!(
            lines[1].starts_with("r/busybox") && lines[1].ends_with(" -"),
            "{both}"
        );
        assert!(
            lines[2].starts_with("r/model") && lines[2].ends_with("application/vnd.example.model.v1"),
            "{both}"
        );
    }

    #[test]
    fn sizes_and_ids_print_short() {
        assert_eq!(human(999), "999B");
        assert_eq!(human(1_183_000), "1.183MB");
        assert_eq!(short_id("sha256:ef2f0132108836dbd27"), "ef2f013210883");
    }
}
