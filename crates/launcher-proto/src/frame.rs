//! Newline-delimited JSON framing: one JSON object per line, each line at most [`MAX_LINE`]
//! bytes (without its `\n`; a `\r` before it is dropped).
//!
//! The helper answers a line over the cap with `BAD_REQUEST` and closes the connection, since
//! the rest of that line cannot be told from the next request.

use std::io::{self, BufRead, Write};

use serde::Serialize;

/// The longest line either side sends or accepts, in bytes (64 KiB).
pub const MAX_LINE: usize = 64 * 1024;

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// More than the cap arrived without a newline.
    #[error("line exceeds {0} bytes")]
    TooLong(usize),
    #[error("read: {0}")]
    Io(#[from] io::Error),
}

/// The framing rule, apart from any reader: fed the bytes a reader has available, it keeps
/// what belongs to the line and says how many bytes to consume. The blocking reader
/// ([`read_line`]) and the helper's async one both drive it, so both frame alike.
#[derive(Debug)]
pub struct Framer {
    cap: usize,
    line: Vec<u8>,
}

impl Framer {
    /// A framer for lines of at most `cap` bytes (not counting the line ending).
    #[must_use]
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            line: Vec::new(),
        }
    }

    /// Takes from `available` up to and including the first `\n`: answers how many bytes it
    /// took, and the line when one ended (without its `\n` and a `\r` before it).
    ///
    /// # Errors
    /// [`LineError::TooLong`] as soon as the line is longer than the cap (the reader is then in
    /// the middle of it).
    pub fn feed(&mut self, available: &[u8]) -> (usize, Result<Option<Vec<u8>>, LineError>) {
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.line.extend_from_slice(&available[..i]);
                let line = trim_cr(std::mem::take(&mut self.line));
                let result = if line.len() > self.cap {
                    Err(LineError::TooLong(self.cap))
                } else {
                    Ok(Some(line))
                };
                (i + 1, result)
            }
            None => {
                self.line.extend_from_slice(available);
                // One byte over the cap may be the `\r` of a line ending still to come.
                let result = if self.line.len() > self.cap + 1 {
                    Err(LineError::TooLong(self.cap))
                } else {
                    Ok(None)
                };
                (available.len(), result)
            }
        }
    }

    /// At the end of input: the last line if it had no newline, `None` if nothing was fed.
    ///
    /// # Errors
    /// [`LineError::TooLong`] when that last line is over the cap.
    pub fn finish(self) -> Result<Option<Vec<u8>>, LineError> {
        if self.line.is_empty() {
            return Ok(None);
        }
        let line = trim_cr(self.line);
        if line.len() > self.cap {
            return Err(LineError::TooLong(self.cap));
        }
        Ok(Some(line))
    }
}

/// Reads one line of at most `cap` bytes, without its line ending. `Ok(None)` at end of input
/// before any byte; a last line without a newline is returned as a line.
///
/// # Errors
/// [`LineError::TooLong`] as soon as more than `cap` bytes arrived without a newline (the
/// reader is then in the middle of that line); [`LineError::Io`] on a read error.
pub fn read_line<R: BufRead>(r: &mut R, cap: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut framer = Framer::new(cap);
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if available.is_empty() {
            return framer.finish();
        }
        let (n, line) = framer.feed(available);
        r.consume(n);
        if let Some(line) = line? {
            return Ok(Some(line));
        }
    }
}

fn trim_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// Serializes `msg` as one line (JSON and `\n`).
///
/// # Errors
/// If `msg` does not serialize (never for this crate's types).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec(msg)?;
    out.push(b'\n');
    Ok(out)
}

/// Writes `msg` as one line and flushes.
///
/// # Errors
/// On a write error.
pub fn write_message<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let line = encode(msg).map_err(io::Error::other)?;
    w.write_all(&line)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<Result<Vec<u8>, String>> {
        // A tiny buffer so that lines span several fills.
        let mut r = io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        loop {
            match read_line(&mut r, cap) {
                Ok(Some(l)) => out.push(Ok(l)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[test]
    fn splits_lines() {
        assert_eq!(
            lines(b"ab\r\ncd\n\nlast", 10),
            vec![
                Ok(b"ab".to_vec()),
                Ok(b"cd".to_vec()),
                Ok(vec![]),
                Ok(b"last".to_vec())
            ]
        );
        assert!(lines(b"", 10).is_empty());
    }

    #[test]
    fn caps_lines() {
        assert_eq!(lines(b"12345\n", 5), vec![Ok(b"12345".to_vec())]);
        assert_eq!(lines(b"12345\r\n", 5), vec![Ok(b"12345".to_vec())]);
        assert_eq!(
            lines(b"123456\n", 5),
            vec![Err("line exceeds 5 bytes".into())]
        );
        // A line that never ends is refused without reading it all.
        let endless = vec![b'x'; 1 << 20];
        assert_eq!(lines(&endless, 5), vec![Err("line exceeds 5 bytes".into())]);
        // A last line without a newline: its `\r` goes as any line's does, and the cap holds.
        assert_eq!(lines(b"12345\r", 5), vec![Ok(b"12345".to_vec())]);
        assert_eq!(
            lines(b"123456", 5),
            vec![Err("line exceeds 5 bytes".into())]
        );
    }
}
