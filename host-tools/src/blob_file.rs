//! Loading a blob file into memory aligned the way the runtime reads it in place, and
//! checking its CRC-32 with a fast implementation before the runtime's structural checks.

use std::path::Path;

use anyhow::{bail, Context, Result};
use runtime::blob::{self, Preamble};
use runtime::Model;

/// A blob held in 16-byte aligned memory (the runtime borrows its tensors in place).
pub struct BlobFile {
    words: Vec<u128>,
    len: usize,
}

impl BlobFile {
    /// Reads `path` into aligned memory.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read blob {}", path.display()))?;
        Ok(Self::from_bytes(&bytes))
    }

    /// Copies `bytes` into aligned memory.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self { words, len: bytes.len() }
    }

    /// The blob bytes (16-byte aligned).
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }

    /// Mutable access (tests flip bits with it).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u128, u8>(&mut self.words)[..self.len]
    }

    /// CRC-32 check with `crc32fast` (several GB/s), then the runtime's full validation.
    pub fn model(&self) -> Result<Model<'_>> {
        let bytes = self.bytes();
        verify_checksum(bytes)?;
        Model::from_blob_prechecked(bytes).map_err(|e| anyhow::anyhow!("invalid blob: {e}"))
    }
}

/// Returns `(stored, computed)` CRC-32 of a blob (errors only if the preamble is unreadable).
pub fn checksums(bytes: &[u8]) -> Result<(u32, u32)> {
    let pre = Preamble::parse(bytes).map_err(|e| anyhow::anyhow!("invalid blob: {e}"))?;
    let covered = &bytes[blob::CRC_START..pre.file_len as usize];
    Ok((pre.crc32, crc32fast::hash(covered)))
}

/// Fails with the runtime's `ChecksumMismatch` message when the CRC does not hold.
pub fn verify_checksum(bytes: &[u8]) -> Result<()> {
    let (stored, computed) = checksums(bytes)?;
    if stored != computed {
        bail!("invalid blob: {}", runtime::Error::ChecksumMismatch { stored, computed });
    }
    Ok(())
}
