//! The runtime's no_std GPT-2 tokenizer against tiktoken's `r50k_base` (GPT-2's encoding).
//!
//! The tables come from `tests/fixtures/gpt2-tokenizer/` (GPT-2's `vocab.json` and `merges.txt`,
//! see the README there), packed by `host_tools::tokenizer_pack` exactly as the converter does.
//! Run: `cargo test -p reference-tests --test tokenizer_parity`.
//!
//! Unicode versions. The runtime classifies characters with `unicode-properties` (Unicode
//! 18.0 in 0.1.5); tiktoken-rs uses `fancy-regex`, whose `\p{L}`, `\p{N}` and `\s` come from
//! `regex-syntax` (Unicode 16.0 in 0.8.12). Code points first assigned as letters or numbers in
//! Unicode 17 or 18 are therefore `\p{L}`/`\p{N}` for the runtime and "other" for tiktoken, and
//! the two tokenizers legitimately split text containing them differently.
//! [`unicode_classes_agree_wherever_both_unicode_versions_assign_the_code_point`] checks every
//! `char` and proves those are the only differences; the random tests draw characters from the
//! rest.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use fancy_regex::Regex;
use proptest::prelude::*;
use runtime::tokenizer::pretokenize::{class_of, Class, Pieces};
use runtime::tokenizer::{Tokenizer, Utf8Stream};
use runtime::Error;
use tiktoken_rs::CoreBPE;

// ---- fixtures -------------------------------------------------------------------------------

fn fixture_dir() -> &'static Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpt2-tokenizer"))
}

/// GPT-2's tables packed into a runtime section (once per test binary).
fn gpt2_section() -> &'static [u8] {
    static SECTION: OnceLock<Vec<u8>> = OnceLock::new();
    SECTION.get_or_init(|| {
        host_tools::tokenizer_pack::pack_from_dir(fixture_dir()).expect("packing the GPT-2 fixture").unwrap_or_else(
            || panic!("no vocab.json + merges.txt in {}; see the README there", fixture_dir().display()),
        )
    })
}

fn gpt2() -> Tokenizer<'static> {
    Tokenizer::from_bytes(gpt2_section()).expect("the packed GPT-2 section loads")
}

fn tiktoken() -> &'static CoreBPE {
    tiktoken_rs::r50k_base_singleton()
}

/// Encodes with a buffer of `text.len()` slots (always enough).
fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
    let mut out = vec![0; text.len()];
    let n = tok.encode(text, &mut out).unwrap_or_else(|e| panic!("encode({text:?}) failed: {e}"));
    out.truncate(n);
    out
}

fn decode(tok: &Tokenizer<'_>, ids: &[u32]) -> Vec<u8> {
    let needed: usize = ids.iter().map(|&id| tok.token_bytes(id).map_or(0, <[u8]>::len)).sum();
    let mut out = vec![0; needed];
    let n = tok.decode(ids, &mut out).expect("decode");
    assert_eq!(n, needed);
    out
}

/// Encodes with the runtime and with tiktoken, and checks ids and the round trip.
fn assert_parity(tok: &Tokenizer<'_>, reference: &CoreBPE, text: &str) {
    let ours = encode(tok, text);
    let theirs = reference.encode_ordinary(text);
    assert_eq!(ours, theirs, "ids differ for {text:?}");
    assert_eq!(decode(tok, &ours), text.as_bytes(), "round trip of {text:?}");
}

// ---- pre-tokenizer vs the regexes -------------------------------------------------------------

/// GPT-2's pattern as written in `encoder.py`.
const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// tiktoken's faster but equivalent rewrite, used by tiktoken-rs's `r50k_base`.
const TIKTOKEN_PATTERN: &str = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s";

fn regex_pieces(pattern: &'static str, text: &str) -> Vec<String> {
    static CACHE: OnceLock<[Regex; 2]> = OnceLock::new();
    let [gpt2, tiktoken] =
        CACHE.get_or_init(|| [Regex::new(GPT2_PATTERN).unwrap(), Regex::new(TIKTOKEN_PATTERN).unwrap()]);
    let re = if pattern == GPT2_PATTERN { gpt2 } else { tiktoken };
    re.find_iter(text).map(|m| m.unwrap().as_str().to_string()).collect()
}

fn assert_pieces_match_regexes(text: &str) {
    let ours: Vec<String> = Pieces::new(text).map(str::to_string).collect();
    assert_eq!(ours, regex_pieces(GPT2_PATTERN, text), "pieces of {text:?} vs GPT-2's regex");
    assert_eq!(ours, regex_pieces(TIKTOKEN_PATTERN, text), "pieces of {text:?} vs tiktoken's regex");
}

// ---- the fixed corpus ---------------------------------------------------------------------------

const CORPUS: &[&str] = &[
    "",
    "cat sat",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "someunknownPlace",
    "SolidGoldMagikarp and  petertodd",
    // Contractions, and the upper-case forms GPT-2 does not special-case.
    "it's don't we're you've I'm we'll he'd",
    "IT'S DON'T WE'RE YOU'VE I'M WE'LL HE'D",
    "'s 't 're 've 'm 'll 'd ' '' ''' 'x 'S rock'n'roll",
    "“smart quotes” ‘single’ — dashes – and … ellipses",
    // Whitespace: runs, tabs, newlines, CRLF, trailing, whitespace only.
    "a  b   c    d",
    "tab\tseparated\t\tvalues\t",
    "line one\nline two\n\nline four\n\n\n",
    "windows\r\nline\r\nendings\r\n",
    "trailing spaces   ",
    " leading space",
    "   ",
    "\n",
    "\t",
    " \n \t \r\n  ",
    "\u{a0}no-break\u{a0}\u{a0}space\u{3000}ideographic\u{2003}em\u{2028}ls\u{85}nel",
    "\u{b}vertical\u{c}formfeed\u{1c}\u{1d}\u{1e}\u{1f}info separators",
    // Numbers.
    "1234567",
    "3.14159",
    "1,000,000",
    "0x1F600 1e-9 -42 +7 2024-01-01 12:30:45",
    "٣٤٥ ۱۲۳ ४५६ 一二三 Ⅻ ½ ² ①",
    // Accents and combining marks.
    "précédent",
    "Ångström",
    "e\u{301}te\u{301} A\u{30a}ngstro\u{308}m",
    "naïve café façade Œuvre Straße",
    // Korean, CJK, Arabic, Hindi, Thai, Cyrillic, Greek.
    "나는 밥을 먹었다",
    "我喜欢吃苹果。你呢？",
    "日本語のテキスト、カタカナとひらがな。",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีครับ",
    "Привет, мир! Ελληνικά γράμματα.",
    // Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
    "👩‍👩‍👧‍👦",
    "🏳️‍🌈",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "I ❤️ Rust 🦀! 😀😃😄 🇫🇷🇯🇵 1️⃣",
    "emoji👩‍💻mixed🧑🏽‍🚀in words",
    // Code.
    "fn main() {\n    let x: Vec<u32> = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}\n",
    "impl<'a> Tokenizer<'a> {\n\tpub fn encode(&self, text: &str) -> Result<usize, Error> { todo!() }\n}",
    "def f(x):\n    if x >= 10 and x != 42:\n        return x ** 2  # square\n    return {'a': [1, 2], \"b\": None}\n",
    "a+=b; c=d*e/f%g; h<<=2; i>>=3; j&&k||!l; m->n; o::p; q=>r; s??t",
    "    indented\n        more\n\t\tmixed\n",
    "<html><body class=\"main\">&amp; &lt;tag&gt;</body></html>",
    "https://example.com/path?query=1&x=y#frag user@example.com",
    "<|endoftext|> is plain text to encode_ordinary",
    "!!!??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~ ```",
    "MiXeD CaSe WoRdS and ALLCAPS and lowercase",
    "\u{0}\u{1}\u{7f}\u{80}\u{9f} controls \u{feff}bom \u{200b}zwsp \u{200d}zwj \u{fffd}",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𐍈 𓀀 𝟘𝟙𝟚",
];

#[test]
fn packed_gpt2_section_has_gpt2_shape() {
    let tok = gpt2();
    assert_eq!(tok.vocab_size(), 50257);
    assert_eq!(tok.n_merges(), 50000);
    assert_eq!(tok.token_bytes(50256), Some(&b"<|endoftext|>"[..]));
    assert_eq!(tok.token_bytes(50257), None);
    assert_eq!(gpt2_section().len(), 922_395, "section size changed: update the figure in runtime::tokenizer's docs");
}

#[test]
fn cat_sat() {
    assert_eq!(encode(&gpt2(), "cat sat"), [9246, 3332]);
}

#[test]
fn unknown_word_is_split_into_known_ones() {
    let tok = gpt2();
    let ids = encode(&tok, "someunknownPlace");
    let parts: Vec<&[u8]> = ids.iter().map(|&id| tok.token_bytes(id).unwrap()).collect();
    assert_eq!(parts, [&b"some"[..], b"unknown", b"Place"]);
}

#[test]
fn corpus_matches_tiktoken() {
    let tok = gpt2();
    for text in CORPUS {
        assert_pieces_match_regexes(text);
        assert_parity(&tok, tiktoken(), text);
    }
    // The whole corpus as one text, too.
    assert_parity(&tok, tiktoken(), &CORPUS.join(" \n"));
}

#[test]
fn long_pieces_match_tiktoken() {
    // tiktoken switches to a heap-based merge for pieces of 100+ bytes; the runtime does not.
    let tok = gpt2();
    let long = [
        "a".repeat(3000),
        format!("x{}y", " ".repeat(2000)),
        "1234567890".repeat(300),
        "!?".repeat(1000),
        "😀".repeat(500),
        "abcdefghijklmnopqrstuvwxyz".repeat(100),
        format!(" {}", "Supercalifragilisticexpialidocious".repeat(60)),
        "\n".repeat(700),
    ];
    for text in &long {
        assert_parity(&tok, tiktoken(), text);
        assert_parity(&Tokenizer::from_bytes(wide_section()).unwrap(), tiktoken(), text);
    }
}

#[test]
fn every_token_encodes_like_tiktoken() {
    // tiktoken returns a piece that is itself a token directly; the runtime always runs BPE.
    // They agree on every GPT-2 token that is valid UTF-8 (and on the text of the others).
    let tok = gpt2();
    for id in 0..tok.vocab_size() as u32 {
        let text = String::from_utf8_lossy(tok.token_bytes(id).unwrap()).into_owned();
        assert_parity(&tok, tiktoken(), &text);
    }
}

#[test]
fn tokenizer_json_packs_like_vocab_and_merges() {
    // The same tables as a Hugging Face tokenizer.json (GPT-2's layout) give the same section.
    let files = host_tools::tokenizer_pack::load_from_dir(fixture_dir()).unwrap().unwrap();
    let merges: Vec<String> = files.merges.iter().map(|m| format!("{} {}", m.left, m.right)).collect();
    let json = serde_json::json!({
        "version": "1.0",
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                  "vocab": files.vocab, "merges": merges},
    });
    let dir = std::env::temp_dir().join(format!("tokenizer-json-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
    let packed = host_tools::tokenizer_pack::pack_from_dir(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(packed.unwrap().unwrap() == gpt2_section(), "tokenizer.json packs differently");
}

#[test]
fn end_of_text_decodes_to_its_marker() {
    let tok = gpt2();
    assert_eq!(decode(&tok, &[50256]), b"<|endoftext|>");
    assert_eq!(decode(&tok, &[9246, 50256, 3332]), b"cat<|endoftext|> sat");
}

/// GPT-2 plus an added token at id 69_999: vocab_size 70_000 > 65_536, so ids are stored as
/// u32 and encoding takes the runtime's reference merge loop instead of the 16-bit fast one.
fn wide_section() -> &'static [u8] {
    static SECTION: OnceLock<Vec<u8>> = OnceLock::new();
    SECTION.get_or_init(|| {
        let mut files = host_tools::tokenizer_pack::load_from_dir(fixture_dir()).unwrap().unwrap();
        files.added.push(("<|pad|>".to_string(), 69_999));
        host_tools::tokenizer_pack::pack_files(&files).unwrap()
    })
}

#[test]
fn wide_ids_work_too() {
    let section = wide_section();
    assert_eq!(section[6], 4, "id width");
    let tok = Tokenizer::from_bytes(section).unwrap();
    assert_eq!(tok.vocab_size(), 70_000);
    assert_eq!(tok.token_bytes(69_999), Some(&b"<|pad|>"[..]));
    assert_eq!(tok.token_bytes(60_000), Some(&b""[..]));
    for text in CORPUS {
        assert_parity(&tok, tiktoken(), text);
    }
}

// ---- a tiny vocabulary: GPT-2's first 300 tokens -------------------------------------------------

/// GPT-2 restricted to its 256 byte tokens and first 44 merges (ids 0..300), and the same
/// restriction of tiktoken's ranks as the reference.
fn tiny() -> &'static (Vec<u8>, CoreBPE) {
    static TINY: OnceLock<(Vec<u8>, CoreBPE)> = OnceLock::new();
    TINY.get_or_init(|| {
        let files = host_tools::tokenizer_pack::load_from_dir(fixture_dir()).unwrap().unwrap();
        let vocab: HashMap<String, u32> = files.vocab.into_iter().filter(|&(_, id)| id < 300).collect();
        let merges: Vec<(String, String)> =
            files.merges[..44].iter().map(|m| (m.left.clone(), m.right.clone())).collect();
        let section = host_tools::tokenizer_pack::pack(&vocab, &merges).unwrap();
        let ranks: HashMap<Vec<u8>, u32> =
            vocab.iter().map(|(key, &id)| (host_tools::tokenizer_pack::token_key_to_bytes(key), id)).collect();
        let reference = CoreBPE::new(ranks.into_iter().collect(), Default::default(), TIKTOKEN_PATTERN).unwrap();
        (section, reference)
    })
}

#[test]
fn tiny_vocab_matches_tiktoken_with_the_same_ranks() {
    let (section, reference) = tiny();
    let tok = Tokenizer::from_bytes(section).unwrap();
    assert_eq!((tok.vocab_size(), tok.n_merges()), (300, 44));
    for text in CORPUS {
        assert_parity(&tok, reference, text);
    }
}

// ---- buffers ----------------------------------------------------------------------------------------

#[test]
fn encode_with_a_short_buffer_reports_an_honest_lower_bound() {
    let tok = gpt2();
    for text in ["Hello world, this is   a test of buffers.\n", "aaaaaaaaaaaaaaaaaaaa bb", "👩‍👩‍👧‍👦 x", "", " "]
    {
        let full = encode(&tok, text);
        // The smallest buffer that works.
        let min_ok = (0..=text.len()).find(|&cap| tok.encode(text, &mut vec![0; cap]).is_ok()).unwrap();
        assert!(min_ok >= full.len());
        for cap in 0..=text.len() + 2 {
            // A larger vector whose tail must stay untouched: nothing is written past `out`.
            let mut buf = vec![u32::MAX; cap + 8];
            let (out, guard) = buf.split_at_mut(cap);
            match tok.encode(text, out) {
                Ok(n) => {
                    assert!(cap >= min_ok);
                    assert_eq!(&out[..n], full);
                }
                Err(Error::BufferTooSmall { needed, available }) => {
                    assert!(cap < min_ok, "{text:?}: failed with {cap} slots, {min_ok} suffice");
                    assert_eq!(available, cap);
                    assert!(needed > cap && needed <= min_ok, "{text:?} cap {cap}: needed {needed}, min {min_ok}");
                }
                Err(e) => panic!("unexpected error {e}"),
            }
            assert!(guard.iter().all(|&x| x == u32::MAX));
        }
    }
}

#[test]
fn decode_errors_are_exact() {
    let tok = gpt2();
    let ids = encode(&tok, "cat sat on the mat");
    let len = decode(&tok, &ids).len();
    for cap in 0..len {
        assert_eq!(tok.decode(&ids, &mut vec![0; cap]), Err(Error::BufferTooSmall { needed: len, available: cap }));
    }
    assert_eq!(tok.decode(&[9246, 50257], &mut [0; 64]), Err(Error::InvalidToken { id: 50257, vocab_size: 50257 }));
    assert_eq!(tok.decode(&[u32::MAX], &mut []), Err(Error::InvalidToken { id: u32::MAX, vocab_size: 50257 }));
}

// ---- corrupted sections ---------------------------------------------------------------------------

/// Loads a possibly corrupted section; if it is accepted, encoding and decoding must still work
/// (they may give other ids, but never panic, and the round trip still holds: validation checks
/// every merge's bytes).
fn try_corrupted(section: &[u8]) -> bool {
    let Ok(tok) = Tokenizer::from_bytes(section) else { return false };
    for text in ["Hello, world! It's 3.14 😀 나는", "", "   \n\t x"] {
        let mut out = vec![0; text.len()];
        let n = tok.encode(text, &mut out).expect("a buffer of text.len() is always enough");
        let mut bytes = vec![0; 4 * text.len() + 64];
        let _ = tok.decode(&out[..n], &mut bytes);
        assert_eq!(decode(&tok, &out[..n]), text.as_bytes());
    }
    let _ = tok.decode(&[0, 1, 2, u32::MAX], &mut [0; 8]);
    true
}

#[test]
fn corrupted_tiny_sections_are_rejected_or_harmless() {
    let section = &tiny().0;
    // Every truncation is rejected.
    for len in 0..section.len() {
        assert!(Tokenizer::from_bytes(&section[..len]).is_err(), "truncated to {len} bytes");
    }
    // Every byte flipped in several ways: rejected, or still safe to use.
    let mut accepted = 0;
    for at in 0..section.len() {
        for mask in [0x01, 0x02, 0x10, 0x80, 0xFF] {
            let mut bad = section.clone();
            bad[at] ^= mask;
            accepted += usize::from(try_corrupted(&bad));
        }
    }
    // Only edits that keep every invariant get through (e.g. a changed merge rank).
    assert!(accepted < section.len(), "accepted {accepted} corrupted sections");
    // Padding after the section is ignored.
    let mut padded = section.clone();
    padded.extend_from_slice(&[0xAA; 40]);
    assert!(try_corrupted(&padded));
}

#[test]
fn corrupted_gpt2_sections_are_rejected_or_harmless() {
    let section = gpt2_section();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut rng = || runner.rng().next_u32() as usize;
    for _ in 0..200 {
        let len = rng() % section.len();
        assert!(Tokenizer::from_bytes(&section[..len]).is_err(), "truncated to {len} bytes");
    }
    for _ in 0..300 {
        let mut bad = section.to_vec();
        let at = if rng() % 4 == 0 { rng() % 2048 } else { rng() % section.len() };
        bad[at] ^= 1 << (rng() % 8);
        try_corrupted(&bad);
    }
}

#[test]
fn bad_headers_name_the_field() {
    let good = &tiny().0;
    let with = |at: usize, value: &[u8]| {
        let mut s = good.clone();
        s[at..at + value.len()].copy_from_slice(value);
        Tokenizer::from_bytes(&s).err()
    };
    let bad = |offset| Some(Error::BadTokenizer { offset });
    assert_eq!(with(0, b"GPT2"), bad(0));
    assert_eq!(with(4, &3u16.to_le_bytes()), bad(4));
    // Version 2 has flags in byte 7: only FLAG_INDIVIDUAL_DIGITS is known.
    assert!(with(4, &2u16.to_le_bytes()).is_none());
    let mut v2 = good.clone();
    v2[4..6].copy_from_slice(&2u16.to_le_bytes());
    v2[7] = 2;
    assert_eq!(Tokenizer::from_bytes(&v2).err(), bad(7));
    assert_eq!(with(6, &[3]), bad(6));
    assert_eq!(with(7, &[1]), bad(7));
    assert_eq!(with(8, &255u32.to_le_bytes()), bad(8));
    assert_eq!(with(8, &301u32.to_le_bytes()), bad(20));
    assert_eq!(with(12, &u32::MAX.to_le_bytes()), bad(12));
    assert_eq!(with(20, &0u32.to_le_bytes()), bad(20));
    assert_eq!(Tokenizer::from_bytes(&[]).err(), bad(0));
}

// ---- Unicode classes ------------------------------------------------------------------------------

/// The code-point ranges of a regex class, from the tables tiktoken-rs's regex engine uses.
fn regex_class(pattern: &str) -> Vec<(char, char)> {
    let hir = regex_syntax::Parser::new().parse(pattern).unwrap();
    match hir.kind() {
        regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(class)) => {
            class.ranges().iter().map(|r| (r.start(), r.end())).collect()
        }
        other => panic!("{pattern} is not a Unicode class: {other:?}"),
    }
}

fn in_ranges(ranges: &[(char, char)], c: char) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Characters that the runtime and tiktoken-rs's regex tables classify differently.
fn misclassified() -> &'static Vec<char> {
    static LIST: OnceLock<Vec<char>> = OnceLock::new();
    LIST.get_or_init(|| {
        let (letters, numbers, spaces) = (regex_class(r"\p{L}"), regex_class(r"\p{N}"), regex_class(r"\s"));
        let reference = |c: char| {
            if in_ranges(&spaces, c) {
                Class::Space
            } else if in_ranges(&letters, c) {
                Class::Letter
            } else if in_ranges(&numbers, c) {
                Class::Number
            } else {
                Class::Other
            }
        };
        (char::MIN..=char::MAX).filter(|&c| class_of(c) != reference(c)).collect()
    })
}

#[test]
fn unicode_classes_agree_wherever_both_unicode_versions_assign_the_code_point() {
    let unassigned = regex_class(r"\p{Cn}");
    let differ = misclassified();
    for &c in differ {
        assert!(
            in_ranges(&unassigned, c),
            "{c:?} (U+{:04X}) is assigned in regex-syntax's Unicode yet classified differently",
            c as u32
        );
    }
    eprintln!(
        "{} code points are letters/numbers in unicode-properties' Unicode {:?} but unassigned in regex-syntax's",
        differ.len(),
        unicode_properties::UNICODE_VERSION
    );
}

// ---- random texts -------------------------------------------------------------------------------------

/// One character assigned in both Unicode versions (see the module docs).
fn stable_char() -> impl Strategy<Value = char> {
    any::<char>()
        .prop_filter("classified alike by both Unicode versions", |c| misclassified().binary_search(c).is_err())
}

/// Text fragments: mostly ASCII letters, digits, spaces and punctuation, plus contractions,
/// whitespace oddities and arbitrary characters.
fn fragment() -> impl Strategy<Value = String> {
    let common = vec!["a", "e", "t", "s", "the", "ing", " ", " ", "  ", "\n", "\t", "\r\n", "0", "7"];
    let contractions = vec!["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "''", "'"];
    let odd_spaces_and_marks =
        vec!["\u{a0}", "\u{3000}", "\u{85}", "\u{2028}", "\u{b}", "\u{c}", "\u{1c}", "\u{200d}", "\u{301}", "\u{fe0f}", "🏽"];
    let non_ascii = vec!["é", "ß", "Å", "나", "中", "ع", "न", "ि", "😀", "👩", "٣", "½", "Ⅻ", "€", "—", "“"];
    prop_oneof![
        6 => proptest::char::range(' ', '~').prop_map(String::from),
        3 => prop::sample::select(common).prop_map(String::from),
        2 => prop::sample::select(contractions).prop_map(String::from),
        1 => prop::sample::select(odd_spaces_and_marks).prop_map(String::from),
        2 => prop::sample::select(non_ascii).prop_map(String::from),
        2 => stable_char().prop_map(String::from),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(fragment(), 0..40).prop_map(|f| f.concat()),
        prop::collection::vec(stable_char(), 0..24).prop_map(String::from_iter),
    ]
}

// ---- SmolLM's pre-tokenizer: numeric characters one by one, then GPT-2's ------------------------

/// GPT-2's tables behind `Digits(individual_digits=true)`: a version-2 section.
fn digits_section() -> &'static [u8] {
    static SECTION: OnceLock<Vec<u8>> = OnceLock::new();
    SECTION.get_or_init(|| {
        let mut files = host_tools::tokenizer_pack::load_from_dir(fixture_dir()).unwrap().unwrap();
        files.individual_digits = true;
        host_tools::tokenizer_pack::pack_files(&files).unwrap()
    })
}

/// The reference for [`digits_section`]: tiktoken on each run without numeric characters and on
/// each numeric character alone (what Hugging Face's `Sequence[Digits, ByteLevel]` does).
fn digits_reference(text: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    let mut run = String::new();
    for c in text.chars() {
        if c.is_numeric() {
            ids.extend(tiktoken().encode_ordinary(&run));
            run.clear();
            ids.extend(tiktoken().encode_ordinary(c.encode_utf8(&mut [0; 4])));
        } else {
            run.push(c);
        }
    }
    ids.extend(tiktoken().encode_ordinary(&run));
    ids
}

#[test]
fn individual_digits_match_hugging_face() {
    // Ids from Hugging Face tokenizers with SmolLM's pre-tokenizer over GPT-2's vocab and merges
    // (tests/make_sp_fixtures.py).
    let section = digits_section();
    assert_eq!((u16::from_le_bytes([section[4], section[5]]), section[7]), (2, 1), "version 2, FLAG_INDIVIDUAL_DIGITS");
    let tok = Tokenizer::from_bytes(section).unwrap();
    assert!(tok.as_byte_level().unwrap().individual_digits());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sp_tokenizer/cases.json");
    let cases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let case = &cases["gpt2_digits"];
    let strings = case["strings"].as_array().unwrap();
    for (text, ids) in strings.iter().zip(case["ids"].as_array().unwrap()) {
        let text = text.as_str().unwrap();
        let ids: Vec<u32> = ids.as_array().unwrap().iter().map(|id| id.as_u64().unwrap() as u32).collect();
        assert_eq!(encode(&tok, text), ids, "{text:?}");
        assert_eq!(digits_reference(text), ids, "the tiktoken reference agrees on {text:?}");
        assert_eq!(decode(&tok, &ids), text.as_bytes());
    }
    // Without the flag the same text splits differently.
    assert_ne!(encode(&gpt2(), "2024"), encode(&tok, "2024"));
    assert_eq!(encode(&tok, "2024").len(), 4);
}

proptest! {
    // 2000 cases each (PROPTEST_CASES overrides). Failures print the shrunk input; nothing is
    // written to disk.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_text_matches_tiktoken(text in text()) {
        assert_pieces_match_regexes(&text);
        assert_parity(&gpt2(), tiktoken(), &text);
    }

    #[test]
    fn random_text_matches_tiktoken_with_wide_ids(text in text()) {
        assert_parity(&Tokenizer::from_bytes(wide_section()).unwrap(), tiktoken(), &text);
    }

    #[test]
    fn random_text_with_individual_digits_matches_tiktoken_per_chunk(text in text()) {
        let tok = Tokenizer::from_bytes(digits_section()).unwrap();
        let ours = encode(&tok, &text);
        prop_assert_eq!(&ours, &digits_reference(&text));
        prop_assert_eq!(decode(&tok, &ours), text.as_bytes());
    }

    #[test]
    fn random_text_matches_tiktoken_on_the_tiny_vocab(text in text()) {
        let (section, reference) = tiny();
        assert_parity(&Tokenizer::from_bytes(section).unwrap(), reference, &text);
    }

    #[test]
    fn streamed_tokens_decode_like_from_utf8_lossy(ids in prop::collection::vec(0u32..50257, 0..32)) {
        let tok = gpt2();
        let mut stream = Utf8Stream::new();
        let mut text = String::new();
        for &id in &ids {
            for piece in stream.push(tok.token_bytes(id).unwrap()) {
                text.push_str(piece);
            }
            prop_assert!(stream.pending_len() <= 3);
        }
        text.push_str(stream.finish());
        let bytes = decode(&tok, &ids);
        prop_assert_eq!(text, String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn streamed_encoding_reproduces_the_text(text in text()) {
        // Generation output: every character comes out whole, however the tokens cut it.
        let tok = gpt2();
        let mut stream = Utf8Stream::new();
        let mut out = String::new();
        for id in encode(&tok, &text) {
            for piece in stream.push(tok.token_bytes(id).unwrap()) {
                out.push_str(piece);
            }
            prop_assert!(text.starts_with(&out));
        }
        prop_assert_eq!(stream.finish(), "");
        prop_assert_eq!(out, text);
    }
}

// ---- speed and large-corpus checks (run by hand) ---------------------------------------------------

/// `cargo test --release -p reference-tests --test tokenizer_parity -- --ignored encode_speed --nocapture`
#[test]
#[ignore = "timing; run by hand in release mode"]
fn encode_speed() {
    let tok = gpt2();
    let mut text = String::new();
    while text.len() < 1 << 20 {
        text.push_str(CORPUS[2..].iter().filter(|t| t.is_ascii()).copied().collect::<Vec<_>>().join(" ").as_str());
    }
    // Best of five runs each (the machine may be busy).
    let mut out = vec![0; text.len()];
    let (mut ours, mut reference, mut n) = (std::time::Duration::MAX, std::time::Duration::MAX, 0);
    let mut theirs = Vec::new();
    for _ in 0..5 {
        let start = std::time::Instant::now();
        n = tok.encode(&text, &mut out).unwrap();
        ours = ours.min(start.elapsed());
        let start = std::time::Instant::now();
        theirs = tiktoken().encode_ordinary(&text);
        reference = reference.min(start.elapsed());
    }
    assert_eq!(&out[..n], theirs);
    eprintln!("{} bytes -> {n} tokens: runtime {ours:?}, tiktoken-rs {reference:?}", text.len());
}

/// Compares every UTF-8 file under `$TOKENIZER_PARITY_DIR` (e.g. a source tree).
/// `TOKENIZER_PARITY_DIR=~/.cargo/registry/src cargo test --release -p reference-tests \
///     --test tokenizer_parity -- --ignored files_match_tiktoken`
#[test]
#[ignore = "needs TOKENIZER_PARITY_DIR"]
fn files_match_tiktoken() {
    let root = std::env::var("TOKENIZER_PARITY_DIR").expect("set TOKENIZER_PARITY_DIR");
    let tok = gpt2();
    let (mut files, mut bytes, mut skipped) = (0, 0, 0);
    let mut stack = vec![std::path::PathBuf::from(root)];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap().flatten() {
                stack.push(entry.path());
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            if text.chars().any(|c| misclassified().binary_search(&c).is_ok()) {
                skipped += 1;
                continue;
            }
            let ours = encode(&tok, &text);
            assert!(ours == tiktoken().encode_ordinary(&text), "ids differ for {}", path.display());
            files += 1;
            bytes += text.len();
        }
    }
    eprintln!("{files} files, {bytes} bytes: identical ids ({skipped} files skipped: newer Unicode)");
}
