//! Loading a blob file into memory aligned the way the runtime reads it in place, and
//! checking its CRC-32 with a fast implementation before the runtime's structural checks.

use std::path::Path;

use anyhow::{bail, Context, Result};
use runtime::blob::{self, Preamble};
use runtime::Model;

/// A blob held in page-aligned memory (the runtime borrows its tensors in place).
pub struct BlobFile {
    mem: HugeMem,
}

impl BlobFile {
    /// Reads `path` into aligned memory.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read blob {}", path.display()))?;
        Ok(Self::from_bytes(&bytes))
    }

    /// Copies `bytes` into aligned memory.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut mem = HugeMem::zeroed(bytes.len());
        mem.bytes_mut().copy_from_slice(bytes);
        Self { mem }
    }

    /// The blob bytes (16-byte aligned).
    pub fn bytes(&self) -> &[u8] {
        self.mem.bytes()
    }

    /// Mutable access (tests flip bits with it).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.bytes_mut()
    }

    /// See [`HugeMem::huge_page_bytes`].
    pub fn huge_page_bytes(&self) -> Option<u64> {
        self.mem.huge_page_bytes()
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

/// Zeroed memory for what decode streams through (the blob's weights, the KV cache): an
/// anonymous mapping that asks Linux for transparent huge pages (`madvise(MADV_HUGEPAGE)`;
/// this machine's THP setting is `madvise`, so plain heap memory gets 4 KiB pages). With 2 MiB
/// pages the weight stream crosses a page, where the hardware prefetcher stops and the TLB
/// misses, 512 times less often: `host bench` decode, 6 alternating pairs, q4 118-138 ->
/// 137-150 tok/s, q8 70-88 -> 74-100 (BENCHMARKS.md). Page-aligned; on heap words (16-byte
/// aligned) when the mapping cannot be made.
pub struct HugeMem {
    mem: Memory,
    len: usize,
}

/// Where a [`HugeMem`]'s bytes live.
enum Memory {
    Map(memmap2::MmapMut),
    Words(Vec<u128>),
}

impl HugeMem {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let mem = match memmap2::MmapOptions::new().len(len.max(1)).map_anon() {
            Ok(map) => {
                // advice only: without huge pages the memory is the same, on smaller pages
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                Memory::Map(map)
            }
            Err(_) => Memory::Words(vec![0u128; len.div_ceil(16)]),
        };
        Self { mem, len }
    }

    /// `len` zero f32s.
    pub fn zeroed_f32(len: usize) -> Self {
        Self::zeroed(len * 4)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.mem {
            Memory::Map(m) => &m[..self.len],
            Memory::Words(w) => &bytemuck::cast_slice::<u128, u8>(w)[..self.len],
        }
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.mem {
            Memory::Map(m) => &mut m[..self.len],
            Memory::Words(w) => &mut bytemuck::cast_slice_mut::<u128, u8>(w)[..self.len],
        }
    }

    /// Bytes of this memory the kernel backs with huge pages (`AnonHugePages` of its mapping
    /// in `/proc/self/smaps`); None off Linux or when it cannot be read.
    pub fn huge_page_bytes(&self) -> Option<u64> {
        let Memory::Map(map) = &self.mem else { return Some(0) };
        let addr = map.as_ptr() as u64;
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            // a mapping's header: "start-end perms offset dev inode [path]", addresses in hex
            let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
            if let Some((a, b)) = range.and_then(|(a, b)| Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))) {
                inside = (a..b).contains(&addr);
            } else if inside {
                if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                    return kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kb| kb * 1024);
                }
            }
        }
        None
    }

    /// The memory as f32s (page- or 16-byte aligned, so the cast cannot fail).
    pub fn f32s_mut(&mut self) -> &mut [f32] {
        let n = self.len / 4 * 4;
        bytemuck::cast_slice_mut(&mut self.bytes_mut()[..n])
    }
}
