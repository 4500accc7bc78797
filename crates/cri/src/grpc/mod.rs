//! The tonic adapters, and nothing else: `runtime.v1.RuntimeService` ([`runtime_service`]), `runtime.v1.ImageService`
//! ([`image`]) and the project's `crius.images.v1.Images` ([`images_api`]).

pub mod image;
pub mod images_api;
pub mod runtime_service;
pub mod waiting;
