//! Masking of granted values in a stream of output: pure, no IO, reusable by any command that
//! relays a child's bytes (`countersign run` today, a future `countersign mcp`).
//!
//! A [`Masker`] is built from the values. For each value the patterns are: its raw bytes; its
//! base64 (standard and URL alphabets, padded and unpadded, plus the stable inner part of its
//! encoding at each of the three byte alignments it can have inside a longer base64 blob); its
//! percent-encoding (upper and lower hex, `%20` and `+` for a space, RFC 3986 and
//! `application/x-www-form-urlencoded` sets); and its JSON string escaping (as `serde_json`
//! emits it, with `\/`, and with non-ASCII and control characters as `\uXXXX` in lower and
//! upper hex). One leftmost-longest [`AhoCorasick`] automaton finds them all; each occurrence is
//! replaced by [`CONCEALED`].
//!
//! Streaming: [`Masker::push`] emits at once every byte that cannot be the start of an
//! occurrence, and holds back only the shortest tail that is still a proper prefix of some
//! pattern (at most the longest pattern's length − 1 bytes), so a value split across reads is
//! still caught and a prompt that is no pattern's prefix shows without delay. The output of any
//! chunking equals the output of masking the whole stream at once. [`Masker::finish`] flushes
//! the held tail (at the end of the stream, or after an idle pause when a person is waiting).
//!
//! Not caught: a value shorter than [`MIN_VALUE_LEN`] bytes (not masked at all: it would mask
//! ordinary text; see [`maskable`]); a value split by a pause at an idle flush; base64 wrapped
//! into lines; a value transformed otherwise (hex, compressed, reversed, quoted-printable, a
//! different subset of escaped characters than the variants above).
//!
//! Our copies of the patterns and the held bytes are zeroized; the automaton keeps its own
//! copies of the patterns (in its transition tables and prefilter), which are freed, not
//! zeroized, when the `Masker` is dropped: build one per child and drop it when the child ends.

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous;
use aho_corasick::{AhoCorasick, AhoCorasickKind, Anchored, Input, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use zeroize::{Zeroize, Zeroizing};

/// What replaces every occurrence of a value or of one of its encodings.
pub const CONCEALED: &[u8] = b"<concealed by countersign>";

/// Values shorter than this are not masked: a 1 to 3 byte value (a digit, `yes`) occurs in
/// ordinary output by chance and masking it would garble the output without hiding anything.
pub const MIN_VALUE_LEN: usize = 4;

/// Encoded patterns shorter than this are dropped (only the inner base64 parts of the shortest
/// values can be; the raw value and its other encodings are never shorter than the value).
const MIN_PATTERN_LEN: usize = 4;

/// Whether a value is long enough to be masked ([`MIN_VALUE_LEN`]).
#[must_use]
pub fn maskable(value: &[u8]) -> bool {
    value.len() >= MIN_VALUE_LEN
}

/// Every form of `value` that is masked: the raw bytes and its encodings, deduplicated.
#[must_use]
pub fn patterns(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut out: Vec<Zeroizing<Vec<u8>>> = vec![Zeroizing::new(value.to_vec())];
    base64_forms(value, &mut out);
    percent_forms(value, &mut out);
    if let Ok(s) = std::str::from_utf8(value) {
        json_forms(s, &mut out);
    }
    out.retain(|p| p.len() >= MIN_PATTERN_LEN);
    out.sort_unstable_by(|a, b| a.as_slice().cmp(b.as_slice()));
    out.dedup_by(|a, b| a.as_slice() == b.as_slice());
    out
}

fn base64_forms(value: &[u8], out: &mut Vec<Zeroizing<Vec<u8>>>) {
    for (padded, unpadded) in [(&STANDARD, &STANDARD_NO_PAD), (&URL_SAFE, &URL_SAFE_NO_PAD)] {
        out.push(Zeroizing::new(padded.encode(value).into_bytes()));
        out.push(Zeroizing::new(unpadded.encode(value).into_bytes()));
        // Inside a longer blob the value starts at byte offset k (mod 3) and is followed by
        // unknown bytes: only the characters whose six bits all come from the value are stable.
        let bits = 8 * value.len();
        for k in 0..3usize {
            let mut framed = Zeroizing::new(vec![0u8; k]);
            framed.extend_from_slice(value);
            framed.extend_from_slice(&[0, 0, 0]);
            let enc = Zeroizing::new(unpadded.encode(framed.as_slice()).into_bytes());
            let first = (8 * k).div_ceil(6);
            let last = (8 * k + bits) / 6; // exclusive: chars i with 6i + 6 <= 8k + bits
            if last > first {
                out.push(Zeroizing::new(enc[first..last].to_vec()));
            }
        }
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

fn percent_forms(value: &[u8], out: &mut Vec<Zeroizing<Vec<u8>>>) {
    // RFC 3986 unreserved characters stay; `application/x-www-form-urlencoded` (WHATWG) keeps
    // `*` as well and never `~`.
    let rfc3986 = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let form = |b: u8| b.is_ascii_alphanumeric() || b"*-._".contains(&b);
    let sets: [&dyn Fn(u8) -> bool; 2] = [&rfc3986, &form];
    for keep in sets {
        for hex in [HEX_UPPER, HEX_LOWER] {
            for plus in [false, true] {
                let mut p = Zeroizing::new(Vec::with_capacity(value.len() * 3));
                for &b in value {
                    if keep(b) {
                        p.push(b);
                    } else if plus && b == b' ' {
                        p.push(b'+');
                    } else {
                        p.extend_from_slice(&[
                            b'%',
                            hex[usize::from(b >> 4)],
                            hex[usize::from(b & 15)],
                        ]);
                    }
                }
                out.push(p);
            }
        }
    }
}

fn json_forms(value: &str, out: &mut Vec<Zeroizing<Vec<u8>>>) {
    for slash in [false, true] {
        // None: non-ASCII as is (serde_json, JavaScript); Some(hex): as `\uXXXX` (Python).
        for non_ascii in [None, Some(HEX_LOWER), Some(HEX_UPPER)] {
            let control_hex = non_ascii.unwrap_or(HEX_LOWER);
            let mut p = Zeroizing::new(Vec::with_capacity(value.len() + 8));
            let mut units = [0u16; 2];
            let mut utf8 = [0u8; 4];
            for c in value.chars() {
                match c {
                    '"' => p.extend_from_slice(b"\\\""),
                    '\\' => p.extend_from_slice(b"\\\\"),
                    '/' if slash => p.extend_from_slice(b"\\/"),
                    '\n' => p.extend_from_slice(b"\\n"),
                    '\r' => p.extend_from_slice(b"\\r"),
                    '\t' => p.extend_from_slice(b"\\t"),
                    '\u{8}' => p.extend_from_slice(b"\\b"),
                    '\u{c}' => p.extend_from_slice(b"\\f"),
                    c if u32::from(c) < 0x20 => push_u_escape(&mut p, c as u16, control_hex),
                    c if !c.is_ascii() && non_ascii.is_some() => {
                        for &u in c.encode_utf16(&mut units).iter() {
                            push_u_escape(&mut p, u, control_hex);
                        }
                    }
                    c => p.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes()),
                }
            }
            utf8.zeroize();
            units.zeroize();
            out.push(p);
        }
    }
}

fn push_u_escape(p: &mut Vec<u8>, u: u16, hex: &[u8; 16]) {
    p.extend_from_slice(b"\\u");
    for shift in [12u16, 8, 4, 0] {
        p.push(hex[usize::from((u >> shift) & 15)]);
    }
}

/// Why a [`Masker`] could not be built.
#[derive(Debug)]
pub struct BuildError(String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "building the output masker: {}", self.0)
    }
}

impl std::error::Error for BuildError {}

/// A streaming masker: feed it chunks with [`push`](Self::push), end with
/// [`finish`](Self::finish).
pub struct Masker {
    /// Leftmost-longest search for complete occurrences.
    find: AhoCorasick,
    /// The same patterns, anchored: tells whether a tail is still a prefix of some pattern.
    prefix: contiguous::NFA,
    /// The longest pattern's length.
    longest: usize,
    /// Bytes received, not yet emitted (a tail that may begin an occurrence).
    held: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("patterns", &self.find.patterns_len())
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl Masker {
    /// A masker for these values (each with all its [`patterns`]). Values that are not
    /// [`maskable`] are skipped: the caller says so to the user.
    ///
    /// # Errors
    /// When the automaton cannot be built (far more patterns than any grant holds).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, BuildError> {
        let mut all: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        for v in values {
            if maskable(v) {
                all.extend(patterns(v));
            }
        }
        let longest = all.iter().map(|p| p.len()).max().unwrap_or(0);
        let find = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .kind(Some(AhoCorasickKind::DFA))
            .build(all.iter().map(|p| p.as_slice()))
            .map_err(|e| BuildError(e.to_string()))?;
        let prefix = contiguous::NFA::builder()
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .build(all.iter().map(|p| p.as_slice()))
            .map_err(|e| BuildError(e.to_string()))?;
        Ok(Self {
            find,
            prefix,
            longest,
            held: Zeroizing::new(Vec::new()),
        })
    }

    /// How many patterns are searched.
    #[must_use]
    pub fn patterns_len(&self) -> usize {
        self.find.patterns_len()
    }

    /// How many bytes are held back, waiting to know whether they begin an occurrence.
    #[must_use]
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes the next chunk of the stream; appends to `out` what can be emitted now.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.held.capacity() - self.held.len() < input.len() {
            // Grow by hand: a reallocating `extend` would free the old buffer unzeroized.
            let mut grown = Zeroizing::new(Vec::with_capacity(
                (self.held.len() + input.len()).max(2 * self.held.capacity()),
            ));
            grown.extend_from_slice(&self.held);
            self.held = grown;
        }
        self.held.extend_from_slice(input);
        self.drain(out, false);
    }

    /// Ends the stream (or gives up waiting): appends everything held to `out`, with the
    /// complete occurrences in it replaced. The masker can take a new stream afterwards.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.drain(out, true);
    }

    /// The first position at or after `from` where the held bytes up to their end are a prefix
    /// of some pattern (an occurrence may still start there); the end when there is none.
    fn first_live(&self, from: usize) -> usize {
        let buf = self.held.as_slice();
        let end = buf.len();
        let Ok(start) = self.prefix.start_state(Anchored::Yes) else {
            return from; // cannot happen (an NFA supports anchored searches): hold everything
        };
        let lowest = from.max(end.saturating_sub(self.longest.saturating_sub(1)));
        (lowest..end)
            .find(|&p| {
                let mut sid = start;
                for &b in &buf[p..] {
                    sid = self.prefix.next_state(Anchored::Yes, sid, b);
                    if self.prefix.is_dead(sid) {
                        return false;
                    }
                }
                true
            })
            .unwrap_or(end)
    }

    fn drain(&mut self, out: &mut Vec<u8>, all: bool) {
        let end = self.held.len();
        let mut pos = 0;
        let mut live = if all { end } else { self.first_live(0) };
        loop {
            let input = Input::new(self.held.as_slice()).span(pos..end);
            match self.find.find(input) {
                Some(m) if m.start() < live => {
                    out.extend_from_slice(&self.held[pos..m.start()]);
                    out.extend_from_slice(CONCEALED);
                    pos = m.end();
                    if pos > live {
                        live = if all { end } else { self.first_live(pos) };
                    }
                }
                _ => {
                    out.extend_from_slice(&self.held[pos..live]);
                    pos = live;
                    break;
                }
            }
        }
        let keep = end - pos;
        self.held.copy_within(pos.., 0);
        self.held[keep..].zeroize();
        self.held.truncate(keep);
    }
}

#[cfg(test)]
mod tests;
