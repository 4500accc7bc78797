//! criusd end to end: its config file, flags and socket; the CRI ImageService over a real registry (pull, status
//! by every kind of reference, list, remove, image fs info, credentials); and the `crius images` CLI.

mod cli_images;
mod config;
mod cri_images;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::registry::Registry;
use crius_test_support::{image, require_root, testprog_binary};
use tonic::Code;

type Client = ImageServiceClient<tonic::transport::Channel>;

async fn client(d: &Daemon) -> Client {
    let ch = crius_api::connect(&d.socket().display().to_string())
        .await
        .unwrap();
    ImageServiceClient::new(ch)
}

fn spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

async fn pull(c: &mut Client, image: &str, auth: Option<cri::AuthConfig>) -> Result<String, tonic::Status> {
    c.pull_image(cri::PullImageRequest {
        image: spec(image),
        auth,
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn status(c: &mut Client, image: &str) -> Option<cri::Image> {
    c.image_status(cri::ImageStatusRequest {
        image: spec(image),
        verbose: false,
    })
    .await
    .unwrap()
    .into_inner()
    .image
}

async fn remove(c: &mut Client, image: &str) {
    c.remove_image(cri::RemoveImageRequest { image: spec(image) })
        .await
        .unwrap();
}

async fn fs_info(c: &mut Client) -> cri::FilesystemUsage {
    c.image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .image_filesystems
        .remove(0)
}

fn count(dir: std::path::PathBuf) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// The test images' layout, and their digests.
struct Images {
    layout: std::path::PathBuf,
    bb: image::ImageInfo,
    tp: image::ImageInfo,
}

fn images() -> Images {
    require_root();
    let layout = image::test_images_layout(&testprog_binary());
    Images {
        bb: image::info(&layout, "busybox:latest").unwrap(),
        tp: image::info(&layout, "crius-testprog:latest").unwrap(),
        layout,
    }
}
