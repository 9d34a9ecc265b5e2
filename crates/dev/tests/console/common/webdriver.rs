//! A minimal W3C WebDriver client over ChromeDriver driving Debian's headless Chromium: enough
//! to navigate, find, type, click, read text and take screenshots.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where Chromium and ChromeDriver are, if installed.
fn find_browser() -> Option<(String, String)> {
    let which = |names: &[&str]| {
        names.iter().find_map(|n| {
            ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"]
                .iter()
                .map(|d| format!("{d}/{n}"))
                .find(|p| std::path::Path::new(p).exists())
        })
    };
    Some((
        which(&["chromium", "chromium-browser"])?,
        which(&["chromedriver"])?,
    ))
}

/// The browser and its driver, or `None` (printing `skipped: …`) where they are not installed;
/// panics instead when `COUNTERSIGN_REQUIRE_BROWSER=1`, so that CI fails.
pub fn browser_or_skip() -> Option<(String, String)> {
    let found = find_browser();
    if found.is_none() {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_BROWSER=1 but chromium or chromedriver is not installed"
        );
        println!("skipped: chromium not installed");
    }
    found
}

/// A ChromeDriver process; killed on drop.
pub struct Driver {
    child: Child,
    pub url: String,
    http: reqwest::Client,
}

impl Drop for Driver {
    /// Ends ChromeDriver and the browsers it started: they run in its own process group.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub async fn start(chromedriver: &str) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = Command::new(chromedriver);
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start chromedriver")?;
        let d = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        };
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = d.http.get(format!("{}/status", d.url)).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                return Ok(d);
            }
            if Instant::now() > until {
                bail!("chromedriver did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A new headless Chromium with a fresh profile.
    pub async fn browser(
        &self,
        chromium: &str,
        profile: &std::path::Path,
    ) -> anyhow::Result<Browser> {
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1200,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let v: Value = self
            .http
            .post(format!("{}/session", self.url))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let id = v["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("new session: {v}"))?
            .to_owned();
        Ok(Browser {
            base: format!("{}/session/{id}", self.url),
            http: self.http.clone(),
        })
    }
}

/// One browser session.
pub struct Browser {
    base: String,
    http: reqwest::Client,
}

impl Browser {
    async fn cmd(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await?.json().await?;
        if let Some(e) = v["value"]["error"].as_str() {
            bail!("webdriver {path}: {e}: {}", v["value"]["message"]);
        }
        Ok(v["value"].clone())
    }

    /// Adds a virtual authenticator (the WebAuthn spec's WebDriver extension): a CTAP2 platform
    /// authenticator that holds resident keys and verifies its user without asking. Answers
    /// its id.
    pub async fn add_virtual_authenticator(&self) -> anyhow::Result<String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/webauthn/authenticator",
                Some(json!({
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": true,
                    "hasUserVerification": true,
                    "isUserConsenting": true,
                    "isUserVerified": true,
                })),
            )
            .await?;
        v.as_str()
            .map(str::to_owned)
            .with_context(|| format!("authenticator id in {v}"))
    }

    /// The credentials a virtual authenticator holds.
    pub async fn virtual_credentials(&self, authenticator: &str) -> anyhow::Result<Vec<Value>> {
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/webauthn/authenticator/{authenticator}/credentials"),
                None,
            )
            .await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// The cookies of the current page's site.
    pub async fn cookies(&self) -> anyhow::Result<Vec<Value>> {
        let v = self.cmd(reqwest::Method::GET, "/cookie", None).await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// Sets a cookie on the current page's site.
    pub async fn add_cookie(&self, cookie: &Value) -> anyhow::Result<()> {
        self.cmd(
            reqwest::Method::POST,
            "/cookie",
            Some(json!({ "cookie": cookie })),
        )
        .await?;
        Ok(())
    }

    /// Resizes the window so that the page's viewport is `width` × `height` CSS pixels
    /// (headless Chromium's window has no frame sideways; its height is made up for).
    pub async fn set_viewport(&self, width: u32, height: u32) -> anyhow::Result<()> {
        let rect = |h: u32| json!({ "width": width, "height": h });
        self.cmd(reqwest::Method::POST, "/window/rect", Some(rect(height)))
            .await?;
        let inner = self.execute("return window.innerHeight").await?;
        let short = i64::from(height) - inner.as_i64().unwrap_or(i64::from(height));
        if short > 0 {
            let h = height + u32::try_from(short).unwrap_or(0);
            self.cmd(reqwest::Method::POST, "/window/rect", Some(rect(h)))
                .await?;
        }
        let got = self
            .execute("return [window.innerWidth, window.innerHeight]")
            .await?;
        anyhow::ensure!(
            got[0] == json!(width),
            "viewport {got} after asking for {width}×{height}"
        );
        Ok(())
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await?;
        Ok(())
    }

    pub async fn current_url(&self) -> anyhow::Result<String> {
        Ok(self
            .cmd(reqwest::Method::GET, "/url", None)
            .await?
            .as_str()
            .unwrap_or("")
            .to_owned())
    }

    async fn find(&self, css: &str) -> anyhow::Result<String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await?;
        v[ELEMENT]
            .as_str()
            .or_else(|| v["ELEMENT"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("element id in {v}"))
    }

    /// Whether an element is rendered (not `hidden`, not inside a hidden parent).
    async fn visible(&self, id: &str) -> anyhow::Result<bool> {
        let script = "const e = arguments[0]; return !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);";
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [{ ELEMENT: id }] })),
        )
        .await
        .map(|v| v == Value::Bool(true))
    }

    /// Waits until `css` matches a displayed element.
    pub async fn wait_for(&self, css: &str, secs: u64) -> anyhow::Result<String> {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let last = match self.find(css).await {
                Ok(id) => match self.visible(&id).await {
                    Ok(true) => return Ok(id),
                    Ok(false) => "not displayed".to_owned(),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() > until {
                bail!("no displayed element matches {css} within {secs} s ({last})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the text of `css` contains `needle`; answers the text.
    pub async fn wait_text(&self, css: &str, needle: &str, secs: u64) -> anyhow::Result<String> {
        let until = Instant::now() + Duration::from_secs(secs);
        let mut last = String::new();
        loop {
            if let Ok(id) = self.find(css).await
                && let Ok(t) = self
                    .cmd(reqwest::Method::GET, &format!("/element/{id}/text"), None)
                    .await
            {
                last = t.as_str().unwrap_or("").to_owned();
                if last.contains(needle) {
                    return Ok(last);
                }
            }
            if Instant::now() > until {
                bail!("{css} did not come to contain {needle:?} within {secs} s (last: {last:?})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of attribute `name` of the displayed element `css` (waiting for it).
    pub async fn attribute(&self, css: &str, name: &str) -> anyhow::Result<String> {
        let id = self.wait_for(css, 10).await?;
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/element/{id}/attribute/{name}"),
                None,
            )
            .await?;
        v.as_str()
            .map(str::to_owned)
            .with_context(|| format!("{css} has no attribute {name}"))
    }

    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        let id = self.wait_for(css, 10).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await?;
        Ok(())
    }

    pub async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let id = self.wait_for(css, 10).await?;
        self.replace_text(&id, text).await
    }

    /// Clears the element `id` and types `text` into it.
    async fn replace_text(&self, id: &str, text: &str) -> anyhow::Result<()> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{id}/clear"),
            Some(json!({})),
        )
        .await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await?;
        Ok(())
    }

    /// Runs `script` (a function body) in the page; answers its return value.
    pub async fn execute(&self, script: &str) -> anyhow::Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Types `text` as key presses to whatever has the focus (the Actions API): shortcuts.
    pub async fn keys(&self, text: &str) -> anyhow::Result<()> {
        let mut actions = Vec::new();
        for c in text.chars() {
            actions.push(json!({ "type": "keyDown", "value": c.to_string() }));
            actions.push(json!({ "type": "keyUp", "value": c.to_string() }));
        }
        self.cmd(
            reqwest::Method::POST,
            "/actions",
            Some(json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": actions }] })),
        )
        .await?;
        Ok(())
    }

    /// Waits until nothing matches `css`.
    pub async fn wait_gone(&self, css: &str, secs: u64) -> anyhow::Result<()> {
        let until = Instant::now() + Duration::from_secs(secs);
        while self.find(css).await.is_ok() {
            if Instant::now() > until {
                bail!("{css} still matches after {secs} s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The first displayed element matching `xpath`, waiting for one.
    pub async fn wait_xpath(&self, xpath: &str, secs: u64) -> anyhow::Result<String> {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(v) = self
                .cmd(
                    reqwest::Method::POST,
                    "/elements",
                    Some(json!({ "using": "xpath", "value": xpath })),
                )
                .await
            {
                for e in v.as_array().cloned().unwrap_or_default() {
                    if let Some(id) = e[ELEMENT].as_str()
                        && self.visible(id).await.unwrap_or(false)
                    {
                        return Ok(id.to_owned());
                    }
                }
            }
            if Instant::now() > until {
                bail!("no displayed element matches {xpath} within {secs} s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the displayed button or link whose visible text is `text`.
    pub async fn click_text(&self, text: &str) -> anyhow::Result<()> {
        let x =
            format!("//button[normalize-space()=\"{text}\"] | //a[normalize-space()=\"{text}\"]");
        let id = self.wait_xpath(&x, 10).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await?;
        Ok(())
    }

    /// The displayed field whose label starts with `label` (a wrapping label, or `for`).
    async fn field(&self, label: &str) -> anyhow::Result<String> {
        let l = format!("//label[starts-with(normalize-space(), \"{label}\")]");
        let x =
            format!("{l}//*[self::input or self::textarea or self::select] | //*[@id={l}/@for]");
        self.wait_xpath(&x, 10).await
    }

    /// Types `text` into the field labelled `label` (cleared first). A live region may swap
    /// the field between finding it and typing (the page follows its event stream): the field
    /// is then found again, for two seconds at most.
    pub async fn fill(&self, label: &str, text: &str) -> anyhow::Result<()> {
        let mut tries = 0;
        loop {
            let id = self.field(label).await?;
            let typed = self.replace_text(&id, text).await;
            match typed {
                Ok(_) => return Ok(()),
                // Swapped out (stale), or swapped in and not yet shown (not interactable): the
                // live region settles within a moment.
                Err(e)
                    if tries < 20
                        && (e.to_string().contains("stale element")
                            || e.to_string().contains("not interactable")) =>
                {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Picks the option shown as `option` in the select labelled `label`.
    pub async fn choose(&self, label: &str, option: &str) -> anyhow::Result<()> {
        let l = format!("//label[starts-with(normalize-space(), \"{label}\")]");
        let x = format!(
            "({l}//select | //select[@id={l}/@for])/option[normalize-space()=\"{option}\"]"
        );
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self
                .cmd(
                    reqwest::Method::POST,
                    "/elements",
                    Some(json!({ "using": "xpath", "value": x })),
                )
                .await?;
            if let Some(id) = v
                .as_array()
                .and_then(|a| a.first())
                .and_then(|e| e[ELEMENT].as_str())
            {
                self.cmd(
                    reqwest::Method::POST,
                    &format!("/element/{id}/click"),
                    Some(json!({})),
                )
                .await?;
                return Ok(());
            }
            if Instant::now() > until {
                bail!("no option {option} under {label}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Presses keys on the page (WebDriver actions), as a person on the keyboard.
    pub async fn press(&self, keys: &str) -> anyhow::Result<()> {
        let mut actions = Vec::new();
        for k in keys.chars() {
            actions.push(json!({ "type": "keyDown", "value": k.to_string() }));
            actions.push(json!({ "type": "keyUp", "value": k.to_string() }));
        }
        self.cmd(
            reqwest::Method::POST,
            "/actions",
            Some(json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": actions }] })),
        )
        .await?;
        let _ = self
            .http
            .delete(format!("{}/actions", self.base))
            .send()
            .await;
        Ok(())
    }

    /// Saves a PNG of the viewport.
    pub async fn screenshot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use base64::Engine;
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await?;
        let png = base64::engine::general_purpose::STANDARD.decode(v.as_str().context("png")?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(())
    }

    /// The page's source (for failure messages).
    pub async fn source(&self) -> String {
        self.cmd(reqwest::Method::GET, "/source", None)
            .await
            .map(|v| v.as_str().unwrap_or("").to_owned())
            .unwrap_or_default()
    }

    pub async fn quit(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}
