//! The boards `host-tools plan` and `host --board` know: their memory regions and what each
//! region holds. This table is the one place these figures live.
//!
//! Sizes are the chip's (or QEMU machine's) on-chip memory as its datasheet states it, in the
//! binary units datasheets mean (`520 KB` = 520 × 1024 B). Every board puts the four parts of the
//! firmware somewhere:
//!
//! | part | what | where it comes from |
//! |---|---|---|
//! | [`Part::Code`] | vector table, code, constants | estimate ([`crate::plan::CODE_BYTES`]) |
//! | [`Part::Model`] | the blob, read in place (`.model`) | the blob's length, 64-byte aligned |
//! | [`Part::Buffers`] | arena, KV cache, token window | `runtime::SessionSizes` |
//! | [`Part::Stack`] | the stack and the other statics | estimate ([`crate::plan::STACK_BYTES`]) |

use std::fmt;

/// Flash (read-only at run time: code and the model) or RAM (run state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Holds code and/or the model.
    Flash,
    /// Holds the run state and/or the stack.
    Ram,
}

impl Memory {
    /// `flash` or `RAM`.
    pub const fn name(self) -> &'static str {
        match self {
            Memory::Flash => "flash",
            Memory::Ram => "RAM",
        }
    }
}

/// A part of the firmware image or of its run state, placed in one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Vector table, code and constants.
    Code,
    /// The model blob (`.model`).
    Model,
    /// Arena, KV cache and token window (the statics `firmware-common` boards declare).
    Buffers,
    /// The stack and the other statics (`.data`, `.bss`).
    Stack,
}

/// A contiguous memory region of a board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Name, as in the board's memory.x where there is one (`FLASH`, `RAM`, `QSPI`, ...).
    pub name: &'static str,
    /// Flash or RAM.
    pub memory: Memory,
    /// Size in bytes.
    pub bytes: u64,
    /// What the firmware puts there.
    pub holds: &'static [Part],
    /// The hardware behind it, for the report.
    pub what: &'static str,
}

impl Region {
    /// The usual single-memory layout's flash: the region "FLASH", holding the model and code.
    const fn flash(bytes: u64, what: &'static str) -> Self {
        Region { name: "FLASH", memory: Memory::Flash, bytes, holds: &[Part::Model, Part::Code], what }
    }

    /// The usual single-memory layout's RAM: the region "RAM", holding the buffers and stack.
    const fn ram(bytes: u64, what: &'static str) -> Self {
        Region { name: "RAM", memory: Memory::Ram, bytes, holds: &[Part::Buffers, Part::Stack], what }
    }
}

/// A board: a name and its memory regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Board {
    /// The name `--board` takes.
    pub name: &'static str,
    /// Chip or machine, for the report.
    pub chip: &'static str,
    /// Its regions; each [`Part`] is in exactly one of them.
    pub regions: &'static [Region],
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The known boards.
pub const BOARDS: &[Board] = &[
    // Arm MPS2 FPGA image AN386 (Cortex-M4F) as QEMU 7.2 models it (hw/arm/mps2.c; AN386
    // application note). Same regions as boards/qemu-m4/memory.x: the 4 MB ZBT SSRAM1 plays the
    // role of flash (code and the blob), the 4 MB SSRAM2&3 is data memory (statics, buffers in
    // `.uninit`, the stack at the top).
    Board {
        name: "qemu-m4",
        chip: "QEMU mps2-an386, Cortex-M4F",
        regions: &[
            Region::flash(4 * MIB, "ZBT SSRAM1, code memory"),
            Region::ram(4 * MIB, "ZBT SSRAM2&3, data memory"),
        ],
    },
    // Arm MPS3 FPGA image AN547 (Corstone-300, Cortex-M55) as QEMU 7.2 models it
    // (hw/arm/mps2-tz.c; AN547 application note). Same regions as boards/qemu-m55/memory.x and
    // build.rs: code in the 512 KB ITCM, the blob in the 8 MB QSPI flash (`.model`), arena, KV
    // cache and token window in the 4 MB SSE-300 SRAM (`.sram`), small statics and the stack in
    // the 512 KB DTCM.
    Board {
        name: "qemu-m55",
        chip: "QEMU mps3-an547, Cortex-M55",
        regions: &[
            Region { name: "FLASH", memory: Memory::Flash, bytes: 512 * KIB, holds: &[Part::Code], what: "ITCM" },
            Region { name: "QSPI", memory: Memory::Flash, bytes: 8 * MIB, holds: &[Part::Model], what: "QSPI flash" },
            Region { name: "SRAM", memory: Memory::Ram, bytes: 4 * MIB, holds: &[Part::Buffers], what: "SSE-300 SRAM" },
            Region { name: "RAM", memory: Memory::Ram, bytes: 512 * KIB, holds: &[Part::Stack], what: "DTCM" },
        ],
    },
    // Raspberry Pi Pico 2: RP2350 (RP2350 datasheet, "520 kB on-chip SRAM": SRAM0-7, 8 x 64 KB
    // striped, then SRAM8-9, 2 x 4 KB, one contiguous range from 0x2000_0000) and a 4 MB QSPI
    // flash chip on the board (Pico 2 datasheet: W25Q32RV), executed and read in place through
    // the XIP window at 0x1000_0000.
    Board {
        name: "pico2",
        chip: "RP2350, Cortex-M33",
        regions: &[
            Region::flash(4 * MIB, "QSPI flash, XIP"),
            Region::ram(520 * KIB, "SRAM0-9"),
        ],
    },
    // The 16 MB flash / 8 MB PSRAM class, as on the Pimoroni Pico Plus 2 (boards/pico-plus2):
    // RP2350B, a 16 MB QSPI flash on QMI chip select 0 (code and the blob, read in place through
    // XIP at 0x1000_0000) and an 8 MB APS6404L QSPI PSRAM on chip select 1 (arena, KV cache and
    // token window, through XIP window 1 at 0x1100_0000); the 520 KB SRAM keeps the stack and
    // the small statics. Same regions as boards/pico-plus2/memory.x.
    Board {
        name: "pico-plus2",
        chip: "RP2350B, Cortex-M33",
        regions: &[
            Region::flash(16 * MIB, "QSPI flash, XIP"),
            Region { name: "PSRAM", memory: Memory::Ram, bytes: 8 * MIB, holds: &[Part::Buffers], what: "QSPI PSRAM, XIP window 1" },
            Region { name: "RAM", memory: Memory::Ram, bytes: 520 * KIB, holds: &[Part::Stack], what: "SRAM0-9" },
        ],
    },
    // Nordic nRF52840 DK: nRF52840 (nRF52840 Product Specification: 1 MB flash at 0x0, 256 KB
    // RAM at 0x2000_0000). Bare metal: no SoftDevice, which would take flash and RAM of its own.
    Board {
        name: "nrf52840-dk",
        chip: "nRF52840, Cortex-M4F",
        regions: &[
            Region::flash(MIB, "internal flash"),
            Region::ram(256 * KIB, "internal RAM"),
        ],
    },
    // ST NUCLEO-F446RE: STM32F446RE (datasheet DS10693: 512 KB flash at 0x0800_0000, 128 KB
    // SRAM = SRAM1 112 KB + SRAM2 16 KB, contiguous from 0x2000_0000). A reference point for a
    // small part.
    Board {
        name: "nucleo-f446re",
        chip: "STM32F446RE, Cortex-M4F",
        regions: &[
            Region::flash(512 * KIB, "internal flash"),
            Region::ram(128 * KIB, "SRAM1 + SRAM2"),
        ],
    },
    // ST STM32F746G-DISCO: STM32F746NG (datasheet DS10916: 1 MB flash at 0x0800_0000, 320 KB
    // SRAM = DTCM 64 KB + SRAM1 240 KB + SRAM2 16 KB, contiguous from 0x2000_0000). The board's
    // 16 MB QSPI flash and SDRAM are not counted (a larger model could go there).
    Board {
        name: "stm32f746g-disco",
        chip: "STM32F746NG, Cortex-M7",
        regions: &[
            Region::flash(MIB, "internal flash"),
            Region::ram(320 * KIB, "DTCM + SRAM1 + SRAM2"),
        ],
    },
];

/// `--board NAME` named no known board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownBoard(pub String);

impl fmt::Display for UnknownBoard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown board {:?}; known boards: {}", self.0, names().join(", "))
    }
}

impl std::error::Error for UnknownBoard {}

/// The names of the known boards, in table order.
pub fn names() -> Vec<&'static str> {
    BOARDS.iter().map(|b| b.name).collect()
}

/// The board called `name`.
pub fn find(name: &str) -> Result<&'static Board, UnknownBoard> {
    BOARDS.iter().find(|b| b.name == name).ok_or_else(|| UnknownBoard(name.to_string()))
}

/// One line per board: name, chip, flash and RAM regions, for `plan --list-boards`.
pub fn list() -> String {
    let mut s = String::new();
    for b in BOARDS {
        let of = |memory: Memory| -> String {
            let regions = b.regions.iter().filter(|r| r.memory == memory);
            regions.map(|r| format!("{} {} ({})", size_text(r.bytes), r.name, r.what)).collect::<Vec<_>>().join(" + ")
        };
        s.push_str(&format!("{:<17} {:<28} flash: {}; RAM: {}\n", b.name, b.chip, of(Memory::Flash), of(Memory::Ram)));
    }
    s
}

/// `4 MiB`, `520 KiB` or `1000 B`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Parses a byte count: a plain number (`1048576`, `0x100000`) or one with a binary suffix
/// `K`/`KiB` (× 1024) or `M`/`MiB` (× 1024²), as memory.x and datasheets use them (`520K`,
/// `4MiB`, `1 M`). Case-insensitive; `_` separates digits.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let (digits, scale) = [("kib", KIB), ("mib", MIB), ("k", KIB), ("m", MIB)]
        .iter()
        .find_map(|(suffix, scale)| lower.strip_suffix(suffix).map(|d| (d.trim_end(), *scale)))
        .unwrap_or((lower.as_str(), 1));
    let digits = digits.replace('_', "");
    let value = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => digits.parse::<u64>().ok(),
    };
    value
        .and_then(|v| v.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a byte count (a number, optionally with K, KiB, M or MiB)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_board_places_each_part_once() {
        for b in BOARDS {
            for part in [Part::Code, Part::Model, Part::Buffers, Part::Stack] {
                let n = b.regions.iter().filter(|r| r.holds.contains(&part)).count();
                assert_eq!(n, 1, "{}: {part:?} is in {n} regions", b.name);
            }
            for r in b.regions {
                let flash_part = r.holds.iter().any(|p| matches!(p, Part::Code | Part::Model));
                assert_eq!(flash_part, r.memory == Memory::Flash, "{} {}: flash parts in RAM or the reverse", b.name, r.name);
            }
        }
        let mut names = names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BOARDS.len(), "duplicate board names");
    }

    #[test]
    fn datasheet_figures() {
        let ram = |name| find(name).unwrap().regions.iter().filter(|r| r.memory == Memory::Ram).map(|r| r.bytes).sum::<u64>();
        assert_eq!(ram("pico2"), 532_480);
        assert_eq!(ram("nrf52840-dk"), 262_144);
        assert_eq!(ram("nucleo-f446re"), 131_072);
        assert_eq!(ram("stm32f746g-disco"), 327_680);
    }

    #[test]
    fn unknown_board_lists_the_names() {
        let e = find("arduino-uno").unwrap_err().to_string();
        assert!(e.starts_with("unknown board \"arduino-uno\"; known boards: qemu-m4, qemu-m55, pico2"), "{e}");
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("520KiB"), Ok(532_480));
        assert_eq!(parse_bytes("4M"), Ok(4 << 20));
        assert_eq!(parse_bytes("4 MiB"), Ok(4 << 20));
        assert_eq!(parse_bytes("256k"), Ok(256 << 10));
        assert_eq!(parse_bytes("0x40000"), Ok(256 << 10));
        assert_eq!(parse_bytes("1_000"), Ok(1000));
        for bad in ["", "K", "12Q", "-1", "1.5M", "99999999999999999999M"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} parsed");
        }
    }
}
