#![doc = include_str!("../README.md")]

pub mod accuracy;
pub mod blob_file;
pub mod blob_writer;
pub mod boards;
pub mod convert;
pub mod eval;
pub mod hf;
pub mod inspect;
pub mod npy;
pub mod plan;
pub mod random;
pub mod tokenizer_pack;
pub mod trace;
pub mod trace_page;
