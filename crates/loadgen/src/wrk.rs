//! The closed-loop reads again with `wrk` as the client: a process of its own, as the issue's
//! own figures were made (`--wrk`). The proofs are signed beforehand and handed to wrk in a file;
//! each of its threads takes every n-th line, so that no two requests carry one `jti`.

use std::process::Command;

use anyhow::{Context, bail};

/// wrk's script: each thread keeps its own share of the proofs and sends one per request.
const SCRIPT: &str = r#"
local next_id = 0
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end
function init(args)
  local threads = tonumber(args[2])
  proofs, sent = {}, 0
  local i = 0
  for line in io.lines(args[1]) do
    if i % threads == id then proofs[#proofs + 1] = line end
    i = i + 1
  end
end
function request()
  sent = sent + 1
  -- Past the last proof, a request the broker refuses: counted as an error, never a replay.
  return wrk.format(nil, nil, { ["Proof"] = proofs[sent] or "exhausted" })
end
"#;

/// What wrk measured.
pub(crate) struct Run {
    pub requests: u64,
    pub errors: u64,
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Runs wrk against `url` for `seconds` over `connections` on `threads` threads, each request
/// carrying one of `proofs`.
pub(crate) fn run(
    url: &str,
    proofs: &[String],
    threads: usize,
    connections: usize,
    seconds: u64,
) -> anyhow::Result<Run> {
    // Removed with its files when it goes out of scope.
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("wrk-proofs.lua");
    let list = dir.path().join("wrk-proofs.txt");
    std::fs::write(&script, SCRIPT)?;
    std::fs::write(&list, proofs.join("\n") + "\n")?;
    let out = Command::new("wrk")
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg("-s")
        .arg(&script)
        .arg(url)
        .arg("--")
        .arg(&list)
        .arg(threads.to_string())
        .output()
        .context("run wrk (is it installed? Debian's package `wrk`)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse(&text).with_context(|| format!("wrk's output not understood:\n{text}"))
}

/// Reads wrk's report: `N requests in …`, `Non-2xx or 3xx responses: N`, `Socket errors: …`,
/// `Requests/sec: R` and the `--latency` distribution's 50 % and 99 % lines.
fn parse(text: &str) -> Option<Run> {
    let mut run = Run {
        requests: 0,
        errors: 0,
        rate: f64::NAN,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
    };
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some(n), Some("requests")) => run.requests = n.parse().ok()?,
            (Some("Requests/sec:"), Some(r)) => run.rate = r.parse().ok()?,
            (Some("50%"), Some(t)) => run.p50_ms = millis(t)?,
            (Some("99%"), Some(t)) => run.p99_ms = millis(t)?,
            _ if line.starts_with("Non-2xx or 3xx responses:") => {
                run.errors += line.rsplit(' ').next()?.parse::<u64>().ok()?;
            }
            // `Socket errors: connect 0, read 0, write 0, timeout 0`
            _ if line.starts_with("Socket errors:") => {
                run.errors += line
                    .split(',')
                    .filter_map(|p| p.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    (run.requests > 0 && run.rate.is_finite()).then_some(run)
}

/// wrk's durations: `635.91us`, `1.20ms`, `2.00s`.
fn millis(t: &str) -> Option<f64> {
    let (value, scale) = if let Some(v) = t.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = t.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1e3)
    } else {
        return None;
    };
    Some(value.parse::<f64>().ok()? * scale)
}
