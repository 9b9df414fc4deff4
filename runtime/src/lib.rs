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

#[cfg(test)]
mod readme_example {
    /// examples/firmware.rs is the README's code block without its hidden (`# `) doctest lines.
    #[test]
    fn the_example_file_is_the_readme_code() {
        let readme = include_str!("../README.md");
        let start = readme.find("```rust\n").map(|i| i + 8).unwrap();
        let block = &readme[start..start + readme[start..].find("```\n").unwrap()];
        let visible: std::vec::Vec<&str> = block.lines().filter(|l| !(l.starts_with("# ") || *l == "#")).collect();
        let example = include_str!("../examples/firmware.rs");
        let body: std::vec::Vec<&str> = example.lines().skip_while(|l| l.starts_with("//!") || l.is_empty()).collect();
        assert_eq!(body, visible, "examples/firmware.rs and the README's example differ");
    }
    extern crate std;
}
