//! Dynamic secrets on the console's pages (issue 49), against a real broker whose `[[issued]]`
//! secret `APP_DB` is made by the real PostgreSQL issuer on the test server, through an admin
//! role of the test's own (`LOGIN CREATEROLE`, the least the issuer needs):
//!
//! - the request page says, before Ada approves, that a credential is made for this grant
//!   alone and destroyed when the grant ends (issuer: PostgreSQL), from the broker's settings;
//! - after the first release (whose answer carries the credential's `parts`), the grants page
//!   shows the credential live, by its role's name;
//! - revoked while the issuer's admin cannot log in, the grant stays listed as revoked, with no
//!   revoke button, its credential "destroy failing: <the issuer's error> — next try <time>";
//!   in headless Chromium the grants and request pages fit 390 px and 1400 px and axe-core
//!   finds no serious or critical violation;
//! - once the admin can log in again, the destroy succeeds and the grant leaves the list.
//!
//! Skips without a PostgreSQL server (`COUNTERSIGN_TEST_POSTGRES_URL`) unless
//! `COUNTERSIGN_REQUIRE_POSTGRES=1`; the browser part skips without Chromium unless
//! `COUNTERSIGN_REQUIRE_BROWSER=1`.

use anyhow::Context;
use serde_json::json;
use sqlx::Connection;

use crate::common::webdriver::{Driver, browser_or_skip};
use crate::common::*;
use crate::responsive::{PHONE, WIDE, measure, settled};

const SECRET: &str = "APP_DB";

/// The test server's superuser URL, or `None` (skipped) when none is named.
fn server_url() -> Option<String> {
    match std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
            );
            println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is not set");
            None
        }
    }
}

/// Runs `sql` as the server's superuser.
async fn as_superuser(server: &str, sql: &str) -> anyhow::Result<()> {
    let mut c = sqlx::PgConnection::connect(server).await?;
    sqlx::raw_sql(sql).execute(&mut c).await?;
    c.close().await?;
    Ok(())
}

/// The issuer's admin: a role of this test's, and its URL on the same server and database.
struct Admin {
    server: String,
    role: String,
    url: String,
    prefix: String,
}

impl Admin {
    async fn create(server: &str) -> anyhow::Result<Self> {
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let role = format!("cst_adm_{tag}");
        let password = uuid::Uuid::new_v4().simple().to_string();
        as_superuser(
            server,
            &format!("CREATE ROLE {role} LOGIN CREATEROLE PASSWORD '{password}'"),
        )
        .await?;
        let mut url = url::Url::parse(server)?;
        url.set_username(&role)
            .map_err(|()| anyhow::anyhow!("admin user"))?;
        url.set_password(Some(&password))
            .map_err(|()| anyhow::anyhow!("admin password"))?;
        Ok(Self {
            server: server.to_owned(),
            role,
            url: url.to_string(),
            prefix: format!("cst{tag}_"),
        })
    }

    /// Whether the issuer can log in: refused, its open connections are ended too.
    async fn can_log_in(&self, yes: bool) -> anyhow::Result<()> {
        let role = &self.role;
        let sql = if yes {
            format!("ALTER ROLE {role} LOGIN")
        } else {
            format!(
                "ALTER ROLE {role} NOLOGIN; \
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
            )
        };
        as_superuser(&self.server, &sql).await
    }

    /// Drops what the test made: the credentials left (a failed run's) and the admin.
    async fn drop_all(&self) {
        let sql = format!(
            "DO $$ DECLARE r record; BEGIN \
               FOR r IN SELECT rolname FROM pg_roles WHERE starts_with(rolname, '{p}') LOOP \
                 EXECUTE format('DROP OWNED BY %I; DROP ROLE %I', r.rolname, r.rolname); \
               END LOOP; END $$; \
             DROP OWNED BY {a}; DROP ROLE IF EXISTS {a}",
            p = self.prefix,
            a = self.role
        );
        if let Err(e) = as_superuser(&self.server, &sql).await {
            println!("cleaning up roles {}*, {}: {e}", self.prefix, self.role);
        }
    }

    /// The broker's `[[issued]]` declaration of `APP_DB`, its admin URL in `file`.
    fn declaration(&self, file: &std::path::Path) -> anyhow::Result<String> {
        std::fs::write(file, &self.url)?;
        Ok(format!(
            "\n[[issued]]\nname = \"{SECRET}\"\nowner = \"{ADA}\"\ntier = \"owner\"\n\
             admin_file = {}\n[issued.postgres]\nroles = []\nprefix = \"{}\"\n",
            serde_json::to_string(&file.display().to_string())?,
            self.prefix
        ))
    }
}

/// The grants page's row of `grant` (its `<tr>` to its `</tr>`), if listed.
fn row_of(html: &str, grant: &str) -> Option<String> {
    let start = html.find(&format!("<tr data-grant-id=\"{grant}\""))?;
    let rest = &html[start..];
    Some(rest[..rest.find("</tr>")?].to_owned())
}

#[tokio::test]
async fn issued_grants_and_request_pages_show_each_credential() -> anyhow::Result<()> {
    let Some(server) = server_url() else {
        return Ok(());
    };
    let admin = Admin::create(&server).await?;
    let result = walk(&admin).await;
    admin.drop_all().await;
    result
}

async fn walk(admin: &Admin) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = TestBroker::start_with(&admin.declaration(&dir.path().join("admin-url"))?).await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        local_sign_in: true,
        ..Default::default()
    })
    .await?;
    let result = pages(admin, &broker, &console).await;
    console.stop().await;
    broker.stop().await;
    result
}

async fn pages(admin: &Admin, broker: &TestBroker, console: &TestConsole) -> anyhow::Result<()> {
    let mut ada = Person::new(console)?;
    let r = ada.sign_in_local(ADA).await?;
    anyhow::ensure!(r.status == 303, "sign-in: {} {}", r.status, r.text);

    // Ada's machine; an agent on it asks for the issued secret and a stored one.
    let login = start_machine_login(broker, ADA, "ada-desk").await?;
    let found = ada
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": login.code }),
        )
        .await?;
    let machine_record = found.json["record_id"].as_str().context("lookup")?;
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{machine_record}/approve"),
            json!({ "code": login.code }),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "machine approve: {}", r.text);
    let machine = login.machine(broker).await?;
    let session = machine.enroll(broker, "rt-psql").await?;
    let asked = session
        .request(
            broker,
            &[SECRET, ADA_SECRET],
            "migrate the schema",
            Some(600),
        )
        .await?;
    let record = asked["record_id"].as_str().context("record_id")?.to_owned();
    let request = asked["request_id"]
        .as_str()
        .context("request_id")?
        .to_owned();

    // Before she decides, the request page says what is made for the grant, and of which
    // secret only.
    let page = ada.get(&format!("/requests/{request}")).await?;
    anyhow::ensure!(page.status == 200, "request page: {}", page.text);
    let note = "<code>APP_DB</code>: A credential is made for this grant alone and destroyed \
                when the grant ends (issuer: PostgreSQL).";
    assert!(page.text.contains(note), "{}", page.text);
    assert!(
        !page.text.contains(&format!("data-issued=\"{ADA_SECRET}\"")),
        "{}",
        page.text
    );

    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "approve: {}", r.text);
    let grant = session.get_request(broker, &request).await?["grant_id"]
        .as_str()
        .context("grant_id")?
        .to_owned();

    // Before the first release nothing is made; the release makes the role and answers its
    // parts.
    let grants = ada.get("/grants").await?;
    let row = row_of(&grants.text, &grant).context("the live grant is listed")?;
    assert!(!row.contains("class=\"credentials\""), "{row}");
    let released = session.values(broker, &grant).await?;
    anyhow::ensure!(released.status == 200, "values: {}", released.text);
    let user = released.json["parts"][SECRET]["PGUSER"]
        .as_str()
        .with_context(|| format!("no PGUSER part: {}", released.json["parts"]))?
        .to_owned();
    assert!(user.starts_with(&admin.prefix), "{user}");
    assert!(released.json["parts"][SECRET]["PGPASSWORD"].is_string());
    assert!(released.json["parts"].get(ADA_SECRET).is_none());

    let grants = ada.get("/grants").await?;
    let row = row_of(&grants.text, &grant).context("the live grant is listed")?;
    assert!(
        row.contains(&format!(
            "APP_DB: PostgreSQL role <code>{user}</code>, <span class=\"credential-state\">live</span>"
        )),
        "{row}"
    );
    assert!(row.contains("data-action=\"revoke-grant\""), "{row}");

    // Revoked while the issuer cannot log in: listed as revoked, the destroy failing.
    admin.can_log_in(false).await?;
    let r = ada
        .post(
            &format!("/api/v1/credential-grants/{grant}/revoke"),
            json!({}),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "revoke: {}", r.text);
    let row = eventually(20, || async {
        let g = ada.get("/grants").await?;
        Ok(row_of(&g.text, &grant).filter(|r| r.contains("destroy failing: ")))
    })
    .await?;
    assert!(row.contains("data-ended=\"revoked\""), "{row}");
    assert!(
        row.contains("<span class=\"grant-ended\">revoked</span>"),
        "{row}"
    );
    assert!(!row.contains("data-action=\"revoke-grant\""), "{row}");
    assert!(row.contains(" — next try <time datetime=\""), "{row}");
    assert!(
        row.contains("data-credential-state=\"destroying\""),
        "{row}"
    );

    in_a_browser(console, &format!("/requests/{request}")).await?;

    // The admin back: the destroy succeeds and the grant leaves the list.
    admin.can_log_in(true).await?;
    eventually(90, || async {
        let g = ada.get("/grants").await?;
        anyhow::ensure!(g.status == 200, "grants: {}", g.text);
        Ok(row_of(&g.text, &grant).is_none().then_some(()))
    })
    .await
    .context("the destroyed credential's grant is still listed")?;
    Ok(())
}

/// Ada's grants page (a credential whose destroy fails) and `request` in headless Chromium at a
/// phone's and a wide screen's width: shown in words, no sideways scroll, no serious axe-core
/// violation.
async fn in_a_browser(console: &TestConsole, request: &str) -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let axe_js = crate::common::axe::source();
    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver.browser(&chromium, profiles.path()).await?;
    let mut problems = Vec::new();
    let result = async {
        b.goto(&format!("{}/sign-in", console.url)).await?;
        b.type_into("#email", ADA).await?;
        b.click("form.local button[type=submit]").await?;
        b.wait_text("h1", "Inbox", 10).await?;
        for (w, h) in [PHONE, WIDE] {
            b.set_viewport(w, h).await?;
            b.goto(&format!("{}/grants", console.url)).await?;
            settled(&b).await?;
            let said = b
                .wait_text("ul.credentials", "destroy failing: ", 10)
                .await?;
            // The next try reads as words relative to now, not as the absolute time.
            assert!(
                said.contains("next try ") && !said.contains(" UTC"),
                "{said}"
            );
            measure(&b, "/grants", w, axe_js.as_deref(), &mut problems).await?;
            b.goto(&format!("{}{request}", console.url)).await?;
            settled(&b).await?;
            b.wait_text("p.issued", "destroyed when the grant ends", 10)
                .await?;
            measure(&b, request, w, axe_js.as_deref(), &mut problems).await?;
        }
        anyhow::Ok(())
    }
    .await;
    b.quit().await;
    drop(driver);
    result?;
    anyhow::ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
