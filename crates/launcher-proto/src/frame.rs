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

/// Reads one line of at most `cap` bytes, without its line ending. `Ok(None)` at end of input
/// before any byte; a last line without a newline is returned as a line.
///
/// # Errors
/// [`LineError::TooLong`] as soon as more than `cap` bytes arrived without a newline (the
/// reader is then in the middle of that line); [`LineError::Io`] on a read error.
pub fn read_line<R: BufRead>(r: &mut R, cap: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if available.is_empty() {
            return Ok((!line.is_empty()).then(|| trim_cr(line)));
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&available[..i]);
                r.consume(i + 1);
                if line.len() > cap + usize::from(line.last() == Some(&b'\r')) {
                    return Err(LineError::TooLong(cap));
                }
                return Ok(Some(trim_cr(line)));
            }
            None => {
                let n = available.len();
                line.extend_from_slice(available);
                r.consume(n);
                if line.len() > cap + 1 {
                    return Err(LineError::TooLong(cap));
                }
            }
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
    }
}
