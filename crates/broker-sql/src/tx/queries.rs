//! The [`Tx`] methods as SQL.

use super::*;

#[async_trait]
impl Tx for SqlTx {
    #[tracing::instrument(name = "database commit", level = "info", skip_all, fields(otel.kind = "client"))]
    async fn commit(mut self: Box<Self>) -> Result<(), StorageError> {
        // PostgreSQL: the writes held back go first, as one statement (`held.rs`).
        self.flush().await?;
        match self.inner.take().ok_or_else(finished)? {
            Inner::Pool(tx) => tx.commit().await.map_err(db_err),
            Inner::Writer(slot) => slot.commit().await,
            Inner::Group(turn) => turn.commit().await,
            Inner::Conn(_) | Inner::Lazy(_) => Ok(()),
        }
    }

    async fn get_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Option<LauncherCredential>, StorageError> {
        if let Some(reads) = &self.reads {
            return decode_some("credential", reads.credential(id.to_string()).await?);
        }
        self.get_doc(
            "credential",
            "SELECT doc FROM credentials WHERE id = $1",
            args![id.to_string()],
        )
        .await
    }

    async fn credentials_by_thumbprint(
        &mut self,
        thumbprint: &str,
    ) -> Result<Vec<LauncherCredential>, StorageError> {
        // `FOR UPDATE` locks only rows that exist: two transactions minting the first credential
        // for one key would both find none and both insert. On PostgreSQL a write transaction
        // first takes an advisory lock on the key (held to commit), so they serialise and the
        // second reads the first's credential. SQLite's write transactions are serial already.
        if self.backend == Backend::Postgres && self.write {
            self.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                args![format!("countersign:credential-key:{thumbprint}")],
            )
            .await?;
        }
        self.get_docs(
            "credential",
            "SELECT doc FROM credentials WHERE thumbprint = $1 ORDER BY issued_at_ms, id",
            args![thumbprint],
        )
        .await
    }

    async fn list_credentials(&mut self) -> Result<Vec<LauncherCredential>, StorageError> {
        self.get_docs(
            "credential",
            "SELECT doc FROM credentials WHERE revoked_at_ms IS NULL ORDER BY issued_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_credential(&mut self, c: &LauncherCredential) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "credentials",
            "id",
            &[
                "id",
                "thumbprint",
                "issued_at_ms",
                "expires_at_ms",
                "revoked_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("credential", c)?;
        self.put(
            ("credentials", c.id.to_string()),
            &sql,
            args![
                c.id.to_string(),
                c.thumbprint.as_str(),
                ms(c.issued_at),
                ms(c.expires_at),
                c.revoked_at.map(ms),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_passkey(&mut self, id: &str) -> Result<Option<Passkey>, StorageError> {
        self.get_doc(
            "passkey",
            "SELECT doc FROM passkeys WHERE id = $1",
            args![id],
        )
        .await
    }

    async fn passkeys_of(&mut self, person: &Login) -> Result<Vec<Passkey>, StorageError> {
        self.get_docs(
            "passkey",
            "SELECT doc FROM passkeys WHERE person = $1 ORDER BY created_at_ms, id",
            args![person.as_str()],
        )
        .await
    }

    async fn list_passkeys(&mut self) -> Result<Vec<Passkey>, StorageError> {
        self.get_docs(
            "passkey",
            "SELECT doc FROM passkeys ORDER BY created_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_passkey(&mut self, p: &Passkey) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "passkeys",
            "id",
            &["id", "person", "created_at_ms", "removed_at_ms", "doc"],
        );
        let doc = to_doc("passkey", p)?;
        self.put(
            ("passkeys", p.id.clone()),
            &sql,
            args![
                p.id.as_str(),
                p.person.as_str(),
                ms(p.created_at),
                p.removed_at.map(ms),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_login(
        &mut self,
        pending_hash: &str,
    ) -> Result<Option<PendingLogin>, StorageError> {
        self.get_doc(
            "login",
            "SELECT doc FROM logins WHERE pending_hash = $1",
            args![pending_hash],
        )
        .await
    }

    async fn put_login(&mut self, l: &PendingLogin) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "logins",
            "pending_hash",
            &["pending_hash", "record_id", "code", "doc"],
        );
        let doc = to_doc("login", l)?;
        self.put(
            ("logins", l.pending_hash.clone()),
            &sql,
            args![
                l.pending_hash.as_str(),
                l.record_id.to_string(),
                l.code.as_str(),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_record(&mut self, id: &RecordId) -> Result<Option<Record>, StorageError> {
        let key = id.to_string();
        if let Some(r) = self.remembered::<Record>(&key) {
            return Ok(Some(r));
        }
        let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE id = $1");
        match self.fetch_optional(&sql, args![key.clone()]).await? {
            Some(row) => {
                let r = record_from_row(&row)?;
                self.remember(key, &r);
                Ok(Some(r))
            }
            None => Ok(None),
        }
    }

    async fn record_by_code(
        &mut self,
        code: &ConfirmationCode,
    ) -> Result<Option<Record>, StorageError> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM records WHERE code = $1 AND state = 'pending' \
             ORDER BY expires_at_ms DESC, id LIMIT 1"
        );
        match self.fetch_optional(&sql, args![code.as_str()]).await? {
            Some(row) => record_from_row(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn pending_records(&mut self) -> Result<Vec<Record>, StorageError> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM records WHERE state = 'pending' \
             ORDER BY expires_at_ms, id"
        );
        let rows = self.fetch_all(&sql, args![]).await?;
        rows.iter().map(record_from_row).collect()
    }

    async fn put_record(&mut self, r: &Record) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "records",
            "id",
            &[
                "id",
                "text",
                "state",
                "decided",
                "code",
                "approver",
                "kind",
                "requested_at_ms",
                "expires_at_ms",
            ],
        );
        let decided = r
            .decided
            .as_ref()
            .map(|d| to_doc("record decision", d))
            .transpose()?;
        self.remember(r.id.to_string(), r);
        self.put(
            ("records", r.id.to_string()),
            &sql,
            args![
                r.id.to_string(),
                r.text.as_str(),
                r.state.as_str(),
                decided,
                r.code.as_ref().map(|c| c.as_str().to_owned()),
                r.body.approver.as_str(),
                r.body.kind.as_str(),
                ms(r.body.requested_at),
                ms(r.body.expires_at),
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError> {
        if let Some(reads) = &self.reads {
            return decode_some("enrollment", reads.enrollment(id.to_string()).await?);
        }
        self.get_locked(
            "enrollment",
            "SELECT doc FROM enrollments WHERE id = $1",
            id.to_string(),
        )
        .await
    }

    async fn enrollments_by_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Vec<Enrollment>, StorageError> {
        self.get_docs(
            "enrollment",
            "SELECT doc FROM enrollments WHERE credential_id = $1 AND ended_at_ms IS NULL \
             ORDER BY created_at_ms, id",
            args![id.to_string()],
        )
        .await
    }

    async fn put_enrollment(&mut self, e: &Enrollment) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "enrollments",
            "id",
            &[
                "id",
                "credential_id",
                "kind",
                "created_at_ms",
                "lease_expires_at_ms",
                "ended_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("enrollment", e)?;
        self.remember(e.id.to_string(), e);
        self.put(
            ("enrollments", e.id.to_string()),
            &sql,
            args![
                e.id.to_string(),
                e.credential_id.to_string(),
                e.kind.as_str(),
                ms(e.created_at),
                ms(e.lease_expires_at),
                e.ended.as_ref().map(|x| ms(x.at)),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_request(&mut self, id: RequestId) -> Result<Option<Request>, StorageError> {
        self.get_locked(
            "request",
            "SELECT doc FROM requests WHERE id = $1",
            id.to_string(),
        )
        .await
    }

    async fn pending_requests(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Request>, StorageError> {
        self.get_docs(
            "request",
            "SELECT doc FROM requests WHERE enrollment_id = $1 AND state = $2 \
             ORDER BY created_at_ms, id",
            args![enrollment.to_string(), RequestState::Pending.as_str()],
        )
        .await
    }

    async fn enrollment_with_pending(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
        if self.holds() {
            return self.locked_enrollment_with_pending(id).await;
        }
        match self.get_enrollment(id).await? {
            Some(e) => Ok((Some(e), self.pending_requests(id).await?)),
            None => Ok((None, Vec::new())),
        }
    }

    async fn prefetch_decision(
        &mut self,
        owners: Option<(EnrollmentId, RequestId)>,
        record: &RecordId,
    ) -> Result<(), StorageError> {
        if !self.holds() {
            return Ok(());
        }
        self.locked_decision_rows(owners, record).await
    }

    async fn put_request(&mut self, r: &Request) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "requests",
            "id",
            &["id", "enrollment_id", "state", "created_at_ms", "doc"],
        );
        let doc = to_doc("request", r)?;
        self.remember(r.id.to_string(), r);
        self.put(
            ("requests", r.id.to_string()),
            &sql,
            args![
                r.id.to_string(),
                r.enrollment_id.to_string(),
                r.state.as_str(),
                ms(r.created_at),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_grant(&mut self, id: GrantId) -> Result<Option<Grant>, StorageError> {
        self.get_locked(
            "grant",
            "SELECT doc FROM grants WHERE id = $1",
            id.to_string(),
        )
        .await
    }

    async fn grants_by_enrollment(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Grant>, StorageError> {
        if let Some(reads) = &self.reads {
            let docs = reads.grants_of(enrollment.to_string()).await?;
            return docs.iter().map(|d| decode("grant", d)).collect();
        }
        self.get_docs(
            "grant",
            "SELECT doc FROM grants WHERE enrollment_id = $1 ORDER BY created_at_ms, id",
            args![enrollment.to_string()],
        )
        .await
    }

    async fn enrollment_with_grants(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Grant>), StorageError> {
        let Some(reads) = &self.reads else {
            let Some(e) = self.get_enrollment(id).await? else {
                return Ok((None, Vec::new()));
            };
            return Ok((Some(e), self.grants_by_enrollment(id).await?));
        };
        let (e, grants) = reads.enrollment_with_grants(id.to_string()).await?;
        let e = decode_some("enrollment", e)?;
        let grants = grants
            .iter()
            .map(|d| decode("grant", d))
            .collect::<Result<_, _>>()?;
        Ok((e, grants))
    }

    async fn live_grants(&mut self) -> Result<Vec<Grant>, StorageError> {
        self.get_docs(
            "grant",
            "SELECT doc FROM grants WHERE ended_at_ms IS NULL ORDER BY created_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_grant(&mut self, g: &Grant) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "grants",
            "id",
            &[
                "id",
                "enrollment_id",
                "request_id",
                "created_at_ms",
                "expires_at_ms",
                "ended_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("grant", g)?;
        self.remember(g.id.to_string(), g);
        self.put(
            ("grants", g.id.to_string()),
            &sql,
            args![
                g.id.to_string(),
                g.enrollment_id.to_string(),
                g.request_id.to_string(),
                ms(g.created_at),
                g.expires_at.map(ms),
                g.end.map(|(_, at)| ms(at)),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn due(&mut self, now: Time, limit: u32) -> Result<Due, StorageError> {
        let (now, limit) = (ms(now), i64::from(limit));
        let records = self
            .fetch_all(
                "SELECT id FROM records WHERE state = 'pending' AND expires_at_ms <= $1 \
                 ORDER BY expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        let enrollments = self
            .fetch_all(
                "SELECT id FROM enrollments WHERE ended_at_ms IS NULL AND lease_expires_at_ms <= $1 \
                 ORDER BY lease_expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        let grants = self
            .fetch_all(
                "SELECT id FROM grants WHERE ended_at_ms IS NULL AND expires_at_ms IS NOT NULL \
                 AND expires_at_ms <= $1 ORDER BY expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        Ok(Due {
            records: ids(&records, RecordId::parse)?,
            enrollments: ids(&enrollments, EnrollmentId::parse)?,
            grants: ids(&grants, GrantId::parse)?,
        })
    }

    async fn push_outbox(&mut self, item: &OutboxItem) -> Result<(), StorageError> {
        let sql = "INSERT INTO outbox (id, payload, attempts, next_attempt_at_ms, topic) \
             VALUES ($1, $2, $3, $4, $5)";
        let args = args![
            item.id.as_str(),
            item.payload.as_str(),
            i64::from(item.attempts),
            ms(item.next_attempt_at),
            item.topic.as_str(),
        ];
        // At once, not held back: a second push of an id fails here, as the caller expects
        // (held back, it would replace the first, or fail only at commit).
        self.execute(sql, args).await?;
        Ok(())
    }

    async fn take_outbox(
        &mut self,
        topic: &str,
        now: Time,
        limit: u32,
    ) -> Result<Vec<OutboxItem>, StorageError> {
        let rows = self
            .fetch_all_locked(
                "SELECT id, topic, payload, attempts, next_attempt_at_ms FROM outbox \
                 WHERE topic = $3 AND next_attempt_at_ms <= $1 \
                 ORDER BY next_attempt_at_ms, id LIMIT $2",
                args![ms(now), i64::from(limit), topic],
                Lock::SkipLocked,
            )
            .await?;
        rows.iter().map(outbox_from_row).collect()
    }

    async fn delete_outbox(&mut self, id: &str) -> Result<(), StorageError> {
        self.execute("DELETE FROM outbox WHERE id = $1", args![id])
            .await?;
        Ok(())
    }

    async fn reschedule_outbox(
        &mut self,
        id: &str,
        attempts: u32,
        next_attempt_at: Time,
    ) -> Result<(), StorageError> {
        self.execute(
            "UPDATE outbox SET attempts = $2, next_attempt_at_ms = $3 WHERE id = $1",
            args![id, i64::from(attempts), ms(next_attempt_at)],
        )
        .await?;
        Ok(())
    }

    async fn issued_of(&mut self, grant: GrantId) -> Result<Vec<Issued>, StorageError> {
        self.get_docs(
            "issued credential",
            "SELECT doc FROM issued WHERE grant_id = $1 ORDER BY id",
            args![grant.to_string()],
        )
        .await
    }

    async fn unsettled_issued(&mut self, limit: u32) -> Result<Vec<Issued>, StorageError> {
        self.get_docs(
            "issued credential",
            "SELECT doc FROM issued WHERE state <> 'destroyed' ORDER BY id LIMIT $1",
            args![i64::from(limit)],
        )
        .await
    }

    async fn put_issued(&mut self, c: &Issued) -> Result<(), StorageError> {
        let sql = upsert_sql("issued", "id", &["id", "grant_id", "state", "doc"]);
        let doc = to_doc("issued credential", c)?;
        let id = format!("{}:{}", c.grant_id, c.secret);
        self.put(
            ("issued", id.clone()),
            &sql,
            args![id, c.grant_id.to_string(), c.state.as_str(), doc,],
        )
        .await
    }

    async fn audit_head(&mut self) -> Result<Option<(i64, String)>, StorageError> {
        // PostgreSQL: every physical write transaction takes the audit log's advisory lock
        // first and reads its head (`group.rs`). SQLite's write transactions are serial
        // already.
        if self.holds() {
            return self.locked_audit_head().await;
        }
        // SQLite's writer remembers the head its own appends left (nothing else writes there).
        if let Some(Inner::Writer(slot)) = self.inner.as_ref()
            && let Some(head) = slot.audit_head()
        {
            return Ok(Some(head));
        }
        let conn = self.conn().await?;
        let r = sqlx::query("SELECT position, hash FROM audit_log ORDER BY position DESC LIMIT 1")
            .fetch_optional(conn)
            .await;
        match self.checked(r)? {
            None => Ok(None),
            Some(row) => head_of(&row).map(Some),
        }
    }

    async fn append_audit(&mut self, entries: &[AuditEntry]) -> Result<(), StorageError> {
        // SQLite: the writer inserts the entries of every transaction of its batch in one
        // statement just before the batch's COMMIT (an INSERT per transaction cost the
        // automatic request a fifth of its rate). PostgreSQL: with this member's other writes,
        // before it commits.
        if let Some(Inner::Writer(slot)) = self.inner.as_mut() {
            slot.append_audit(entries);
            return Ok(());
        }
        if self.holds() {
            // Held back with the transaction's other writes (`held.rs`).
            self.held.audit(entries);
            if let Some(last) = entries.last() {
                let last = (last.position, last.hash.clone());
                if let Some(Inner::Group(turn)) = self.inner.as_mut() {
                    turn.appended(last);
                }
            }
            return Ok(());
        }
        Err(StorageError::Other("write in a read transaction".into()))
    }

    async fn audit_entries(
        &mut self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StorageError> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE position > $1 ORDER BY position LIMIT $2"
        );
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args![after, i64::from(limit)])
            .fetch_all(conn)
            .await;
        self.checked(r)?.iter().map(audit_from_row).collect()
    }

    async fn audit_ends(&mut self, subject: &str) -> Result<Vec<AuditEntry>, StorageError> {
        // The condition is the partial index's, word for word (SQLite uses a partial index
        // only for a query whose WHERE contains its condition as written).
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE subject = $1 AND {AUDIT_ENDS} \
             ORDER BY position"
        );
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args![subject])
            .fetch_all(conn)
            .await;
        self.checked(r)?.iter().map(audit_from_row).collect()
    }

    async fn audit_count(&mut self, upto: i64) -> Result<(i64, i64), StorageError> {
        let conn = self.conn().await?;
        let r = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM audit_log WHERE position <= $1) AS n, \
             (SELECT COALESCE(MAX(position), 0) FROM audit_log) AS m",
        )
        .bind(upto)
        .fetch_one(conn)
        .await;
        let row = self.checked(r)?;
        Ok((
            row.try_get("n").map_err(db_err)?,
            row.try_get("m").map_err(db_err)?,
        ))
    }
}
