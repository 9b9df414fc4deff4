//! Malformed blobs: every corruption is rejected with a specific error, never a panic or an
//! out-of-bounds read (the runtime only borrows checked ranges).

use host_tools::blob_file::BlobFile;
use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::blob::{self, Preamble};
use runtime::{Error, Model};

fn tiny_blob() -> Vec<u8> {
    convert_dir(&fixture_dir("tiny"), WeightDType::F32).bytes().to_vec()
}

fn load(bytes: &[u8]) -> Result<(), Error> {
    let f = BlobFile::from_bytes(bytes);
    Model::from_blob(f.bytes()).map(|_| ())
}

/// Rewrites the preamble's CRC so a deliberate corruption gets past the checksum and reaches
/// the structural checks.
fn fix_crc(bytes: &mut [u8]) {
    let Ok(mut pre) = Preamble::parse(bytes) else { return };
    pre.crc32 = blob::crc32(&bytes[blob::CRC_START..pre.file_len as usize]);
    bytes[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
}

#[test]
fn valid_blob_loads() {
    assert_eq!(load(&tiny_blob()), Ok(()));
}

#[test]
fn empty_and_wrong_magic() {
    assert_eq!(load(&[]), Err(Error::Truncated { needed: 32, available: 0 }));
    let mut b = tiny_blob();
    b[0] = b'X';
    assert!(matches!(load(&b), Err(Error::BadMagic { .. })));
}

#[test]
fn future_version() {
    let mut b = tiny_blob();
    for version in [0u32, 4, 0xFFFF_FFFF] {
        b[8..12].copy_from_slice(&version.to_le_bytes());
        assert_eq!(load(&b), Err(Error::UnsupportedVersion { found: version, supported: 3 }));
    }
}

#[test]
fn truncated_at_every_length() {
    let b = tiny_blob();
    for len in 0..b.len() {
        let r = load(&b[..len]);
        assert!(matches!(r, Err(Error::Truncated { .. }) | Err(Error::BadMagic { .. })), "length {len}: {r:?}");
    }
}

#[test]
fn every_flipped_bit_in_a_sample_is_caught_by_the_checksum() {
    let b = tiny_blob();
    // every byte of the header, and a spread of bytes through the data
    let picks: Vec<usize> = (16..200).chain((200..b.len()).step_by(97)).collect();
    for &i in &picks {
        let mut c = b.clone();
        c[i] ^= 0x10;
        let r = load(&c);
        assert!(r.is_err(), "flip at byte {i} was accepted");
    }
}

#[test]
fn header_claiming_more_than_the_file() {
    let mut b = tiny_blob();
    let mut pre = Preamble::parse(&b).unwrap();
    pre.file_len = b.len() as u64 + 1;
    b[..32].copy_from_slice(&pre.to_bytes());
    assert_eq!(load(&b), Err(Error::Truncated { needed: b.len() as u64 + 1, available: b.len() as u64 }));
    let mut pre = Preamble::parse(&tiny_blob()).unwrap();
    pre.header_len = u32::MAX;
    b[..32].copy_from_slice(&pre.to_bytes());
    assert!(matches!(load(&b), Err(Error::Truncated { .. })));
    pre.file_len = u64::MAX;
    b[..32].copy_from_slice(&pre.to_bytes());
    assert!(matches!(load(&b), Err(Error::Truncated { .. })));
}

/// With the CRC fixed up, random corruption of the header must still be rejected cleanly (or
/// accepted only when it decodes to a consistent model) — never a panic.
#[test]
fn corrupted_header_with_valid_crc_never_panics() {
    let b = tiny_blob();
    let header_end = 32 + Preamble::parse(&b).unwrap().header_len as usize;
    let mut seed = 0x2545F4914F6CDD1Du64;
    for _ in 0..3000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut c = b.clone();
        let at = 16 + (seed as usize % (header_end - 16));
        c[at] = (seed >> 32) as u8;
        fix_crc(&mut c);
        let _ = load(&c); // must return, Ok or Err
    }
}

#[test]
fn misaligned_buffer() {
    let b = tiny_blob();
    let f = BlobFile::from_bytes(&[&[0u8][..], &b].concat());
    let shifted = &f.bytes()[1..];
    assert!(matches!(Model::from_blob(shifted), Err(Error::Misaligned { required: 16, .. })));
}

#[test]
fn session_buffers_one_element_too_small() {
    let f = BlobFile::from_bytes(&tiny_blob());
    let model = f.model().unwrap();
    let s = runtime::SessionSizes::new(model.config(), 32, 1);
    let (mut arena, mut kv) = (vec![0.0; s.arena_len - 1], vec![0.0; s.kv_len]);
    let err = runtime::Session::new(&model, &mut arena, &mut kv, 32).err();
    assert_eq!(err, Some(Error::ArenaTooSmall { needed: s.arena_len, available: s.arena_len - 1 }));
    let (mut arena, mut kv) = (vec![0.0; s.arena_len], vec![0.0; s.kv_len - 1]);
    let err = runtime::Session::new(&model, &mut arena, &mut kv, 32).err();
    assert_eq!(err, Some(Error::KvCacheTooSmall { needed: s.kv_len, available: s.kv_len - 1 }));
    let err = runtime::Session::new(&model, &mut arena, &mut kv, 33).err();
    assert_eq!(err, Some(Error::BadCapacity { requested: 33, n_ctx: 32 }));
}
