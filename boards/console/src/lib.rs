#![doc = include_str!("../README.md")]
#![no_std]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

pub mod command;
mod console;
pub mod line;
pub mod ring;
pub mod text;

pub use console::{
    Console, Exit, Meter, Settings, Template, TemplateError, Unit, BUFFER_BYTES, DEFAULT_TEMPLATE, EOT, LINE_BYTES, MAX_TOKENS,
    PROMPT_MARKER, TEMPLATE_BYTES, TURN_BYTES,
};
