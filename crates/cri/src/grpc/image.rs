//! `runtime.v1.ImageService` over [`crate::images::Images`]: each call takes its request apart, makes one
//! domain call and answers (errors through `error.rs`).

use std::sync::Arc;

use crius_api::cri;
use crius_image::Store;
use tonic::{Request, Response, Status};

use crate::ImageConfig;
use crate::images::{Images, auth_of, reference_of};

/// The image service: one store, one configuration.
#[derive(Debug, Clone)]
pub struct ImageService {
    images: Arc<Images>,
}

impl ImageService {
    /// A service over `store`.
    pub fn new(store: Store, config: ImageConfig) -> ImageService {
        ImageService::counting(store, config, Default::default())
    }

    /// A service over `store` that counts its pulls into `pulls`.
    pub fn counting(store: Store, config: ImageConfig, pulls: crate::metrics::Pulls) -> ImageService {
        ImageService {
            images: Arc::new(Images::new(store, config, pulls)),
        }
    }

    /// The images it serves.
    pub fn images(&self) -> &Images {
        &self.images
    }

    /// Where its pulls are counted.
    pub fn pulls(&self) -> &crate::metrics::Pulls {
        self.images.pulls()
    }

    /// The store it serves.
    pub fn store(&self) -> &Store {
        self.images.store()
    }
}

#[tonic::async_trait]
impl cri::image_service_server::ImageService for ImageService {
    async fn list_images(
        &self,
        request: Request<cri::ListImagesRequest>,
    ) -> Result<Response<cri::ListImagesResponse>, Status> {
        let spec = request.into_inner().filter.and_then(|f| f.image);
        self.images.note_handler("ListImages", spec.as_ref());
        let filter = spec.map(|s| s.image).filter(|s| !s.is_empty());
        let images = self.images.list(filter).await?;
        Ok(Response::new(cri::ListImagesResponse { images }))
    }

    type StreamImagesStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<cri::StreamImagesResponse, Status>> + Send + 'static>,
    >;

    /// ListImages' answer as one chunk.
    async fn stream_images(
        &self,
        request: Request<cri::StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        let filter = request.into_inner().filter;
        let listed = self.list_images(Request::new(cri::ListImagesRequest { filter }));
        let images = listed.await?.into_inner().images;
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(
            cri::StreamImagesResponse { images },
        )))))
    }

    async fn image_status(
        &self,
        request: Request<cri::ImageStatusRequest>,
    ) -> Result<Response<cri::ImageStatusResponse>, Status> {
        let req = request.into_inner();
        let reference = reference_of(req.image.as_ref(), "ImageStatus")?;
        self.images.note_handler("ImageStatus", req.image.as_ref());
        Ok(Response::new(self.images.status(reference, req.verbose).await?))
    }

    async fn pull_image(
        &self,
        request: Request<cri::PullImageRequest>,
    ) -> Result<Response<cri::PullImageResponse>, Status> {
        let req = request.into_inner();
        let reference = reference_of(req.image.as_ref(), "PullImage")?;
        self.images.note_handler("PullImage", req.image.as_ref());
        let auth = auth_of("PullImage", req.auth.as_ref())?;
        let image_ref = self.images.pull(&reference, auth).await?;
        Ok(Response::new(cri::PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        request: Request<cri::RemoveImageRequest>,
    ) -> Result<Response<cri::RemoveImageResponse>, Status> {
        let spec = request.into_inner().image;
        let reference = reference_of(spec.as_ref(), "RemoveImage")?;
        self.images.note_handler("RemoveImage", spec.as_ref());
        self.images.remove(reference).await?;
        Ok(Response::new(cri::RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _: Request<cri::ImageFsInfoRequest>,
    ) -> Result<Response<cri::ImageFsInfoResponse>, Status> {
        Ok(Response::new(self.images.fs_info().await?))
    }
}
