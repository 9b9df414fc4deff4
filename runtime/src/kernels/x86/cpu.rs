//! Which build of the x86-64 kernels runs on this CPU, for each phase (prefill, decode) and
//! weight dtype: a table of the CPUs the project has measured, not the feature flags alone.
//!
//! Why a table: the AVX-512 kernels were tuned on an Intel Sapphire Rapids, where they win
//! everywhere. On an AMD Zen 4 (AVX-512 executed on 256-bit units) the same kernels decode at
//! half the speed of the AVX2 ones on the same chip, while they still win f32/f16 prefill
//! (issue 39's paired runs; BENCHMARKS.md, "Kernel choice per CPU"). The loss is in how the
//! 512-bit loads stream memory, which a calibration run on cached data at start-up would not
//! see, and a calibration on memory-sized data costs a second of start-up and is noisy on a
//! shared VM. A table is free at run time, the same on every run, and says in `host bench`
//! which row chose it. Every build gives the same bits (the kernels' twin tests), so the
//! choice changes speed only.
//!
//! Overrides, for measuring one path against the other: `GPT2_MCU_KERNELS=avx2|avx512|portable`
//! (auto when unset), and the older `GPT2_MCU_NO_AVX512=1` (= `avx2`).

extern crate std;
use core::fmt;

/// A build of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// 512-bit vectors (AVX-512F/BW; VNNI for q8/q4 in groups of 32, AMX tiles for prefill).
    Avx512,
    /// 256-bit vectors (AVX2 + F16C).
    Avx2,
    /// The portable loops (compiled for the baseline x86-64).
    Portable,
}

impl Build {
    /// Its name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Build::Avx512 => "AVX-512",
            Build::Avx2 => "AVX2",
            Build::Portable => "portable",
        }
    }
}

/// Who made the CPU (CPUID leaf 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// "GenuineIntel".
    Intel,
    /// "AuthenticAMD".
    Amd,
    /// Anyone else (Hygon, Zhaoxin, a hypervisor that hides it).
    Other,
}

/// What the table looks at: the CPU's identity and the vector extensions usable here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// Vendor.
    pub vendor: Vendor,
    /// Display family (base + extended), as `lscpu`'s "CPU family".
    pub family: u32,
    /// Display model (extended model in the high nibble for families 6 and 15+), as `lscpu`'s
    /// "Model".
    pub model: u32,
    /// AVX2 and F16C.
    pub avx2: bool,
    /// AVX-512F and BW.
    pub avx512: bool,
}

/// The weight dtypes, in the order of [`Choice::decode`] and [`Choice::prefill`].
pub const DTYPES: [&str; 4] = ["f32", "f16", "q8", "q4"];

/// The builds chosen for one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The table row that chose them.
    pub row: &'static str,
    /// One-token `linear` (decode), per dtype in [`DTYPES`] order.
    pub decode: [Build; 4],
    /// Multi-token `linear` (prefill), per dtype.
    pub prefill: [Build; 4],
    /// Attention, softmax and the elementwise activations (both phases).
    pub other: Build,
    /// Whether AVX2 decode prefetches `[f32 rows, f16 rows and q8 blocks]` in software: the
    /// second always; the first where Intel's Golden Cove wants it (f32 decode 23.9 -> 33.1
    /// tok/s) and not where AMD's Zen 3 does not (26-31 -> 22-23); see `decode_prefetch` in
    /// `kernels/x86.rs`.
    pub decode_prefetch: [bool; 2],
    /// From how many places at once AVX2 decode reads an `[f32, f16]` matrix (`for_fronts` in
    /// `kernels/x86.rs`). One AMD Zen 3 core reads memory faster from several streams far apart
    /// than from one, and f16 decode with them: `host bench --model gpt2-f16.blob --prompt-len
    /// 16 -n 64 --runs 3 --kv-dtype f16`, three alternated rounds, one place 70-77 tok/s, two
    /// 73-87, four 86-97 (two threads: 122-130, 124-144, 138-163). f32 rows stream as fast
    /// from one (42.5-44.8 tok/s; four 39-41), and q8/q4, whose kernels are near their
    /// in-cache rate, always read from one. Intel: 1, not measured.
    pub dense_fronts: [u8; 2],
}

impl Choice {
    fn all(row: &'static str, b: Build, vendor: Vendor) -> Self {
        let amd = vendor == Vendor::Amd;
        Choice { row, decode: [b; 4], prefill: [b; 4], other: b, decode_prefetch: [vendor == Vendor::Intel, true], dense_fronts: if amd { [1, 4] } else { [1, 1] } }
    }
}

/// A forced choice: `GPT2_MCU_KERNELS`, or `GPT2_MCU_NO_AVX512`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Force {
    /// The table decides.
    Auto,
    /// Every operation on this build (if the CPU has it; else the next narrower one).
    Only(Build),
}

/// The table. `cpu.avx512` / `cpu.avx2` are what the CPU has; a forced build narrower than
/// that is honoured, a wider one falls back to what the CPU has.
pub fn choose(cpu: Cpu, force: Force) -> Choice {
    let widest = if cpu.avx512 && cpu.avx2 {
        Build::Avx512
    } else if cpu.avx2 {
        Build::Avx2
    } else {
        Build::Portable
    };
    if let Force::Only(b) = force {
        let b = match (b, widest) {
            (Build::Portable, _) | (_, Build::Portable) => Build::Portable,
            (Build::Avx2, _) | (_, Build::Avx2) => Build::Avx2,
            _ => Build::Avx512,
        };
        return Choice::all("forced by GPT2_MCU_KERNELS / GPT2_MCU_NO_AVX512", b, cpu.vendor);
    }
    match widest {
        Build::Portable => Choice::all("no AVX2: the portable loops", Build::Portable, cpu.vendor),
        Build::Avx2 => Choice::all("AVX2 without AVX-512 (measured: AMD Zen 3, family 25 model 1)", Build::Avx2, cpu.vendor),
        Build::Avx512 if cpu.vendor == Vendor::Amd => {
            // Zen 4 (family 25 with AVX-512: models 0x10-0x1f Genoa/Raphael, 0x60-0x7f,
            // 0xa0-0xaf) measured in issue 39 (family 25 model 17, 2 vCPUs, one thread, tok/s,
            // AVX-512 / AVX2): decode f32 29.5 / 51.6, f16 48 / 96, q8 87 / 148, q4 141 / 225;
            // prefill f32 402 / 363, f16 406-420 / 372-412, q8 538-549 / 529-591 (two threads
            // 790 / 728), q4 492 / 647. So decode and q4 prefill on AVX2, the rest of prefill
            // on AVX-512. Zen 5 (family 26) is not measured; until it is it takes Zen 4's row,
            // whose AVX2 decode already streams at the memory bound. Decode reads an f16 matrix
            // from 4 places and an f32 one from 1, as on Zen 3 (measured there, not on a Zen 4).
            let (a, b) = (Build::Avx512, Build::Avx2);
            Choice { row: "AMD with AVX-512 (measured: Zen 4, family 25 model 17)", decode: [b; 4], prefill: [a, a, a, b], other: b, decode_prefetch: [false, true], dense_fronts: [1, 4] }
        }
        Build::Avx512 => Choice::all("AVX-512 (measured: Intel Sapphire Rapids, family 6 model 143)", Build::Avx512, cpu.vendor),
    }
}

/// This CPU, read once.
pub fn this_cpu() -> Cpu {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU.
    #[allow(unused_unsafe)]
    let (l0, l1) = unsafe { (__cpuid(0), __cpuid(1)) };
    let mut id = [0u8; 12];
    for (dst, r) in id.chunks_exact_mut(4).zip([l0.ebx, l0.edx, l0.ecx]) {
        dst.copy_from_slice(&r.to_le_bytes());
    }
    let vendor = match &id {
        b"GenuineIntel" => Vendor::Intel,
        b"AuthenticAMD" => Vendor::Amd,
        _ => Vendor::Other,
    };
    let (base_family, base_model) = ((l1.eax >> 8) & 0xf, (l1.eax >> 4) & 0xf);
    let (ext_family, ext_model) = ((l1.eax >> 20) & 0xff, (l1.eax >> 16) & 0xf);
    let family = if base_family == 0xf { base_family + ext_family } else { base_family };
    let model = if base_family == 0x6 || base_family == 0xf { (ext_model << 4) | base_model } else { base_model };
    Cpu {
        vendor,
        family,
        model,
        avx2: std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c"),
        avx512: std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw"),
    }
}

/// The override from the environment.
pub fn force_from_env() -> Force {
    let var = |k| std::env::var(k).ok();
    match var("GPT2_MCU_KERNELS").as_deref() {
        Some("avx512") => return Force::Only(Build::Avx512),
        Some("avx2") => return Force::Only(Build::Avx2),
        Some("portable") => return Force::Only(Build::Portable),
        _ => {}
    }
    match var("GPT2_MCU_NO_AVX512") {
        Some(v) if v != "0" => Force::Only(Build::Avx2),
        _ => Force::Auto,
    }
}

/// What this process runs: the CPU, the override and the table's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// This CPU.
    pub cpu: Cpu,
    /// The environment's override.
    pub force: Force,
    /// The table's choice for both.
    pub choice: Choice,
}

impl Chosen {
    /// Whether `b` may run at all here (the CPU has it and no override forbids it): the
    /// kernels' twin tests run every such build, whatever the table picks for dispatch.
    pub fn allows(&self, b: Build) -> bool {
        let wide = |b| match b {
            Build::Portable => 0,
            Build::Avx2 => 1,
            Build::Avx512 => 2,
        };
        let has = match b {
            Build::Portable => true,
            Build::Avx2 => self.cpu.avx2,
            Build::Avx512 => self.cpu.avx512 && self.cpu.avx2,
        };
        has && match self.force {
            Force::Auto => true,
            Force::Only(f) => wide(b) <= wide(f),
        }
    }
}

/// The choice for this process, asked once.
pub fn chosen() -> &'static Chosen {
    static CHOICE: std::sync::OnceLock<Chosen> = std::sync::OnceLock::new();
    CHOICE.get_or_init(|| {
        let (cpu, force) = (this_cpu(), force_from_env());
        let var = |k| std::env::var(k).ok();
        let choice = decode_overrides(choose(cpu, force), var("GPT2_MCU_DECODE_PREFETCH").as_deref(), var("GPT2_MCU_DECODE_FRONTS").as_deref());
        Chosen { cpu, force, choice }
    })
}

/// `c` with the decode overrides, for measuring one way against the other on one CPU:
/// `GPT2_MCU_DECODE_PREFETCH` `1` or `0` turns every AVX2 decode prefetch on or off, and
/// `GPT2_MCU_DECODE_FRONTS=N` (1-8) reads f32 and f16 matrices from N places. Other values
/// leave the table's.
pub fn decode_overrides(mut c: Choice, prefetch: Option<&str>, fronts: Option<&str>) -> Choice {
    match prefetch {
        Some("1") => c.decode_prefetch = [true; 2],
        Some("0") => c.decode_prefetch = [false; 2],
        _ => {}
    }
    if let Some(k) = fronts.and_then(|v| v.parse::<u8>().ok()) {
        c.dense_fronts = [k.clamp(1, 8); 2];
    }
    c
}

/// What runs here, for reports: `kernels: AMD family 25 model 1 (AVX2): row "…": decode f32 …`.
pub struct Report;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Chosen { cpu, choice: c, .. } = chosen();
        let vendor = match cpu.vendor {
            Vendor::Intel => "Intel",
            Vendor::Amd => "AMD",
            Vendor::Other => "x86-64",
        };
        let has = if cpu.avx512 {
            "AVX-512"
        } else if cpu.avx2 {
            "AVX2, no AVX-512"
        } else {
            "no AVX2"
        };
        write!(f, "{vendor} family {} model {} ({has}); table row \"{}\": ", cpu.family, cpu.model, c.row)?;
        let [f32_fronts, f16_fronts] = c.dense_fronts;
        let fronts = if f32_fronts > 1 || f16_fronts > 1 { std::format!("; decode reads an f16 matrix from {f16_fronts} places at once (f32: {f32_fronts})") } else { std::string::String::new() };
        if c.decode.iter().chain(&c.prefill).all(|&b| b == c.other) {
            return write!(f, "{} for every dtype and phase{fronts}", c.other.name());
        }
        write!(f, "decode")?;
        for (d, b) in DTYPES.iter().zip(c.decode) {
            write!(f, " {d} {}", b.name())?;
        }
        write!(f, "; prefill")?;
        for (d, b) in DTYPES.iter().zip(c.prefill) {
            write!(f, " {d} {}", b.name())?;
        }
        write!(f, "; attention {}{fronts}", c.other.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEN3: Cpu = Cpu { vendor: Vendor::Amd, family: 25, model: 1, avx2: true, avx512: false };
    const ZEN4: Cpu = Cpu { vendor: Vendor::Amd, family: 25, model: 17, avx2: true, avx512: true };
    const SPR: Cpu = Cpu { vendor: Vendor::Intel, family: 6, model: 143, avx2: true, avx512: true };
    const OLD: Cpu = Cpu { vendor: Vendor::Intel, family: 6, model: 23, avx2: false, avx512: false };

    #[test]
    fn each_measured_cpu_gets_its_faster_path() {
        let zen3 = choose(ZEN3, Force::Auto);
        assert_eq!((zen3.decode, zen3.prefill, zen3.other), ([Build::Avx2; 4], [Build::Avx2; 4], Build::Avx2));
        // Zen 4: AVX2 decodes 1.6-2x faster; AVX-512 wins f32/f16/q8 prefill, AVX2 q4 prefill
        let zen4 = choose(ZEN4, Force::Auto);
        assert_eq!(zen4.decode, [Build::Avx2; 4]);
        assert_eq!(zen4.prefill, [Build::Avx512, Build::Avx512, Build::Avx512, Build::Avx2]);
        assert_eq!(zen4.other, Build::Avx2);
        let spr = choose(SPR, Force::Auto);
        assert_eq!((spr.decode, spr.prefill, spr.other), ([Build::Avx512; 4], [Build::Avx512; 4], Build::Avx512));
        assert_eq!(choose(OLD, Force::Auto), Choice::all(choose(OLD, Force::Auto).row, Build::Portable, Vendor::Intel));
        assert_eq!((spr.decode_prefetch, zen3.decode_prefetch, zen4.decode_prefetch), ([true; 2], [false, true], [false, true]));
        assert_eq!((zen3.dense_fronts, zen4.dense_fronts, spr.dense_fronts), ([1, 4], [1, 4], [1, 1]));
    }

    #[test]
    fn decode_overrides_set_prefetch_and_places() {
        let zen3 = choose(ZEN3, Force::Auto);
        assert_eq!(decode_overrides(zen3, None, None), zen3);
        let on = decode_overrides(zen3, Some("1"), Some("2"));
        assert_eq!((on.decode_prefetch, on.dense_fronts), ([true; 2], [2, 2]));
        let off = decode_overrides(zen3, Some("0"), Some("99"));
        assert_eq!((off.decode_prefetch, off.dense_fronts), ([false; 2], [8, 8]));
        let odd = decode_overrides(zen3, Some("yes"), Some("0"));
        assert_eq!((odd.decode_prefetch, odd.dense_fronts), (zen3.decode_prefetch, [1, 1]));
        assert_eq!(decode_overrides(zen3, None, Some("four")).dense_fronts, zen3.dense_fronts);
    }

    #[test]
    fn forcing_never_picks_what_the_cpu_lacks() {
        for cpu in [ZEN3, ZEN4, SPR, OLD] {
            for b in [Build::Avx512, Build::Avx2, Build::Portable] {
                let c = choose(cpu, Force::Only(b));
                let got = c.decode[0];
                assert!(c.decode.iter().chain(&c.prefill).all(|&x| x == got) && c.other == got, "{cpu:?} {b:?}");
                let ok = match got {
                    Build::Avx512 => cpu.avx512 && b == Build::Avx512,
                    Build::Avx2 => cpu.avx2 && (b == Build::Avx2 || !cpu.avx512),
                    Build::Portable => b == Build::Portable || !cpu.avx2,
                };
                assert!(ok, "{cpu:?} forced {b:?} got {got:?}");
            }
        }
    }

    #[test]
    fn this_cpu_reads_a_plausible_identity() {
        let cpu = this_cpu();
        assert!(cpu.family >= 6, "{cpu:?}");
        assert!(!cpu.avx512 || cpu.avx2, "{cpu:?}");
        let text = std::format!("{Report}");
        assert!(text.contains("family") && text.contains("table row"), "{text}");
    }
}
