//! Search across kinds: each kind's index ranks its own matches, and the kinds are merged by
//! reciprocal rank fusion (Cormack, Clarke and Büttcher 2009; k = 60), ties broken by the row's
//! score in its kind, then the newer, then `(kind, id)` (protocol §6.5).

use crate::work::model::{Candidate, Hit, SearchKind, SearchRow};

/// RRF's constant.
pub const RRF_K: f64 = 60.0;
/// How many of each kind's best matches the pages can reach.
pub const PER_KIND: u32 = 100;

/// The words of a query, for the indexes: letters and digits runs, lowercased, at most 32.
pub fn words(q: &str) -> Vec<String> {
    runs(q).map(str::to_lowercase).take(32).collect()
}

/// The runs of letters and digits in `text`, as they are.
fn runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// Whether `token` (a run of letters and digits, as it is) is one a search for `words`
/// (lowercase) matches: it begins with one of them, case aside, as the indexes' prefix
/// queries match ("deplo" matches "Deploy").
pub fn matches(token: &str, words: &[String]) -> bool {
    words.iter().any(|w| {
        if token.is_ascii() {
            token.len() >= w.len() && token.as_bytes()[..w.len()].eq_ignore_ascii_case(w.as_bytes())
        } else {
            token.to_lowercase().starts_with(w.as_str())
        }
    })
}

/// The runs of letters and digits in `text`: each one's byte range and character range.
fn spans(text: &str) -> Vec<([usize; 2], [usize; 2])> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize)> = None;
    let mut chars = 0;
    for (b, c) in text.char_indices() {
        if c.is_alphanumeric() {
            open.get_or_insert((b, chars));
        } else if let Some((b0, c0)) = open.take() {
            out.push(([b0, b], [c0, chars]));
        }
        chars += 1;
    }
    if let Some((b0, c0)) = open {
        out.push(([b0, text.len()], [c0, chars]));
    }
    out
}

/// The words of `text` a search for `words` matches ([`matches`]): each `[start, end)` in
/// characters (Unicode scalar values), in order. The API's rows carry them beside their title
/// and snippet, so a client marks the words without reading markup from stored text.
pub fn marks(text: &str, words: &[String]) -> Vec<[usize; 2]> {
    if words.is_empty() {
        return Vec::new();
    }
    spans(text)
        .into_iter()
        .filter(|([b0, b1], _)| matches(&text[*b0..*b1], words))
        .map(|(_, c)| c)
        .collect()
}

/// `text` cut into its parts, each with whether it is a matched word ([`matches`]), in order:
/// a page writes each part escaped, the matched ones inside `<mark>`.
pub fn marked(text: &str, words: &[String]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut at = 0;
    for ([b0, b1], _) in spans(text) {
        if words.is_empty() || !matches(&text[b0..b1], words) {
            continue;
        }
        if b0 > at {
            out.push((text[at..b0].to_owned(), false));
        }
        out.push((text[b0..b1].to_owned(), true));
        at = b1;
    }
    if at < text.len() {
        out.push((text[at..].to_owned(), false));
    }
    out
}

/// A snippet of `text` around the first of `words` it holds (word beginnings, case-insensitive):
/// at most `width` words, with `…` where it was cut; the start of `text` when none is there.
/// Made here rather than by the index (SQLite's `snippet`, PostgreSQL's `ts_headline`), so it
/// is made for the page's rows alone and reads the same on both databases.
pub fn snippet(text: &str, words: &[String], width: usize) -> String {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let hit = tokens
        .iter()
        .position(|t| runs(t).any(|w| matches(w, words)));
    let width = width.max(1);
    let start = hit.map(|h| h.saturating_sub(width / 3)).unwrap_or(0);
    let end = (start + width).min(tokens.len());
    let start = end.saturating_sub(width).min(start);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&tokens[start..end].join(" "));
    if end < tokens.len() {
        out.push('…');
    }
    out
}

/// BM25's constants, as SQLite's `bm25` and Lucene take them.
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// The `n` candidates most like a text of `words` by BM25 over the words of each one's title
/// and labels, best first (ties: the order given, newest first, then the key), `skip` (the new
/// issue itself) left out. `counts[i]` is how many of `total` issues hold `words[i]`; each
/// candidate's length is compared with the candidates' average length.
pub fn rank_similar(
    words: &[String],
    counts: &[i64],
    total: i64,
    candidates: Vec<Candidate>,
    skip: &str,
    n: usize,
) -> Vec<Candidate> {
    let total = total.max(1) as f64;
    // Lucene's IDF, never negative, so a word in most issues weighs little, not less than
    // nothing.
    let idf: Vec<f64> = counts
        .iter()
        .map(|&c| {
            let c = (c.max(1) as f64).min(total);
            (1.0 + (total - c + 0.5) / (c + 0.5)).ln()
        })
        .collect();
    // Each text lowercased once and cut where `words` cuts, with no string per word.
    let lowered: Vec<String> = candidates.iter().map(|c| c.text.to_lowercase()).collect();
    let texts: Vec<Vec<&str>> = lowered.iter().map(|t| runs(t).collect()).collect();
    let average =
        (texts.iter().map(Vec::len).sum::<usize>() as f64 / texts.len().max(1) as f64).max(1.0);
    let mut scored: Vec<(f64, usize, Candidate)> = candidates
        .into_iter()
        .zip(texts)
        .enumerate()
        .filter(|(_, (c, _))| c.key != skip)
        .map(|(order, (c, text))| {
            let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * text.len() as f64 / average);
            let score = words
                .iter()
                .zip(&idf)
                .map(|(w, idf)| {
                    let tf = text.iter().filter(|t| **t == w.as_str()).count() as f64;
                    idf * tf * (BM25_K1 + 1.0) / (tf + norm)
                })
                .sum::<f64>();
            (score, order, c)
        })
        .filter(|(score, _, _)| *score > 0.0)
        .collect();
    scored.sort_by(|(sa, oa, a), (sb, ob, b)| {
        sb.total_cmp(sa).then(oa.cmp(ob)).then(a.key.cmp(&b.key))
    });
    scored.into_iter().take(n).map(|(_, _, c)| c).collect()
}

/// A kind's window of matches (its newest, newest first, each with the text its index holds)
/// in BM25 order over those texts, best first (ties: the window's order), each hit's score
/// its BM25. A word counts in a text wherever a run of it begins with the word ([`matches`]),
/// and each word's document frequency and the average length are the window's own: scoring
/// reads the window alone, never every match (issue 48: at 100,000 issues BM25 over every
/// match of a common word was most of a search's 5.5 ms).
pub fn rank_window(words: &[String], window: Vec<(Hit, String)>) -> Vec<Hit> {
    // Each text's length in words and each word's count in it.
    let counted: Vec<(usize, Vec<f64>)> = window
        .iter()
        .map(|(_, t)| {
            let text: Vec<&str> = runs(t).collect();
            let tf = words
                .iter()
                .map(|w| {
                    text.iter()
                        .filter(|x| matches(x, std::slice::from_ref(w)))
                        .count() as f64
                })
                .collect();
            (text.len(), tf)
        })
        .collect();
    let n = counted.len() as f64;
    let idf: Vec<f64> = (0..words.len())
        .map(|i| {
            let df = counted.iter().filter(|(_, tf)| tf[i] > 0.0).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let average = (counted.iter().map(|(len, _)| *len).sum::<usize>() as f64 / n.max(1.0)).max(1.0);
    let mut scored: Vec<(f64, usize, Hit)> = window
        .into_iter()
        .zip(counted)
        .enumerate()
        .map(|(order, ((hit, _), (len, tf)))| {
            let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len as f64 / average);
            let score = tf
                .iter()
                .zip(&idf)
                .map(|(tf, idf)| idf * tf * (BM25_K1 + 1.0) / (tf + norm))
                .sum::<f64>();
            (score, order, hit)
        })
        .collect();
    scored.sort_by(|(sa, oa, _), (sb, ob, _)| sb.total_cmp(sa).then(oa.cmp(ob)));
    scored
        .into_iter()
        .map(|(score, _, mut h)| {
            h.score = score;
            h
        })
        .collect()
}

/// A kind's hits best first: the higher score, then the newer, then the id.
pub fn by_score(hits: &mut [Hit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.at.cmp(&a.at))
            .then(a.id.cmp(&b.id))
    });
}

/// Merges each kind's ranked hits into one list by reciprocal rank fusion.
pub fn fuse(
    kinds: Vec<(SearchKind, Vec<Hit>)>,
    reference: impl Fn(SearchKind, &str) -> String,
) -> Vec<SearchRow> {
    let mut scored: Vec<(f64, SearchKind, Hit)> = Vec::new();
    for (kind, hits) in kinds {
        for (rank, h) in hits.into_iter().enumerate() {
            scored.push((1.0 / (RRF_K + rank as f64 + 1.0), kind, h));
        }
    }
    scored.sort_by(|(fa, ka, a), (fb, kb, b)| {
        fb.total_cmp(fa)
            .then(b.score.total_cmp(&a.score))
            .then(b.at.cmp(&a.at))
            .then(ka.cmp(kb))
            .then(a.id.cmp(&b.id))
    });
    scored
        .into_iter()
        .map(|(_, kind, h)| SearchRow {
            kind,
            reference: reference(kind, &h.id),
            page: page_of(kind, &h),
            id: h.id,
            title: h.title,
            snippet: h.snippet,
            project: h.project,
            at: h.at,
            issue: h.issue,
            artifact: h.artifact,
            title_marks: Vec::new(),
            snippet_marks: Vec::new(),
            broadcast: h.broadcast,
        })
        .collect()
}

/// The console page that shows a match: an issue's, a document's, an ask's or a message's
/// own page; a comment on its document's discussion or its issue's page, at the comment.
pub fn page_of(kind: SearchKind, h: &Hit) -> String {
    match kind {
        SearchKind::Issue => format!("/issues/{}", h.id),
        SearchKind::Document => format!("/artifacts/{}", h.id),
        SearchKind::Ask => format!("/asks/{}", h.id),
        // Issue 48: found from the broker by its id, not from an index.
        SearchKind::Request => format!("/requests/{}", h.id),
        SearchKind::Message => match &h.broadcast {
            Some(b) => format!("/broadcasts/{b}"),
            None => format!("/messages/{}", h.id),
        },
        SearchKind::Comment => match (&h.artifact, &h.issue) {
            (Some(a), _) => format!("/artifacts/{a}/discussion#comment-{}", h.id),
            (None, Some(k)) => format!("/issues/{k}#comment-{}", h.id),
            (None, None) => format!("/search?q={}", h.id),
        },
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn hit(id: &str, score: f64, at: i64) -> Hit {
        Hit {
            id: id.into(),
            title: id.into(),
            snippet: String::new(),
            project: None,
            issue: None,
            artifact: None,
            broadcast: None,
            at: chrono::Utc
                .timestamp_opt(at, 0)
                .single()
                .unwrap_or_default(),
            score,
        }
    }

    fn candidate(key: &str, text: &str) -> Candidate {
        Candidate {
            key: key.into(),
            title: text.into(),
            text: text.into(),
        }
    }

    #[test]
    fn similar_items_weigh_rare_words_above_common_ones() {
        let words = words("Refund the fees");
        // "the" is in nearly every issue, "refund" in two, "fees" in ten.
        let counts = [2, 990, 10];
        let ranked = rank_similar(
            &words,
            &counts,
            1000,
            vec![
                candidate("P-9", "The the the page"),
                candidate("P-8", "Fees on the invoice"),
                candidate("P-7", "Refund a payment"),
                candidate("P-6", "Nothing alike"),
                candidate("P-5", "Refund the fees twice"),
            ],
            "P-10",
            3,
        );
        let keys: Vec<&str> = ranked.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["P-5", "P-7", "P-8"]);
    }

    #[test]
    fn similar_items_leave_out_the_new_one_and_those_sharing_no_word() {
        let words = words("rotate keys");
        let ranked = rank_similar(
            &words,
            &[3, 3],
            100,
            vec![
                candidate("OPS-4", "Rotate keys"),
                candidate("OPS-3", "Upgrade PostgreSQL"),
                candidate("OPS-2", "Rotate keys"),
                candidate("OPS-1", "Rotate keys"),
            ],
            "OPS-4",
            3,
        );
        // Equal scores keep the order given (newest first).
        let keys: Vec<&str> = ranked.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["OPS-2", "OPS-1"]);
        assert!(rank_similar(&words, &[3, 3], 100, Vec::new(), "X-1", 3).is_empty());
    }

    #[test]
    fn words_are_runs_of_letters_and_digits() {
        assert_eq!(
            words("Refund \"partial\"* OR x:y"),
            ["refund", "partial", "or", "x", "y"]
        );
        assert!(words("  -- ").is_empty());
    }

    #[test]
    fn snippets_center_on_the_first_match() {
        let w = |s: &str| words(s);
        assert_eq!(
            snippet("Refund in another currency", &w("currency"), 16),
            "Refund in another currency"
        );
        let long = (1..=40)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(snippet(&long, &w("w20"), 6), "…w18 w19 w20 w21 w22 w23…");
        assert_eq!(snippet(&long, &w("nothing"), 3), "w1 w2 w3…");
        assert_eq!(snippet(&long, &w("w40"), 3), "…w38 w39 w40");
        assert_eq!(
            snippet("Fix: REFUND, now", &w("refund"), 16),
            "Fix: REFUND, now"
        );
        assert_eq!(snippet("", &w("x"), 16), "");
    }

    #[test]
    fn marks_are_the_words_a_prefix_matches_in_characters() {
        let w = words("deplo Ünic");
        // Characters, not bytes: "É" is two bytes.
        assert_eq!(
            marks("É Deployed, redeploy; ünicode <deploy>", &w),
            [[2, 10], [22, 29], [31, 37]]
        );
        assert!(marks("nothing here", &w).is_empty());
        assert!(marks("deploy", &[]).is_empty());
        assert_eq!(
            marked("<b>Deploy</b>!", &w),
            [
                ("<b>".to_owned(), false),
                ("Deploy".to_owned(), true),
                ("</b>!".to_owned(), false)
            ]
        );
        assert_eq!(marked("plain", &w), [("plain".to_owned(), false)]);
        assert!(marked("", &w).is_empty());
    }

    #[test]
    fn a_window_ranks_by_bm25_then_its_own_order() {
        let w = words("deploy");
        let ranked = rank_window(
            &w,
            vec![
                (hit("long", 0.0, 1), "deploy a b c d e f g h i j".into()),
                (hit("once", 0.0, 1), "Deployment now".into()),
                (hit("twice", 0.0, 1), "deploy: deploy now".into()),
                (hit("tie", 0.0, 1), "Deployment now".into()),
            ],
        );
        let ids: Vec<&str> = ranked.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["twice", "once", "tie", "long"]);
        assert!(ranked.windows(2).all(|p| p[0].score >= p[1].score));
        assert!(ranked[0].score > 0.0);
    }

    #[test]
    fn reciprocal_rank_fusion_interleaves_kinds_with_the_tie_breaks() {
        let rows = fuse(
            vec![
                (
                    SearchKind::Issue,
                    vec![hit("I1", 9.0, 1), hit("I2", 5.0, 1)],
                ),
                (
                    SearchKind::Document,
                    vec![hit("D1", 3.0, 1), hit("D2", 1.0, 5)],
                ),
            ],
            |k, id| format!("{k:?}/{id}"),
        );
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        // Ranks tie pairwise: the higher score in its kind first.
        assert_eq!(ids, ["I1", "D1", "I2", "D2"]);
        // Same rank and score: the newer, then the kind.
        let rows = fuse(
            vec![
                (SearchKind::Issue, vec![hit("I1", 1.0, 1)]),
                (SearchKind::Ask, vec![hit("A1", 1.0, 2)]),
                (SearchKind::Comment, vec![hit("C1", 1.0, 1)]),
            ],
            |_, id| id.into(),
        );
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["A1", "I1", "C1"]);
    }
}
