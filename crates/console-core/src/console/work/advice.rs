//! `advice.suggestions`: the issues most similar to a new one, scored by BM25 with each
//! word's count of issues kept a minute ([`WordCounts`]).

use super::*;
use crate::work::search;

/// How many of the newest issues sharing a word with a new one `advice.suggestions` scores.
pub const SIMILAR_CANDIDATES: u32 = 50;
/// How many of a new issue's rarest words draw those candidates.
pub const SIMILAR_DRAWN_BY: usize = 3;
/// How long `advice.suggestions` keeps a word's count, and the number of issues.
const WORD_COUNTS_FOR: chrono::Duration = chrono::Duration::seconds(60);
/// Words whose counts are kept at most; past it the kept counts start afresh.
const WORD_COUNTS_KEPT: usize = 4096;

/// The word counts `advice.suggestions` weighs words by (how many issues hold each, and how
/// many issues there are), each kept [`WORD_COUNTS_FOR`]: a weight a minute old ranks near
/// enough, and reading a common word's count reads its whole posting list.
#[derive(Debug, Default)]
pub(in crate::console) struct WordCounts {
    kept: std::sync::Mutex<KeptCounts>,
}

#[derive(Debug, Default)]
struct KeptCounts {
    words: HashMap<String, (i64, Time)>,
    total: Option<(i64, Time)>,
}

impl WordCounts {
    /// The counts kept and fresh at `now` (`None` where not), the total if fresh, and the
    /// indexes of the words to read.
    fn lookup(&self, words: &[String], now: Time) -> (Vec<Option<i64>>, Option<i64>, Vec<usize>) {
        let fresh = |at: &Time| *at <= now && now - *at < WORD_COUNTS_FOR;
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        // A count of one or none is read again: the issue being advised holds each of its
        // words, so such a count says no other issue held the word, and that changes with the
        // next issue that does (the match that matters most). A rare word is cheap to count.
        let counts: Vec<Option<i64>> = words
            .iter()
            .map(|w| {
                kept.words
                    .get(w)
                    .filter(|(n, at)| *n > 1 && fresh(at))
                    .map(|(n, _)| *n)
            })
            .collect();
        let missing = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_none())
            .map(|(i, _)| i)
            .collect();
        let total = kept.total.filter(|(_, at)| fresh(at)).map(|(n, _)| n);
        (counts, total, missing)
    }

    /// Keeps the counts read, and the number of issues when it was read.
    fn keep(&self, words: &[String], counts: &[i64], total: Option<i64>, now: Time) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.words.len() + words.len() > WORD_COUNTS_KEPT {
            kept.words.clear();
        }
        for (w, n) in words.iter().zip(counts) {
            kept.words.insert(w.clone(), (*n, now));
        }
        if let Some(total) = total {
            kept.total = Some((total, now));
        }
    }
}

/// One of `advice.suggestions` on a new issue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suggestion {
    #[serde(rename = "ref")]
    pub reference: String,
    pub title: String,
}

impl Issues<'_> {
    /// The three items most similar to a new issue, from the same index, read after its write
    /// committed (so it never slows or blocks the write); empty when the search fails.
    ///
    /// The newest [`SIMILAR_CANDIDATES`] issues holding one of the title's [`SIMILAR_DRAWN_BY`]
    /// rarest words that another issue holds too are scored by BM25 over all its words
    /// ([`search::rank_similar`]), each word weighted by how many issues hold it. Those counts
    /// are what the index's own `bm25` reads whole posting lists for on every query (a common
    /// word's, tens of thousands of rows on 100,000 issues); here they are kept a minute
    /// ([`WordCounts`]), so an issue's advice reads only its candidates, with no transaction
    /// (the counts and the candidates need not agree).
    pub async fn similar_to(&self, key: &IssueKey, title: &str) -> Vec<Suggestion> {
        let mut words = search::words(title);
        words.sort_unstable();
        words.dedup();
        if words.is_empty() {
            return Vec::new();
        }
        let found = async {
            let mut tx = self.console.parts.storage.read_loose().await?;
            let (counts, total) = self.word_counts(&mut *tx, &words).await?;
            // Drawn by the rarest words another issue holds too (this one holds each): they
            // say the most about likeness, and each word drawn by is a posting list to walk.
            let mut by_rarity: Vec<(i64, &String)> = counts
                .iter()
                .copied()
                .zip(&words)
                .filter(|(n, _)| *n > 1)
                .collect();
            by_rarity.sort();
            let drawn: Vec<String> = by_rarity
                .into_iter()
                .take(SIMILAR_DRAWN_BY)
                .map(|(_, w)| w.clone())
                .collect();
            let candidates = tx
                .issues()
                .similar_candidates(&drawn, SIMILAR_CANDIDATES)
                .await?;
            Ok::<_, crate::storage::StorageError>(search::rank_similar(
                &words,
                &counts,
                total,
                candidates,
                key.as_str(),
                3,
            ))
        };
        match found.await {
            Ok(found) => found
                .into_iter()
                .map(|c| Suggestion {
                    reference: console_ref(SearchKind::Issue, &c.key),
                    title: c.title,
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "similar issues not found");
                Vec::new()
            }
        }
    }

    /// How many issues hold each of `words`, and how many there are: from the counts kept,
    /// the rest read in `tx` (and kept).
    async fn word_counts(
        &self,
        tx: &mut dyn WorkTx,
        words: &[String],
    ) -> Result<(Vec<i64>, i64), crate::storage::StorageError> {
        let now = self.console.now();
        let (mut counts, total, missing) = self.console.advice.lookup(words, now);
        let unknown: Vec<String> = missing.iter().map(|&i| words[i].clone()).collect();
        let read = if unknown.is_empty() {
            Vec::new()
        } else {
            tx.issues().word_counts(&unknown).await?
        };
        let read_total = match total {
            Some(_) => None,
            None => Some(tx.issues().issue_count().await?),
        };
        for (&i, n) in missing.iter().zip(&read) {
            counts[i] = Some(*n);
        }
        self.console.advice.keep(&unknown, &read, read_total, now);
        let total = total.or(read_total).unwrap_or(0);
        Ok((counts.into_iter().map(|c| c.unwrap_or(0)).collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_counts_are_kept_a_minute() {
        let kept = WordCounts::default();
        let t0 = chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000);
        let words: Vec<String> = ["refund", "fees"].map(String::from).into();
        assert_eq!(
            kept.lookup(&words, t0),
            (vec![None, None], None, vec![0, 1])
        );
        kept.keep(&words, &[7, 1], Some(100), t0);
        let later = t0 + chrono::Duration::seconds(59);
        // A count of one (the advised issue's own word) is read again each time.
        assert_eq!(
            kept.lookup(&words, later),
            (vec![Some(7), None], Some(100), vec![1])
        );
        // Counts kept later leave the number of issues its time when not read with them.
        kept.keep(&words[1..], &[3], None, later);
        assert_eq!(
            kept.lookup(&words, later),
            (vec![Some(7), Some(3)], Some(100), vec![])
        );
        // A minute on, or a clock gone back, reads them again.
        for at in [t0 + WORD_COUNTS_FOR, t0 - chrono::Duration::seconds(1)] {
            let (counts, total, _) = kept.lookup(&words, at);
            assert_eq!((&counts[..1], total), (&[None][..], None), "{at}");
        }
        // Past the cap, the kept counts start afresh.
        let many: Vec<String> = (0..WORD_COUNTS_KEPT).map(|i| format!("w{i}")).collect();
        kept.keep(&many, &vec![2; many.len()], None, t0);
        assert_eq!(kept.lookup(&words, t0).0, vec![None, None]);
        assert_eq!(kept.lookup(&many[..1], t0).0, vec![Some(2)]);
    }
}
