//! `host-tools inspect` on a blob whose checksum does not match: the report is printed (with
//! MISMATCH on its checksum line) and the command exits non-zero with one error line naming both
//! checksums, so that a script cannot take a corrupt blob for a good one.

use std::path::Path;
use std::process::Command;

#[test]
fn a_checksum_mismatch_prints_the_report_and_fails() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let good = std::fs::read(root.join("models/default/model-q8.blob")).unwrap();
    let dir = std::env::temp_dir().join(format!("inspect-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |bytes: &[u8]| {
        let path = dir.join("b.blob");
        std::fs::write(&path, bytes).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_host-tools")).args(["inspect", path.to_str().unwrap()]).output().unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (ok, report, _) = run(&good);
    assert!(ok && report.contains("checksum: CRC-32") && report.contains(" OK"), "{report}");
    // one byte of the weights changed: the header still parses, the CRC-32 does not match
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    let (ok, report, err) = run(&bad);
    assert!(!ok, "a corrupt blob must fail inspect");
    assert!(report.contains("MISMATCH (computed"), "the report is still printed: {report}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("checksum mismatch: stored CRC-32 0x") && err.contains("(the file is corrupt)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
