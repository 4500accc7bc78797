//! `crius.pod.v1.PodService` over gRPC: each call is the [`Service`]'s, its objects as Kubernetes' JSON.

use std::pin::Pin;

use crius_api::pod as api;
use futures::Stream;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::{Kind, Service};
use crius_pod::logs::LogOptions;

type Reply<T> = Result<Response<T>, Status>;
type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn json(v: &serde_json::Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[tonic::async_trait]
impl api::pod_service_server::PodService for Service {
    async fn apply(&self, req: Request<api::ApplyRequest>) -> Reply<api::ApplyResponse> {
        let r = req.into_inner();
        let source = if r.source.is_empty() {
            "the manifest"
        } else {
            &r.source
        };
        let me = self.clone();
        let (text, source) = (r.manifest, source.to_string());
        let applied = tokio::task::spawn_blocking(move || me.apply(&text, &source, r.dry_run))
            .await
            .map_err(|e| crate::error::internal(format!("apply: {e}")))??;
        Ok(Response::new(api::ApplyResponse {
            applied: applied
                .into_iter()
                .map(|a| api::Applied {
                    kind: a.kind,
                    namespace: a.namespace,
                    name: a.name,
                    action: a.action.into(),
                })
                .collect(),
        }))
    }

    async fn get(&self, req: Request<api::GetRequest>) -> Reply<api::GetResponse> {
        let r = req.into_inner();
        let kind = Kind::parse(&r.kind)?;
        let objects = self.get(kind, &r.namespace, &r.name, r.all_namespaces, &r.selector)?;
        let events = if r.events && !r.name.is_empty() {
            self.events(kind, &r.namespace, &r.name)
        } else {
            Vec::new()
        };
        Ok(Response::new(api::GetResponse {
            objects: objects.iter().map(json).collect(),
            events: events.iter().map(json).collect(),
        }))
    }

    async fn delete(&self, req: Request<api::DeleteRequest>) -> Reply<api::DeleteResponse> {
        let r = req.into_inner();
        let kind = Kind::parse(&r.kind)?;
        Service::delete(self, kind, &r.namespace, &r.name, r.grace_period_seconds, r.wait).await?;
        Ok(Response::new(api::DeleteResponse {
            kind: kind.qualified(),
        }))
    }

    async fn resize(&self, req: Request<api::ResizeRequest>) -> Reply<api::ResizeResponse> {
        let r = req.into_inner();
        let pod = Service::resize(self, &r.namespace, &r.name, &r.patch, &r.patch_type)?;
        Ok(Response::new(api::ResizeResponse { object: json(&pod) }))
    }

    async fn scale(&self, req: Request<api::ScaleRequest>) -> Reply<api::ScaleResponse> {
        let r = req.into_inner();
        Service::scale(self, Kind::parse(&r.kind)?, &r.namespace, &r.name, r.replicas)?;
        Ok(Response::new(api::ScaleResponse {}))
    }

    async fn checkpoint(&self, req: Request<api::CheckpointRequest>) -> Reply<api::CheckpointResponse> {
        let r = req.into_inner();
        let container_id = Service::checkpoint(
            self,
            &r.namespace,
            &r.pod,
            &r.container,
            &r.location,
            r.timeout_seconds,
        )
        .await?;
        Ok(Response::new(api::CheckpointResponse {
            container_id,
            location: r.location,
        }))
    }

    type LogsStream = Streamed<api::LogsChunk>;

    async fn logs(&self, req: Request<api::LogsRequest>) -> Reply<Self::LogsStream> {
        let r = req.into_inner();
        let (path, running) = self.log_file(&r.namespace, &r.pod, &r.container, r.previous)?;
        let opts = LogOptions {
            follow: r.follow,
            tail_lines: u64::try_from(r.tail_lines).ok(),
            timestamps: r.timestamps,
            since: None,
        };
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(16);
        let (out_tx, out_rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let forward = async {
                while let Some(data) = rx.recv().await {
                    if out_tx.send(Ok(api::LogsChunk { data })).await.is_err() {
                        return;
                    }
                }
            };
            let (read, ()) = tokio::join!(crius_pod::logs::stream(&path, &opts, running, tx), forward);
            if let Err(e) = read {
                let _ = out_tx.send(Err(Status::from(crate::Error::from(e)))).await;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }

    type WatchStream = Streamed<api::WatchEvent>;

    async fn watch(&self, req: Request<api::WatchRequest>) -> Reply<Self::WatchStream> {
        let r = req.into_inner();
        let namespace = crate::ns(&r.namespace).to_string();
        let wanted = move |p: &k8s_openapi::api::core::v1::Pod| {
            let (ns, name) = crate::record::names(&p.metadata);
            (r.all_namespaces || ns == namespace) && (r.name.is_empty() || name == r.name)
        };
        let mut changes = self.subscribe();
        let now = self.pods(&wanted);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            for p in now {
                let e = api::WatchEvent {
                    r#type: "ADDED".into(),
                    object: json(&crate::pod_json(&p)),
                };
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
            loop {
                match changes.recv().await {
                    Ok(c) if wanted(&c.pod) => {
                        let e = api::WatchEvent {
                            r#type: c.kind.into(),
                            object: json(&crate::pod_json(&c.pod)),
                        };
                        if tx.send(Ok(e)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Status::resource_exhausted(format!(
                                "the watch fell {n} changes behind: watch again"
                            ))))
                            .await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
