//! Unit and property tests of the [`Masker`]: random values, encodings and chunk boundaries.

use super::*;
use proptest::prelude::*;

fn mask_chunks(m: &mut Masker, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts {
        let c = c.min(input.len()).max(at);
        m.push(&input[at..c], &mut out);
        at = c;
    }
    m.push(&input[at..], &mut out);
    m.finish(&mut out);
    out
}

fn mask_all(values: &[&[u8]], input: &[u8]) -> Vec<u8> {
    let mut m = Masker::new(values.iter().copied()).expect("masker");
    mask_chunks(&mut m, input, &[])
}

/// An independent reference: at each position, the longest pattern starting there replaces it.
fn naive(values: &[Vec<u8>], input: &[u8]) -> Vec<u8> {
    let pats: Vec<Zeroizing<Vec<u8>>> = values
        .iter()
        .filter(|v| maskable(v))
        .flat_map(|v| patterns(v))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let best = pats
            .iter()
            .filter(|p| input[i..].starts_with(p))
            .map(|p| p.len())
            .max();
        match best {
            Some(n) => {
                out.extend_from_slice(CONCEALED);
                i += n;
            }
            None => {
                out.push(input[i]);
                i += 1;
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The characters of base64(prefix ++ value ++ suffix) whose bits all come from the value.
fn embedded_b64(
    engine: &base64::engine::GeneralPurpose,
    pre: &[u8],
    v: &[u8],
    suf: &[u8],
) -> (String, String) {
    let whole = [pre, v, suf].concat();
    let enc = engine.encode(&whole);
    let from = (pre.len() * 8).div_ceil(6);
    let to = ((pre.len() + v.len()) * 8) / 6;
    let inner = enc.get(from..to).unwrap_or_default().to_string();
    (enc, inner)
}

#[test]
fn a_value_pushed_byte_by_byte_is_concealed() {
    let v = b"s3cr3t-v@lue";
    let mut m = Masker::new([&v[..]]).expect("masker");
    let input = b"before s3cr3t-v@lue after";
    let cuts: Vec<usize> = (1..input.len()).collect();
    let out = mask_chunks(&mut m, input, &cuts);
    assert_eq!(out, b"before <concealed by countersign> after");
}

#[test]
fn a_prompt_that_begins_no_pattern_is_emitted_at_once() {
    let mut m = Masker::new([&b"hunter22"[..]]).expect("masker");
    let mut out = Vec::new();
    m.push(b"Password: ", &mut out);
    assert_eq!(out, b"Password: ");
    assert_eq!(m.held(), 0);
    // A tail that could begin the value is held, and released once it cannot.
    m.push(b"hun", &mut out);
    assert_eq!(out, b"Password: ");
    assert_eq!(m.held(), 3);
    m.push(b"gry\n", &mut out);
    assert_eq!(out, b"Password: hungry\n");
}

#[test]
fn json_escaping_is_concealed_as_serde_json_and_python_emit_it() {
    let v = "qu\"ote\\back/slash\n\u{1}é😀";
    let serde = serde_json::to_string(v).expect("json");
    let python = "\"qu\\\"ote\\\\back\\/slash\\n\\u0001\\u00e9\\ud83d\\ude00\"";
    for doc in [format!("{{\"k\":{serde}}}"), format!("{{\"k\": {python}}}")] {
        let out = mask_all(&[v.as_bytes()], doc.as_bytes());
        assert!(
            contains(&out, CONCEALED) && !contains(&out, b"ote"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[test]
fn percent_encodings_are_concealed() {
    let v = b"a b/c+d~";
    for enc in [&b"a%20b%2Fc%2Bd~"[..], b"a+b%2fc%2bd~", b"a+b%2Fc%2Bd%7E"] {
        let out = mask_all(&[v], &[b"?x=", enc, b"&y"].concat());
        assert_eq!(out, b"?x=<concealed by countersign>&y", "{enc:?}");
    }
}

#[test]
fn base64_at_every_alignment_is_concealed() {
    let v = b"correct horse battery";
    for engine in [&STANDARD, &URL_SAFE] {
        for pre in [&b""[..], b"x", b"xy"] {
            let (enc, inner) = embedded_b64(engine, pre, v, b"trailing bytes");
            let out = mask_all(&[v], enc.as_bytes());
            assert!(!contains(&out, inner.as_bytes()), "{pre:?}: {enc}");
            assert!(contains(&out, CONCEALED));
        }
        let out = mask_all(&[v], engine.encode(v).as_bytes());
        assert_eq!(out, CONCEALED);
    }
}

#[test]
fn short_values_are_not_masked() {
    assert!(!maskable(b"abc"));
    let out = mask_all(&[b"abc"], b"abc abcd");
    assert_eq!(out, b"abc abcd");
}

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    let text = proptest::collection::vec(
        prop_oneof![
            any::<char>().prop_filter("no NUL", |c| *c != '\0'),
            proptest::sample::select(vec![
                '"', '\\', '/', '\n', '\t', '\u{1}', ' ', '+', '%', 'é', '😀'
            ]),
            proptest::char::range('a', 'z'),
        ],
        4..24,
    )
    .prop_map(|cs| cs.into_iter().collect::<String>().into_bytes());
    let binary = proptest::collection::vec(1u8..=255, 4..24);
    prop_oneof![text, binary]
}

/// How a value shows in the output: raw, JSON, base64 at an alignment, percent-encoded.
#[derive(Debug, Clone)]
enum Form {
    Raw,
    Json,
    Base64 {
        url: bool,
        pre: Vec<u8>,
        suf: Vec<u8>,
    },
    Percent,
}

fn form_strategy() -> impl Strategy<Value = Form> {
    prop_oneof![
        Just(Form::Raw),
        Just(Form::Json),
        Just(Form::Percent),
        (
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..3),
            proptest::collection::vec(any::<u8>(), 0..4)
        )
            .prop_map(|(url, pre, suf)| Form::Base64 { url, pre, suf }),
    ]
}

/// The bytes a child prints for `v` in `form`, and the part that must not reach the output.
fn render(v: &[u8], form: &Form) -> (Vec<u8>, Vec<u8>) {
    match form {
        Form::Raw => (v.to_vec(), v.to_vec()),
        Form::Json => match std::str::from_utf8(v) {
            Ok(s) => {
                let j = serde_json::to_string(s).expect("json");
                let inner = j.as_bytes()[1..j.len() - 1].to_vec();
                (j.into_bytes(), inner)
            }
            Err(_) => (v.to_vec(), v.to_vec()),
        },
        Form::Base64 { url, pre, suf } => {
            let engine = if *url { &URL_SAFE } else { &STANDARD };
            let (enc, inner) = embedded_b64(engine, pre, v, suf);
            (enc.into_bytes(), inner.into_bytes())
        }
        Form::Percent => {
            let mut p = Vec::new();
            for &b in v {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    p.push(b);
                } else {
                    p.extend_from_slice(format!("%{b:02X}").as_bytes());
                }
            }
            (p.clone(), p)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any chunking gives what the reference gives on the whole input: exactly the occurrences
    /// replaced, and none of the printed values or encodings left.
    #[test]
    fn streaming_masks_every_form_at_any_chunking(
        values in proptest::collection::vec(value_strategy(), 1..4),
        pieces in proptest::collection::vec(
            (proptest::collection::vec(1u8..=255, 0..12), any::<proptest::sample::Index>(), form_strategy()),
            1..6,
        ),
        cuts in proptest::collection::vec(0usize..400, 0..8),
    ) {
        let mut input = Vec::new();
        let mut hidden = Vec::new();
        for (filler, which, form) in &pieces {
            input.extend_from_slice(filler);
            input.push(0);
            let (shown, secret) = render(which.get(&values).as_slice(), form);
            input.extend_from_slice(&shown);
            input.push(0);
            hidden.push(secret);
        }
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut m = Masker::new(values.iter().map(Vec::as_slice)).expect("masker");
        let streamed = mask_chunks(&mut m, &input, &cuts);
        prop_assert_eq!(&streamed, &naive(&values, &input));
        for secret in hidden.iter().filter(|s| s.len() >= MIN_PATTERN_LEN) {
            prop_assert!(!contains(&streamed, secret), "{:?} leaked", secret);
        }
        for v in &values {
            prop_assert!(!contains(&streamed, v));
        }
    }

    /// Output in which no value occurs passes through byte for byte, however it is chunked.
    #[test]
    fn binary_without_values_is_unchanged(
        values in proptest::collection::vec(value_strategy(), 1..4),
        input in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(0usize..2048, 0..16),
    ) {
        prop_assume!(naive(&values, &input) == input);
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut m = Masker::new(values.iter().map(Vec::as_slice)).expect("masker");
        prop_assert_eq!(mask_chunks(&mut m, &input, &cuts), input);
    }
}
