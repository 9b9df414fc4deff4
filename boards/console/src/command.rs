//! A line is a prompt or a command: [`parse`] decides, and checks every value, so the console
//! only ever applies settings the sampler accepts.
//!
//! | line | meaning |
//! |---|---|
//! | `/n N` | tokens per reply, `1 ..= limits.max_tokens` |
//! | `/temp T` | temperature, finite and `>= 0` (`0` = greedy) |
//! | `/top-k K` | keep the K most likely tokens, `0 ..= limits.max_top_k` (`0` = off) |
//! | `/top-p P` | nucleus sampling, `0 < P <= 1` (`1` = off) |
//! | `/seed S` | PRNG seed, `0 ..= 2^64 - 1` |
//! | `/greedy` | temperature 0 |
//! | `/chat on`, `/chat off` | chat mode |
//! | `/reset` | forget the conversation |
//! | `/echo on`, `/echo off` | terminal mode (echo, CR LF) |
//! | `/stats`, `/help`, `/quit` | |
//! | `//text` | the prompt `/text` |
//! | anything else | a prompt, verbatim (spaces included) |
//!
//! Command words are case-sensitive and separated by ASCII whitespace; a command takes exactly
//! the values shown.

use core::fmt;

/// Bounds a console puts on values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `/top-k`: the capacity `K` of the console's `Sampler<K>`.
    pub max_top_k: usize,
    /// Largest `/n`.
    pub max_tokens: usize,
}

/// A parsed line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Input<'a> {
    /// Text to continue (or, in chat mode, the user's turn).
    Prompt(&'a str),
    /// A command.
    Command(Command),
}

/// A command, with its checked value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    /// `/n N`
    MaxTokens(usize),
    /// `/temp T`
    Temperature(f32),
    /// `/top-k K`
    TopK(usize),
    /// `/top-p P`
    TopP(f32),
    /// `/seed S`
    Seed(u64),
    /// `/greedy`
    Greedy,
    /// `/chat on|off`
    Chat(bool),
    /// `/reset`
    Reset,
    /// `/echo on|off`
    Echo(bool),
    /// `/stats`
    Stats,
    /// `/help`
    Help,
    /// `/quit`
    Quit,
}

/// Why a command line was refused (it names the command and echoes the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError<'a> {
    /// `/name` is not a command.
    Unknown {
        /// The word, with its `/`.
        name: &'a str,
    },
    /// The command needs a value.
    MissingValue {
        /// The command, e.g. `/temp`.
        command: &'static str,
        /// An example, e.g. `/temp 0.8`.
        example: &'static str,
    },
    /// The command takes no value, or fewer values.
    ExtraValue {
        /// The command.
        command: &'static str,
        /// The first value too many.
        value: &'a str,
    },
    /// The value is not a number of the kind the command takes.
    NotANumber {
        /// The command.
        command: &'static str,
        /// The value.
        value: &'a str,
        /// What it should be, e.g. `a whole number`.
        kind: &'static str,
    },
    /// The value is a number outside the command's range.
    OutOfRange {
        /// The command.
        command: &'static str,
        /// The value.
        value: &'a str,
        /// The range, e.g. `between 1 and 65535`.
        range: Range,
    },
    /// `on` or `off` expected.
    NotOnOff {
        /// The command.
        command: &'static str,
        /// The value.
        value: &'a str,
    },
}

/// The allowed values of a numeric command, for [`ParseError::OutOfRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// `lo ..= hi`
    Between(usize, usize),
    /// finite and `>= 0`
    NonNegative,
    /// `(0, 1]`
    UnitInterval,
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Range::Between(lo, hi) => write!(f, "between {lo} and {hi}"),
            Range::NonNegative => f.write_str("a finite number, at least 0"),
            Range::UnitInterval => f.write_str("more than 0 and at most 1"),
        }
    }
}

impl fmt::Display for ParseError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseError::Unknown { name } => {
                f.write_str("unknown command ")?;
                crate::text::write_escaped(f, name)?;
                f.write_str(" (/help lists the commands; //text sends a prompt that starts with /)")
            }
            ParseError::MissingValue { command, example } => write!(f, "{command} needs a value, e.g. {example}"),
            ParseError::ExtraValue { command, value } => {
                write!(f, "{command} takes no further value (found \"")?;
                crate::text::write_escaped(f, value)?;
                f.write_str("\")")
            }
            ParseError::NotANumber { command, value, kind } => {
                write!(f, "{command} \"")?;
                crate::text::write_escaped(f, value)?;
                write!(f, "\" is not {kind}")
            }
            ParseError::OutOfRange { command, value, range } => {
                write!(f, "{command} ")?;
                crate::text::write_escaped(f, value)?;
                write!(f, ": must be {range}")
            }
            ParseError::NotOnOff { command, value } => {
                write!(f, "{command} takes on or off (found \"")?;
                crate::text::write_escaped(f, value)?;
                f.write_str("\")")
            }
        }
    }
}

/// Parses one line (without its line end). A line that does not start with `/` is a prompt,
/// as is `//text` (the prompt `/text`).
pub fn parse<'a>(line: &'a str, limits: &Limits) -> Result<Input<'a>, ParseError<'a>> {
    if let Some(prompt) = line.strip_prefix("//") {
        return Ok(Input::Prompt(line.get(1..).unwrap_or(prompt)));
    }
    if !line.starts_with('/') {
        return Ok(Input::Prompt(line));
    }
    let mut words = line.split_ascii_whitespace();
    let name = words.next().unwrap_or(line);
    let value = words.next();
    let extra = words.next();
    let no_value = |command: &'static str, c: Command| match value {
        None => Ok(Input::Command(c)),
        Some(value) => Err(ParseError::ExtraValue { command, value }),
    };
    let one = |command: &'static str, example: &'static str| -> Result<&'a str, ParseError<'a>> {
        match (value, extra) {
            (None, _) => Err(ParseError::MissingValue { command, example }),
            (Some(_), Some(value)) => Err(ParseError::ExtraValue { command, value }),
            (Some(v), None) => Ok(v),
        }
    };
    let command = match name {
        "/n" => {
            let v = one("/n", "/n 48")?;
            Command::MaxTokens(whole("/n", v, 1, limits.max_tokens)?)
        }
        "/temp" => {
            let v = one("/temp", "/temp 0.8")?;
            let t = number("/temp", v)?;
            if !(t >= 0.0 && t.is_finite()) {
                return Err(ParseError::OutOfRange { command: "/temp", value: v, range: Range::NonNegative });
            }
            Command::Temperature(t)
        }
        "/top-k" => {
            let v = one("/top-k", "/top-k 40")?;
            Command::TopK(whole("/top-k", v, 0, limits.max_top_k)?)
        }
        "/top-p" => {
            let v = one("/top-p", "/top-p 0.95")?;
            let p = number("/top-p", v)?;
            if !(p > 0.0 && p <= 1.0) {
                return Err(ParseError::OutOfRange { command: "/top-p", value: v, range: Range::UnitInterval });
            }
            Command::TopP(p)
        }
        "/seed" => {
            let v = one("/seed", "/seed 42")?;
            let s = v.parse::<u64>().map_err(|_| ParseError::NotANumber {
                command: "/seed",
                value: v,
                kind: "a whole number from 0 to 18446744073709551615",
            })?;
            Command::Seed(s)
        }
        "/chat" => Command::Chat(on_off("/chat", one("/chat", "/chat on")?)?),
        "/echo" => Command::Echo(on_off("/echo", one("/echo", "/echo on")?)?),
        "/greedy" => return no_value("/greedy", Command::Greedy),
        "/reset" => return no_value("/reset", Command::Reset),
        "/stats" => return no_value("/stats", Command::Stats),
        "/help" => return no_value("/help", Command::Help),
        "/quit" => return no_value("/quit", Command::Quit),
        _ => return Err(ParseError::Unknown { name }),
    };
    Ok(Input::Command(command))
}

/// A whole number in `lo ..= hi`.
fn whole<'a>(command: &'static str, v: &'a str, lo: usize, hi: usize) -> Result<usize, ParseError<'a>> {
    // all digits (an optional +), so that "-1" and "1e3" are "not a whole number"
    let digits = v.strip_prefix('+').unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::NotANumber { command, value: v, kind: "a whole number" });
    }
    let out_of_range = ParseError::OutOfRange { command, value: v, range: Range::Between(lo, hi) };
    match digits.parse::<usize>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(out_of_range), // too many digits for a usize is out of range too
    }
}

/// A decimal number (Rust's `f32` syntax, as `host` reads its arguments).
fn number<'a>(command: &'static str, v: &'a str) -> Result<f32, ParseError<'a>> {
    v.parse::<f32>().map_err(|_| ParseError::NotANumber { command, value: v, kind: "a number" })
}

fn on_off<'a>(command: &'static str, v: &'a str) -> Result<bool, ParseError<'a>> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(ParseError::NotOnOff { command, value: v }),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    const L: Limits = Limits { max_top_k: 1024, max_tokens: 65535 };

    fn cmd(line: &str) -> Command {
        match parse(line, &L) {
            Ok(Input::Command(c)) => c,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    fn err(line: &str) -> std::string::String {
        parse(line, &L).unwrap_err().to_string()
    }

    #[test]
    fn prompts_are_verbatim() {
        assert_eq!(parse("ROMEO:", &L), Ok(Input::Prompt("ROMEO:")));
        assert_eq!(parse("  two spaces  ", &L), Ok(Input::Prompt("  two spaces  ")));
        assert_eq!(parse("//n 5", &L), Ok(Input::Prompt("/n 5")));
        assert_eq!(parse("//", &L), Ok(Input::Prompt("/")));
        assert_eq!(parse("a/n 5", &L), Ok(Input::Prompt("a/n 5")));
    }

    #[test]
    fn every_command_with_its_value() {
        assert_eq!(cmd("/n 20"), Command::MaxTokens(20));
        assert_eq!(cmd("/n +7"), Command::MaxTokens(7));
        assert_eq!(cmd("/n 65535"), Command::MaxTokens(65535));
        assert_eq!(cmd("/temp 0.5"), Command::Temperature(0.5));
        assert_eq!(cmd("/temp 0"), Command::Temperature(0.0));
        assert_eq!(cmd("/temp 1e-1"), Command::Temperature(0.1));
        assert_eq!(cmd("/top-k 0"), Command::TopK(0));
        assert_eq!(cmd("/top-k 1024"), Command::TopK(1024));
        assert_eq!(cmd("/top-p 1"), Command::TopP(1.0));
        assert_eq!(cmd("/top-p 0.9"), Command::TopP(0.9));
        assert_eq!(cmd("/seed 18446744073709551615"), Command::Seed(u64::MAX));
        assert_eq!(cmd("/greedy"), Command::Greedy);
        assert_eq!(cmd("/chat on"), Command::Chat(true));
        assert_eq!(cmd("/chat off"), Command::Chat(false));
        assert_eq!(cmd("/echo on"), Command::Echo(true));
        assert_eq!(cmd("/reset"), Command::Reset);
        assert_eq!(cmd("/stats"), Command::Stats);
        assert_eq!(cmd("/help"), Command::Help);
        assert_eq!(cmd("/quit"), Command::Quit);
        assert_eq!(cmd("  /quit  ".trim_start()), Command::Quit);
        assert_eq!(cmd("/temp\t0.25 "), Command::Temperature(0.25));
    }

    #[test]
    fn bad_commands_say_what_and_why() {
        assert_eq!(err("/bogus 3"), "unknown command /bogus (/help lists the commands; //text sends a prompt that starts with /)");
        assert_eq!(err("/"), "unknown command / (/help lists the commands; //text sends a prompt that starts with /)");
        assert_eq!(err("/N 5"), "unknown command /N (/help lists the commands; //text sends a prompt that starts with /)");
        assert_eq!(err("/n"), "/n needs a value, e.g. /n 48");
        assert_eq!(err("/n 0"), "/n 0: must be between 1 and 65535");
        assert_eq!(err("/n 65536"), "/n 65536: must be between 1 and 65535");
        assert_eq!(err("/n 99999999999999999999999"), "/n 99999999999999999999999: must be between 1 and 65535");
        assert_eq!(err("/n -1"), "/n \"-1\" is not a whole number");
        assert_eq!(err("/n 2.5"), "/n \"2.5\" is not a whole number");
        assert_eq!(err("/n 5 6"), "/n takes no further value (found \"6\")");
        assert_eq!(err("/temp abc"), "/temp \"abc\" is not a number");
        assert_eq!(err("/temp -0.5"), "/temp -0.5: must be a finite number, at least 0");
        assert_eq!(err("/temp inf"), "/temp inf: must be a finite number, at least 0");
        assert_eq!(err("/temp NaN"), "/temp NaN: must be a finite number, at least 0");
        assert_eq!(err("/top-k 1025"), "/top-k 1025: must be between 0 and 1024");
        assert_eq!(err("/top-p 0"), "/top-p 0: must be more than 0 and at most 1");
        assert_eq!(err("/top-p 1.01"), "/top-p 1.01: must be more than 0 and at most 1");
        assert_eq!(err("/seed -3"), "/seed \"-3\" is not a whole number from 0 to 18446744073709551615");
        assert_eq!(err("/chat maybe"), "/chat takes on or off (found \"maybe\")");
        assert_eq!(err("/chat"), "/chat needs a value, e.g. /chat on");
        assert_eq!(err("/greedy now"), "/greedy takes no further value (found \"now\")");
        assert_eq!(err("/temp \x1b[A"), "/temp \"\\x1b[A\" is not a number");
    }
}
