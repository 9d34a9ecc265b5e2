//! One request, one name (issue 48), over real HTTP against a real broker: the id the broker
//! gives an agent's request (`POST /v1/requests`' `request_id`, what `countersign request`,
//! `run` and MCP print) is the id the inbox row and the request page show, `/requests/<it>`
//! answers (and `/requests/<record id>` still does), and search finds the request by it. The
//! requester shows by its machine's and session's names, the raw ids on hover (inbox, request
//! page, grants); "Your answers" names what was decided, for whom, and links the request.

use serde_json::json;

use crate::common::*;

/// The launcher helper's runtime id of a session labelled `sh` on the machine `vm`.
const RUNTIME: &str = "vm/pid-17541-225829/sh";
/// The requester in words.
const IN_WORDS: &str = "the session ‘sh’ on machine vm, logged in as ada@example.com";

#[tokio::test]
async fn a_request_has_one_name_from_the_agent_to_the_person() -> anyhow::Result<()> {
    let broker = TestBroker::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        local_sign_in: true,
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_local(ADA).await?;

    // Ada's machine `vm` logs in; a session labelled `sh` on it asks for her secret.
    let login = start_machine_login(&broker, ADA, "vm").await?;
    let rec = ada
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": login.code }),
        )
        .await?;
    let machine_record = rec.json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ok = ada
        .post(
            &format!("/api/v1/credential-requests/{machine_record}/approve"),
            json!({ "code": login.code }),
        )
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let machine = login.machine(&broker).await?;
    let session = machine.enroll(&broker, RUNTIME).await?;
    let asked = session
        .request(&broker, &[ADA_SECRET], "deploy the fix", Some(900))
        .await?;
    assert_eq!(asked["state"], "pending", "{asked}");
    let request = asked["request_id"].as_str().unwrap_or_default().to_owned();
    let record = asked["record_id"].as_str().unwrap_or_default().to_owned();
    assert!(request.len() == 36 && record.len() == 64, "{asked}");

    // The inbox row: the request id, the requester in words, the raw ids on hover; its
    // buttons still decide the record.
    let rows = ada.get("/inbox/rows").await?;
    assert_eq!(rows.status, 200, "{}", rows.text);
    let row = rows
        .text
        .split("<li class=\"request\"")
        .find(|r| r.contains(&record))
        .unwrap_or_default()
        .to_owned();
    assert!(
        row.contains(&format!("data-request-id=\"{request}\""))
            && row.contains(&format!("<code class=\"request-id\">{request}</code>")),
        "{row}"
    );
    assert!(row.contains(IN_WORDS), "{row}");
    assert!(
        row.contains(&format!("title=\"session {RUNTIME}")),
        "the raw ids on hover: {row}"
    );
    assert!(row.contains(&format!("data-record=\"{record}\"")), "{row}");

    // The request page by the request id: its name shown, the requester named, the passkey-free
    // approval deciding the record.
    let page = ada.get(&format!("/requests/{request}")).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text
            .contains("id=\"request-id\" title=\"what the agent's"),
        "{}",
        page.text
    );
    assert!(
        page.text.contains(&format!(">{request}</code>")),
        "{}",
        page.text
    );
    assert!(page.text.contains(IN_WORDS), "{}", page.text);
    assert!(
        page.text.contains(&format!("title=\"session {RUNTIME}")),
        "{}",
        page.text
    );
    assert!(
        page.text.contains(&format!("data-record=\"{record}\"")),
        "{}",
        page.text
    );
    // An old link by the record id answers the same request, named by its request id.
    let old = ada.get(&format!("/requests/{record}")).await?;
    assert_eq!(old.status, 200, "{}", old.text);
    assert!(
        old.text.contains(&format!(">{request}</code>")),
        "{}",
        old.text
    );
    // No such request: the page says so.
    let none = ada
        .get("/requests/00000000-0000-4000-8000-000000000000")
        .await?;
    assert_eq!(none.status, 404, "{}", none.text);

    // Search finds it by its id: the API (one request row linking its page) and the page.
    let found = ada.get(&format!("/api/v1/search?q={request}")).await?;
    assert_eq!(found.status, 200, "{}", found.text);
    let rows = found.json["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{}", found.text);
    assert_eq!(rows[0]["kind"], "request", "{}", found.text);
    assert_eq!(rows[0]["id"], request.as_str(), "{}", found.text);
    assert_eq!(
        rows[0]["page"],
        format!("/requests/{request}"),
        "{}",
        found.text
    );
    assert_eq!(rows[0]["title"], ADA_SECRET, "{}", found.text);
    let by_record = ada.get(&format!("/api/v1/search?q={record}")).await?;
    assert_eq!(
        by_record.json["rows"][0]["id"],
        request.as_str(),
        "{}",
        by_record.text
    );
    // A prefix of eight characters finds a pending request the inbox has shown.
    let prefix = ada
        .get(&format!("/api/v1/search?q={}", &request[..8]))
        .await?;
    assert_eq!(
        prefix.json["rows"][0]["id"],
        request.as_str(),
        "{}",
        prefix.text
    );
    // An agent's search finds no request: a request row is for the people who decide it.
    let agent = bearer_get(
        &console,
        SHARED_TOKEN,
        &format!("/api/v1/search?q={request}"),
    )
    .await?;
    assert_eq!(agent.status, 200, "{}", agent.text);
    assert!(
        agent.json["rows"]
            .as_array()
            .is_some_and(|r| r.iter().all(|row| row["kind"] != "request")),
        "{}",
        agent.text
    );
    let page = ada.get(&format!("/search?q={request}")).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains(&format!("href=\"/requests/{request}\"")),
        "{}",
        page.text
    );

    // Ada approves; "Your answers" names what she decided, for whom, linked by the request's
    // name.
    let ok = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let answers = ada.get("/answers").await?;
    assert_eq!(answers.status, 200, "{}", answers.text);
    let decisions = answers
        .text
        .split("id=\"decisions\"")
        .nth(1)
        .and_then(|d| d.split("</table>").next())
        .unwrap_or_default()
        .to_owned();
    let line = decisions
        .split("<tr ")
        .find(|r| r.contains(&format!("data-request-id=\"{request}\"")))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("href=\"/requests/{request}\">{ADA_SECRET}</a>")),
        "{decisions}"
    );
    assert!(
        line.contains(IN_WORDS) && line.contains("approved"),
        "{line}"
    );
    // The machine login she approved is named too.
    assert!(decisions.contains("Machine login for vm"), "{decisions}");

    // The grants page: the session in words, its ids on hover.
    let grants = ada.get("/grants").await?;
    assert_eq!(grants.status, 200, "{}", grants.text);
    assert!(
        grants.text.contains(&format!(
            "<td title=\"session {RUNTIME} · operator {ADA}\">{IN_WORDS}</td>"
        )),
        "{}",
        grants.text
    );

    console.stop().await;
    broker.stop().await;
    Ok(())
}
