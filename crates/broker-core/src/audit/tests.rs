use super::*;
use zeroize::Zeroizing;

fn sealer() -> Sealer {
    Sealer::new(&Zeroizing::new(vec![7u8; 32])).expect("key")
}

fn chain(s: &Sealer, n: i64) -> Vec<AuditEntry> {
    let mut prev = GENESIS.to_owned();
    let at = Time::from_timestamp_millis(1_700_000_000_000).expect("time");
    (1..=n)
        .map(|p| {
            let body = format!("{{\"n\":{p}}}");
            let hash = entry_hash(&prev, p, at, "grant", "grant:x", &body);
            let e = AuditEntry {
                position: p,
                at,
                kind: "grant".into(),
                subject: "grant:x".into(),
                body,
                prev_hash: prev.clone(),
                seal: s.seal_audit(p, &hash),
                hash: hash.clone(),
            };
            prev = hash;
            e
        })
        .collect()
}

fn walk(s: &Sealer, es: &[AuditEntry]) -> Result<Walk, ChainBreak> {
    let mut w = Walk::default();
    for e in es {
        w.step(s, e)?;
    }
    Ok(w)
}

#[test]
fn own_appends_move_the_follower_only_from_its_head() {
    let w = |position: i64, h: &str| Walk {
        position,
        hash: h.into(),
    };
    let f = Follower::new(Some(w(3, "c")));
    // Chained to another head (a foreign entry came between): no move.
    f.appended(&w(4, "d"), w(6, "f"));
    assert_eq!(f.state().head, w(3, "c"));
    // Chained to the verified head: moves.
    f.appended(&w(3, "c"), w(5, "e"));
    assert_eq!(f.state().head, w(5, "e"));
    // Never backwards, never past a break.
    f.appended(&w(5, "e"), w(5, "x"));
    assert_eq!(f.state().head, w(5, "e"));
    f.state.lock().expect("lock").broken = Some(ChainBreak {
        position: 2,
        reason: BreakReason::Seal,
    });
    f.appended(&w(5, "e"), w(6, "f"));
    assert_eq!(f.state().head, w(5, "e"));
}

#[test]
fn own_appends_reported_out_of_order_still_move_the_follower() {
    let w = |position: i64, h: &str| Walk {
        position,
        hash: h.into(),
    };
    let f = Follower::new(Some(w(0, GENESIS)));
    // Three transactions of one group commit report last, first, middle.
    f.appended(&w(4, "d"), w(6, "f"));
    assert_eq!(f.state().head, w(0, GENESIS));
    f.appended(&w(0, GENESIS), w(2, "b"));
    assert_eq!(f.state().head, w(2, "b"));
    f.appended(&w(2, "b"), w(4, "d"));
    assert_eq!(f.state().head, w(6, "f"));
    // A waiting range whose hash does not match the head it reaches is not taken.
    f.appended(&w(8, "h"), w(9, "i"));
    f.appended(&w(6, "f"), w(8, "other"));
    assert_eq!(f.state().head, w(8, "other"));
    assert!(f.pending.lock().expect("lock").is_empty());
}

#[test]
fn a_chain_verifies() {
    let s = sealer();
    let es = chain(&s, 5);
    let w = walk(&s, &es).expect("verifies");
    assert_eq!((w.position, w.hash.as_str()), (5, es[4].hash.as_str()));
}

#[test]
fn an_edited_body_breaks_at_its_hash() {
    let s = sealer();
    let mut es = chain(&s, 5);
    es[2].body = "{\"n\":99}".into();
    let b = walk(&s, &es).expect_err("breaks");
    assert_eq!((b.position, b.reason), (3, BreakReason::Hash));
}

#[test]
fn a_rehashed_edit_breaks_at_its_seal() {
    let s = sealer();
    let mut es = chain(&s, 5);
    let e = &mut es[2];
    e.body = "{\"n\":99}".into();
    e.hash = entry_hash(&e.prev_hash, e.position, e.at, &e.kind, &e.subject, &e.body);
    let b = walk(&s, &es).expect_err("breaks");
    assert_eq!((b.position, b.reason), (3, BreakReason::Seal));
}

#[test]
fn a_removed_entry_is_a_gap() {
    let s = sealer();
    let mut es = chain(&s, 5);
    es.remove(1);
    let b = walk(&s, &es).expect_err("breaks");
    assert_eq!((b.position, b.reason), (2, BreakReason::Gap));
}

#[test]
fn a_resealed_entry_from_another_chain_breaks_the_link() {
    let s = sealer();
    let mut es = chain(&s, 3);
    let other = {
        let mut o = chain(&s, 3);
        o[0].body = "{}".into();
        o[0].hash = entry_hash(GENESIS, 1, o[0].at, "grant", "grant:x", "{}");
        o[0].seal = s.seal_audit(1, &o[0].hash);
        let h = entry_hash(&o[0].hash, 2, o[1].at, "grant", "grant:x", &o[1].body);
        o[1].prev_hash = o[0].hash.clone();
        o[1].hash = h.clone();
        o[1].seal = s.seal_audit(2, &h);
        o
    };
    es[1] = other[1].clone();
    let b = walk(&s, &es).expect_err("breaks");
    assert_eq!((b.position, b.reason), (2, BreakReason::PrevHash));
}

#[test]
fn another_key_does_not_verify() {
    let s = sealer();
    let es = chain(&s, 2);
    let other = Sealer::new(&Zeroizing::new(vec![8u8; 32])).expect("key");
    let b = walk(&other, &es).expect_err("breaks");
    assert_eq!((b.position, b.reason), (1, BreakReason::Seal));
}
