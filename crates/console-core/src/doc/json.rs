//! The blocks list written as JSON straight from the tree ([`super::Document::write_blocks_json`]):
//! the bytes serde_json gives for `Vec<BlockInfo>`, without building the list first. A 1 MiB
//! document's list is some 17 MB of JSON (every block repeats its ancestors in `path`), so the
//! writer copies what it can as whole pieces: each ancestor chain is written once and copied
//! into every block under it, ids (`[A-Za-z0-9_-]`) and tokens (hex) need no escaping.

use super::Document;
use super::block::{BlockType, Node};

/// Appends the JSON array of the document's blocks to `out`.
pub(crate) fn write_blocks(
    doc: &Document,
    out: &mut Vec<u8>,
    extra: &mut dyn FnMut(&str, &mut Vec<u8>),
) {
    // Some 16 bytes of JSON per byte of markdown on typical documents; pages not written are
    // never touched, so reserving generously costs nothing.
    out.reserve(doc.markdown().len().saturating_mul(20) + 2);
    out.push(b'[');
    let mut w = Writer {
        out,
        extra,
        path: Vec::with_capacity(256),
        first: true,
        text: "",
    };
    for (index, top) in doc.tops().iter().enumerate() {
        w.text = doc.markdown().get(top.start..).unwrap_or_default();
        w.block(&top.node, top.start, index);
    }
    w.out.push(b']');
}

struct Writer<'o, 'e, 't> {
    out: &'o mut Vec<u8>,
    extra: &'e mut dyn FnMut(&str, &mut Vec<u8>),
    /// The current block's ancestors as `path` entries, comma-separated, without brackets.
    path: Vec<u8>,
    first: bool,
    /// The markdown from the current top-level block on (its nodes' ranges are relative).
    text: &'t str,
}

impl Writer<'_, '_, '_> {
    fn block(&mut self, node: &Node, base: usize, index: usize) {
        let out = &mut *self.out;
        // One block's fields but its rows and the caller's: some 200 bytes and its path.
        out.reserve(256 + self.path.len());
        if !self.first {
            out.push(b',');
        }
        self.first = false;
        out.extend_from_slice(b"{\"id\":");
        string(out, &node.id);
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(node.kind.as_str().as_bytes());
        out.extend_from_slice(b"\",\"range\":{\"start\":");
        number(out, base + node.start);
        out.extend_from_slice(b",\"end\":");
        number(out, base + node.end);
        out.extend_from_slice(b"},\"token\":\"");
        out.extend_from_slice(&node.token.hex_bytes());
        out.extend_from_slice(b"\",\"path\":[");
        out.extend_from_slice(&self.path);
        out.push(b']');
        if node.kind == BlockType::Table {
            // `rows`, as `Node::rows` makes them, from the cells' ranges.
            out.extend_from_slice(b",\"rows\":[");
            for (r, row) in node.children.iter().enumerate() {
                if r > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"index\":");
                number(out, r);
                out.extend_from_slice(b",\"cells\":[");
                for (c, cell) in row.children.iter().enumerate() {
                    if c > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"{\"index\":");
                    number(out, c);
                    out.extend_from_slice(b",\"text\":");
                    string(out, self.text.get(cell.start..cell.end).unwrap_or_default());
                    out.push(b'}');
                }
                out.extend_from_slice(b"]}");
            }
            out.push(b']');
        }
        (self.extra)(&node.id, out);
        out.push(b'}');
        if node.children.is_empty() {
            return;
        }
        let outer = self.path.len();
        if outer > 0 {
            self.path.push(b',');
        }
        self.path.extend_from_slice(b"{\"type\":\"");
        self.path.extend_from_slice(node.kind.as_str().as_bytes());
        self.path.extend_from_slice(b"\",\"id\":");
        string(&mut self.path, &node.id);
        self.path.extend_from_slice(b",\"index\":");
        number(&mut self.path, index);
        self.path.push(b'}');
        for (i, child) in node.children.iter().enumerate() {
            self.block(child, base, i);
        }
        self.path.truncate(outer);
    }
}

/// A JSON string as serde_json writes it: copied whole when nothing in it needs escaping (no
/// `"`, `\` or control character; serde_json escapes nothing else), else through serde_json.
fn string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, s).is_err() {
        // Writing to a Vec cannot fail; should it, the list stays valid JSON.
        out.extend_from_slice(b"\"\"");
    }
}

/// `"00"` to `"99"`: two digits at a time.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// A decimal number.
fn number(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = (n % 100) * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[n * 2..n * 2 + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + u8::try_from(n).unwrap_or(0);
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::{number, string};

    #[test]
    fn doc_json_numbers_and_strings_as_serde_writes_them() {
        let mut n = 1usize;
        let mut cases = vec![0, 9, 10, 99, 100, 101, 999, 1000, 1_048_576, usize::MAX];
        while let Some(next) = n.checked_mul(7) {
            cases.push(next);
            cases.push(next - 1);
            n = next;
        }
        for n in cases {
            let mut out = Vec::new();
            number(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
        for s in [
            "",
            "id-1_x",
            "a\"b",
            "c\\d",
            "\u{1}\n\t\u{1f}",
            "é ü \u{7f} ✓",
        ] {
            let mut out = Vec::new();
            string(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap_or_default());
        }
    }
}
