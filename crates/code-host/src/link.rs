//! The `Link` header (RFC 8288 §3): the target of the link whose `rel` holds `next`.

/// The URI of the `rel="next"` link in a `Link` field value, if any. Link values are
/// `<uri>; param=value; …` separated by commas (commas inside `<…>` or quotes do not
/// separate); `rel` holds one or more space-separated relation types, compared
/// case-insensitively (RFC 8288 §2.1.1).
pub fn next(value: &str) -> Option<String> {
    links(value)
        .into_iter()
        .find(|(_, rels)| rels.iter().any(|r| r.eq_ignore_ascii_case("next")))
        .map(|(uri, _)| uri)
}

/// Every link: its target and its relation types.
pub fn links(value: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        let uri = rest[open + 1..open + close].trim().to_owned();
        rest = &rest[open + close + 1..];
        // The parameters run to the next comma outside quotes.
        let mut end = rest.len();
        let mut quoted = false;
        for (i, c) in rest.char_indices() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let params = &rest[..end];
        let mut rels = Vec::new();
        for p in params.split(';') {
            let Some((name, v)) = p.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("rel") {
                let v = v.trim().trim_matches('"');
                rels.extend(v.split_ascii_whitespace().map(str::to_owned));
            }
        }
        out.push((uri, rels));
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_next_among_several() {
        let v = r#"<https://api.github.com/repositories/1/pulls?page=2>; rel="next", <https://api.github.com/repositories/1/pulls?page=5>; rel="last""#;
        assert_eq!(
            next(v).as_deref(),
            Some("https://api.github.com/repositories/1/pulls?page=2")
        );
        let v =
            r#"<https://x/?page=1>; rel="prev first", <https://x/?a=1,2>; title="a, b"; rel=NEXT"#;
        assert_eq!(next(v).as_deref(), Some("https://x/?a=1,2"));
        assert_eq!(next(r#"<https://x/?page=1>; rel="prev""#), None);
        assert_eq!(next(""), None);
        assert_eq!(next("garbage <unclosed"), None);
    }
}
