#![doc = include_str!("../README.md")]
#![no_std]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

pub mod blob;
pub mod config;
pub mod error;
pub mod generate;
pub mod kernels;
pub mod kv_cache;
pub mod model;
pub mod observe;
pub mod sampler;
pub mod session;
pub mod tokenizer;

pub use config::{Activation, Config};
pub use error::Error;
pub use kv_cache::{KvCache, KvDType};
pub use model::Model;
pub use session::{Session, SessionSizes};
