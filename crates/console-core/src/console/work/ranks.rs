//! The ranks that order a project's issues: strings of `a`..`z` compared as bytes, a new
//! issue's from its number, a placed issue's between its neighbours'.

/// The rank a new issue gets from its number: seven base-25 digits `b`..`z`, so ranks of issues
/// created one after another grow in order without growing in length (midpoints after the
/// last rank would add a character every few issues). Never ends in `a`.
pub fn rank_of_number(number: i64) -> String {
    let mut n = number.max(0) as u64;
    let mut out = [b'b'; 7];
    for d in out.iter_mut().rev() {
        *d = b'b' + (n % 25) as u8;
        n /= 25;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A rank strictly between `lo` and `hi` (either open), over `a`..`z`, ordered bytewise
/// (fractional indexing). A rank never ends in `a`, so there is always room below it.
pub fn rank_between(lo: Option<&str>, hi: Option<&str>) -> String {
    const BELOW: u8 = b'a' - 1;
    const ABOVE: u8 = b'z' + 1;
    let lo = lo.unwrap_or("").as_bytes();
    let mut hi = hi.map(str::as_bytes);
    let mut out = Vec::new();
    for i in 0..1024 {
        let a = lo.get(i).copied().unwrap_or(BELOW);
        let b = match hi {
            Some(h) => match h.get(i) {
                Some(&b) => b,
                // `hi` is not above `lo` (bad input): only `lo` bounds.
                None => {
                    hi = None;
                    ABOVE
                }
            },
            None => ABOVE,
        };
        if b > a + 1 {
            let mid = a + (b - a) / 2;
            if mid > b'a' {
                out.push(mid);
                break;
            }
            out.push(b'a');
            hi = None;
        } else if a == b {
            out.push(a);
        } else if a == BELOW {
            out.push(b);
        } else {
            out.push(a);
            hi = None;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_number_keep_order_and_length() {
        let ranks: Vec<String> = (1..2000).map(rank_of_number).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]));
        assert!(ranks.iter().all(|r| r.len() == 7 && !r.ends_with('a')));
        let m = rank_between(Some(&ranks[0]), Some(&ranks[1]));
        assert!(ranks[0] < m && m < ranks[1], "{m}");
    }

    #[test]
    fn ranks_fall_strictly_between() {
        let mut ranks = vec![rank_between(None, None)];
        for _ in 0..50 {
            let last = ranks.last().cloned();
            ranks.push(rank_between(last.as_deref(), None));
        }
        for w in ranks.windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
        let (a, b) = ("n".to_owned(), "o".to_owned());
        let mut lo = a.clone();
        for _ in 0..30 {
            let m = rank_between(Some(&lo), Some(&b));
            assert!(lo < m && m < b, "{lo} {m} {b}");
            lo = m;
        }
        for hi in ["b", "am", "ab", "n"] {
            let m = rank_between(None, Some(hi));
            assert!(m.as_str() < hi && !m.ends_with('a'), "{m} {hi}");
        }
        let m = rank_between(Some("az"), Some("b"));
        assert!("az" < m.as_str() && m.as_str() < "b", "{m}");
    }
}
