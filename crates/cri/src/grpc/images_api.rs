//! `crius.images.v1.Images`, the project's own image API: pull with a stream of progress events, and import
//! of archives, over the same store and configuration as the CRI ImageService.

use std::pin::Pin;

use crius_api::images as api;
use crius_image::pull::Progress;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::grpc::image::ImageService;

/// The service; it shares the CRI ImageService's store and configuration.
#[derive(Debug, Clone)]
pub struct ImagesApi {
    images: ImageService,
}

impl ImagesApi {
    /// The API over the same store as `images`.
    pub fn new(images: ImageService) -> ImagesApi {
        ImagesApi { images }
    }
}

fn event(e: api::pull_event::Event) -> api::PullEvent {
    api::PullEvent { event: Some(e) }
}

fn progress_event(p: Progress) -> api::PullEvent {
    use api::pull_event::Event;
    event(match p {
        Progress::Resolved { manifest, blobs } => Event::Resolved(api::Resolved {
            manifest_digest: manifest.to_string(),
            blobs: blobs
                .into_iter()
                .map(|(d, size, present)| api::Blob {
                    digest: d.to_string(),
                    size,
                    present,
                })
                .collect(),
        }),
        Progress::Downloading { digest, done } => Event::Progress(api::BlobProgress {
            digest: digest.to_string(),
            bytes_done: done,
        }),
        Progress::Stored { digest, size } => Event::Stored(api::BlobStored {
            digest: digest.to_string(),
            size,
        }),
        Progress::Unpacking { diff_id } => Event::Unpacking(api::Unpacking {
            diff_id: diff_id.to_string(),
        }),
    })
}

type PullStream = Pin<Box<dyn Stream<Item = Result<api::PullEvent, Status>> + Send>>;

#[tonic::async_trait]
impl api::images_server::Images for ImagesApi {
    type PullStream = PullStream;

    async fn pull(&self, request: Request<api::PullRequest>) -> Result<Response<PullStream>, Status> {
        let req = request.into_inner();
        if req.reference.is_empty() {
            return Err(Error::invalid("Pull", "reference", "is empty").into());
        }
        // Refuse a bad reference before the stream starts, so the caller gets the status directly.
        crius_image::reference::normalize(&req.reference)
            .map_err(|source| Error::Image { call: "Pull", source })?;
        // The same precedence as the CRI's credentials: a token, else user and password, else none.
        let auth = crate::images::auth_of(
            "Pull",
            Some(&crius_api::cri::AuthConfig {
                username: req.username,
                password: req.password,
                registry_token: req.registry_token,
                ..Default::default()
            }),
        )?;
        let opts = self.images.images().pull_options(auth);
        let store = self.images.store().clone();
        let pulls = self.images.pulls().clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let sink = tx.clone();
            let send = move |p: Progress| {
                let _ = sink.send(Ok(progress_event(p)));
            };
            let started = std::time::Instant::now();
            let result = crius_image::pull::pull_with_progress(&store, &req.reference, &opts, &send).await;
            let last = match result {
                Ok(r) => {
                    tracing::info!(image = %req.reference, id = %r.image.id, blobs = r.blobs_fetched,
                        bytes = r.bytes_fetched, ms = started.elapsed().as_millis() as u64, "pulled");
                    pulls.succeeded(r.bytes_fetched, started.elapsed());
                    Ok(event(api::pull_event::Event::Done(api::PullDone {
                        image_id: r.image.id.to_string(),
                        repo_tags: r.image.names,
                        repo_digests: r.image.repo_digests,
                        blobs_fetched: r.blobs_fetched as u32,
                        bytes_fetched: r.bytes_fetched,
                    })))
                }
                Err(e) => {
                    tracing::warn!(image = %req.reference, error = %e, "pull failed");
                    pulls.failed();
                    Err(Error::Image {
                        call: "Pull",
                        source: e,
                    }
                    .into())
                }
            };
            let _ = tx.send(last);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        )))
    }

    async fn import(
        &self,
        request: Request<tonic::Streaming<api::ImportRequest>>,
    ) -> Result<Response<api::ImportResponse>, Status> {
        let mut stream = request.into_inner();
        let first = stream.message().await?.unwrap_or_default();
        let name = match first.name.as_str() {
            "" => "the archive".to_string(),
            n => format!("archive {n:?}"),
        };
        // The archive's bytes go to the blocking import as they come, a few messages ahead at most.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, String>>(4);
        let store = self.images.store().clone();
        let what = name.clone();
        let task = tokio::task::spawn_blocking(move || {
            crius_image::import::import_stream(&store, ChannelReader::new(rx), &what)
        });
        let mut msg = Some(first);
        while let Some(m) = msg {
            // A send fails once the import stopped reading (a bad archive): its error is the answer.
            if !m.data.is_empty() && tx.send(Ok(m.data)).await.is_err() {
                break;
            }
            msg = match stream.message().await {
                Ok(m) => m,
                Err(e) => {
                    // Not an end: a cut-short archive must not import as a shorter one.
                    let _ = tx.send(Err(format!("the client's stream failed: {e}"))).await;
                    None
                }
            };
        }
        drop(tx);
        let shown = name;
        let records = match task.await {
            Ok(r) => r.map_err(|source| Error::Image {
                call: "Import",
                source,
            })?,
            Err(e) => {
                return Err(Error::TaskFailed {
                    call: "Import",
                    reason: e.to_string(),
                }
                .into());
            }
        };
        for r in &records {
            tracing::info!(archive = %shown, id = %r.id, names = ?r.names, "imported");
        }
        Ok(Response::new(api::ImportResponse {
            images: records
                .into_iter()
                .map(|r| api::ImportedImage {
                    image_id: r.id.to_string(),
                    repo_tags: r.names,
                    repo_digests: r.repo_digests,
                    size: r.size,
                })
                .collect(),
        }))
    }

    async fn tag(&self, request: Request<api::TagRequest>) -> Result<Response<api::TagResponse>, Status> {
        let req = request.into_inner();
        let store = self.images.store().clone();
        let (source, target) = (req.source.clone(), req.target.clone());
        let rec = match tokio::task::spawn_blocking(move || store.tag(&source, &target)).await {
            Ok(r) => r.map_err(|source| Error::Image { call: "Tag", source })?,
            Err(e) => {
                return Err(Error::TaskFailed {
                    call: "Tag",
                    reason: e.to_string(),
                }
                .into());
            }
        };
        tracing::info!(id = %rec.id, source = %req.source, target = %req.target, "tagged");
        Ok(Response::new(api::TagResponse {
            image_id: rec.id.to_string(),
            repo_tags: rec.names,
        }))
    }
}

/// The archive an Import call streams, read by the blocking import: each message's data in turn, an error
/// where the client's stream failed, the end where it ended.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, String>>,
    buf: Vec<u8>,
    at: usize,
}

impl ChannelReader {
    fn new(rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, String>>) -> ChannelReader {
        ChannelReader {
            rx,
            buf: Vec::new(),
            at: 0,
        }
    }
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.buf.len() {
            match self.rx.blocking_recv() {
                Some(Ok(data)) => (self.buf, self.at) = (data, 0),
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::ChannelReader;

    /// The archive is what the messages held, in order; a failed client stream is an error where it failed,
    /// never an early end (which a tar reader could take for a whole, shorter archive).
    #[test]
    fn an_archive_reads_as_its_messages_and_a_failed_stream_as_an_error() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.try_send(Ok(b"ab".to_vec())).unwrap();
        tx.try_send(Ok(b"cde".to_vec())).unwrap();
        drop(tx);
        let mut all = Vec::new();
        ChannelReader::new(rx).read_to_end(&mut all).unwrap();
        assert_eq!(all, b"abcde");

        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.try_send(Ok(b"ab".to_vec())).unwrap();
        tx.try_send(Err("the client's stream failed: reset".into()))
            .unwrap();
        let mut r = ChannelReader::new(rx);
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).unwrap(), 2);
        let e = r.read(&mut buf).unwrap_err();
        assert!(e.to_string().contains("stream failed"), "{e}");
    }
}
