//! The pod's images, made sure of before anything else is made: each container's and each image volume's is
//! pulled or found as its pull policy (or the caller's override) says.

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use tonic::transport::Channel;

use super::PullPolicy;
use crate::Error;
use crate::report::Event;

/// Who needs an image: `container "app"` or `volume "data"`, and its own pull policy.
pub(super) struct Wanted<'a> {
    /// `container "app"`, `volume "data"`.
    pub of: String,
    /// Its `imagePullPolicy` / `pullPolicy`.
    pub pull_policy: Option<&'a str>,
}

/// Makes sure `image` is there as `policy` (or the wanter's own policy) wants; returns its id.
pub(super) async fn ensure_image(
    img: &mut ImageServiceClient<Channel>,
    policy: PullPolicy,
    wanted: Wanted<'_>,
    image: &str,
    on: &mut impl FnMut(Event),
) -> Result<String, Error> {
    let policy = match policy {
        PullPolicy::Manifest => match wanted.pull_policy {
            Some("Always") => PullPolicy::Always,
            Some("Never") => PullPolicy::Never,
            Some("IfNotPresent") => PullPolicy::Missing,
            _ => {
                let last = image.rsplit('/').next().unwrap_or(image);
                if image.contains('@') || last.contains(':') && !last.ends_with(":latest") {
                    PullPolicy::Missing
                } else {
                    PullPolicy::Always
                }
            }
        },
        p => p,
    };
    let spec = cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    };
    if policy != PullPolicy::Always {
        let present = img
            .image_status(cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
            .map_err(Error::cri(format!("ImageStatus of {image}")))?
            .into_inner()
            .image;
        match present {
            Some(i) => return Ok(i.id),
            None if policy == PullPolicy::Never => {
                return Err(Error::ImageNotPresent {
                    of: wanted.of,
                    image: image.to_string(),
                });
            }
            None => {}
        }
    }
    on(Event::Pulling(image.to_string()));
    let r = img
        .pull_image(cri::PullImageRequest {
            image: Some(spec),
            auth: None,
            sandbox_config: None,
        })
        .await
        .map_err(Error::cri(format!("{}: pulling {image}", wanted.of)))?;
    Ok(r.into_inner().image_ref)
}
