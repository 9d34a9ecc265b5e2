//! The URL forms [`HostList::parse`] accepts and refuses.

use super::*;

fn parsed(url: &str) -> HostList {
    match HostList::parse(url) {
        Ok(Some(h)) => h,
        other => panic!("{url}: {other:?}"),
    }
}

fn refusal(url: &str) -> String {
    match HostList::parse(url) {
        Err(StorageError::Other(m)) => m,
        other => panic!("{url} was not refused: {other:?}"),
    }
}

#[test]
fn the_forms_libpq_reads_are_accepted() {
    // (URL, hosts, attrs, connect timeout, each host's URL)
    type Case = (
        &'static str,
        &'static [&'static str],
        SessionAttrs,
        Option<u64>,
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        // pg_autoctl show uri's form.
        (
            "postgres://autoctl_node@127.0.0.1:6001,127.0.0.1:6002/db?target_session_attrs=read-write&sslmode=prefer",
            &["127.0.0.1:6001", "127.0.0.1:6002"],
            SessionAttrs::ReadWrite,
            Some(5),
            &[
                "postgres://autoctl_node@127.0.0.1:6001/db?sslmode=prefer",
                "postgres://autoctl_node@127.0.0.1:6002/db?sslmode=prefer",
            ],
        ),
        // ?host= with one port per host, and a connect timeout.
        (
            "postgresql://u:p%40ss@/db?host=a,b&port=5433,5434&connect_timeout=3",
            &["a:5433", "b:5434"],
            SessionAttrs::Any,
            Some(3),
            &[
                "postgresql://u:p%40ss@a:5433/db",
                "postgresql://u:p%40ss@b:5434/db",
            ],
        ),
        // ?host= with one port for all; prefer-standby; an IPv6 address and a socket.
        (
            "postgres://u@/db?host=::1,/run/pg&port=6000&target_session_attrs=prefer-standby",
            &["[::1]:6000", "%2Frun%2Fpg:6000"],
            SessionAttrs::PreferStandby,
            Some(5),
            &[
                "postgres://u@[::1]:6000/db",
                "postgres://u@%2Frun%2Fpg:6000/db",
            ],
        ),
        // Hosts with and without ports, a bracketed IPv6 address; 0 = no limit; 1 s = 2 s.
        (
            "postgres://u:pw@h1,[::1]:6001,h3:6002/db?connect_timeout=0&application_name=x",
            &["h1:5432", "[::1]:6001", "h3:6002"],
            SessionAttrs::Any,
            None,
            &[
                "postgres://u:pw@h1:5432/db?application_name=x",
                "postgres://u:pw@[::1]:6001/db?application_name=x",
                "postgres://u:pw@h3:6002/db?application_name=x",
            ],
        ),
        // One host, but target_session_attrs: ours.
        (
            "postgres://u:pw@h1/db?connect_timeout=1&target_session_attrs=primary",
            &["h1:5432"],
            SessionAttrs::Primary,
            Some(2),
            &["postgres://u:pw@h1:5432/db"],
        ),
        (
            "postgres://h1:1,h2:2?target_session_attrs=standby&load_balance_hosts=disable",
            &["h1:1", "h2:2"],
            SessionAttrs::Standby,
            Some(5),
            &["postgres://h1:1", "postgres://h2:2"],
        ),
        (
            "postgres://h1,h2/db?target_session_attrs=read-only",
            &["h1:5432", "h2:5432"],
            SessionAttrs::ReadOnly,
            Some(5),
            &["postgres://h1:5432/db", "postgres://h2:5432/db"],
        ),
    ];
    for (url, hosts, attrs, timeout, urls) in cases {
        let h = parsed(url);
        assert_eq!(h.hosts, *hosts, "{url}");
        assert_eq!(h.attrs, *attrs, "{url}");
        assert_eq!(h.connect_timeout, timeout.map(Duration::from_secs), "{url}");
        assert_eq!(h.urls(), *urls, "{url}");
        // Each single-host URL is one sqlx reads.
        for u in h.urls() {
            assert!(u.parse::<AnyConnectOptions>().is_ok(), "{u}");
        }
    }
}

#[test]
fn urls_sqlx_reads_as_they_are_are_left_to_it() {
    for url in [
        "postgres://u:pw@h/db",
        "postgres://u:pw@h:5433/db?sslmode=require&connect_timeout=3",
        "postgres:///db?host=/run/postgresql",
        "postgres://u@h/db?target_session_attrs=any",
        "postgresql://h",
        // Not checked here: sqlx reads (or refuses) them as it always did.
        "postgres://u:pw@h:5432/db?port=5433",
        "postgres://u:pw@h/db?connect_timeout=soon",
    ] {
        assert!(matches!(HostList::parse(url), Ok(None)), "{url}");
    }
}

#[test]
fn malformed_urls_are_refused_by_name_without_the_password() {
    let cases: &[(&str, &str)] = &[
        (
            "postgres://u:s3cret@h1:p1,h2/db",
            "the port of host 1 is not a number",
        ),
        (
            "postgres://u:s3cret@h1:0,h2/db",
            "the port of host 1 is not a number",
        ),
        (
            "postgres://u:s3cret@h1,h2:99999/db",
            "the port of host 2 is not a number",
        ),
        (
            "postgres://u:s3cret@h1,,h2/db",
            "host 2 of the URL is empty",
        ),
        (
            "postgres://u:s3cret@/db?host=a,,b",
            "host 2 of ?host= is empty",
        ),
        (
            "postgres://u:s3cret@/db?host=a,b,c&port=1,2",
            "?port= lists 2 ports for 3 hosts",
        ),
        (
            "postgres://u:s3cret@/db?host=a,b&port=1,x",
            "the port of host 2",
        ),
        (
            "postgres://u:s3cret@h/db?host=a,b",
            "both in the URL and in ?host=",
        ),
        (
            "postgres://u:s3cret@h1:1,h2/db?port=5",
            "both in the URL and in ?port=",
        ),
        (
            "postgres://u:s3cret@h1,h2/db?target_session_attrs=writable",
            "target_session_attrs must be",
        ),
        (
            "postgres://u:s3cret@h1,h2/db?connect_timeout=soon",
            "connect_timeout must be",
        ),
        (
            "postgres://u:s3cret@h1,h2/db?connect_timeout=-1",
            "connect_timeout must be",
        ),
        (
            "postgres://u:s3cret@h1,h2/db?host=a&host=b",
            "host is given twice",
        ),
        (
            "postgres://u:s3cret@h1,h2/db?load_balance_hosts=random",
            "load_balance_hosts=random",
        ),
        (
            "postgres://u:s3cret@h/db?hostaddr=1.1.1.1,2.2.2.2&target_session_attrs=primary",
            "hostaddr",
        ),
        (
            "postgres://u:s3cret@[::1:5432,h2/db",
            "host 1 has a '[' with no ']'",
        ),
        (
            "postgres://u:s3cret@[::1]x,h2/db",
            "host 1 has text after its ']'",
        ),
        ("mysql://u:s3cret@h1,h2/db", "not a postgres://"),
        // A password with an unescaped '/' ends the authority early: the refusal names the
        // problem, not the piece of password it met.
        (
            "postgres://u:s3/cret@h1,h2/db?target_session_attrs=read-write",
            "the port of host 1 is not a number",
        ),
    ];
    for (url, expected) in cases {
        let m = refusal(url);
        assert!(m.starts_with("database URL: "), "{url}: {m}");
        assert!(m.contains(expected), "{url}: {m}");
        assert!(
            !m.contains("s3"),
            "{url}: the refusal shows the password: {m}"
        );
    }
}

#[test]
fn the_debug_form_shows_no_password() {
    let h = parsed("postgres://u:s3cret@h1,h2/db?target_session_attrs=read-write");
    let shown = format!("{h:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("h1:5432"), "{shown}");
}

#[test]
fn session_attributes_as_libpq_defines_them() {
    let primary = ServerState {
        in_recovery: false,
        read_only: false,
    };
    let demoted = ServerState {
        in_recovery: false,
        read_only: true,
    };
    let standby = ServerState {
        in_recovery: true,
        read_only: true,
    };
    use SessionAttrs as A;
    let table = [
        (A::Any, [true, true, true]),
        (A::ReadWrite, [true, false, false]),
        (A::ReadOnly, [false, true, true]),
        (A::Primary, [true, true, false]),
        (A::Standby, [false, false, true]),
        (A::PreferStandby, [true, true, true]),
    ];
    for (attrs, fits) in table {
        assert_eq!(
            [
                attrs.fits(primary),
                attrs.fits(demoted),
                attrs.fits(standby)
            ],
            fits,
            "{attrs}"
        );
        assert_eq!(SessionAttrs::parse(attrs.as_str()), Some(attrs));
    }
    assert!(primary.writable() && !demoted.writable() && !standby.writable());
}

/// A connection opened before a failover is dropped at its next checkout; one opened after
/// is kept.
#[test]
fn connections_older_than_the_last_failover_are_dropped() {
    let shared = Shared {
        attrs: SessionAttrs::ReadWrite,
        base: Instant::now() - Duration::from_secs(60),
        failover_at: AtomicU64::new(0),
        generation: AtomicU64::new(0),
        wake: Notify::new(),
    };
    assert!(!shared.opened_before_failover(Duration::from_secs(3600)));
    shared.mark_failover();
    std::thread::sleep(Duration::from_millis(20));
    assert!(shared.opened_before_failover(Duration::from_secs(1)));
    assert!(!shared.opened_before_failover(Duration::from_millis(5)));
    assert_eq!(shared.generation.load(Ordering::Relaxed), 1);
}
