-- A session's waiters on other replicas queue for its lease, first come first served.
--
-- A lease (migration 0016) goes to whoever's statement lands first once it is free. Within a
-- replica SessionLocks queues a session's requests and operations, but across replicas a
-- waiter only polled: while an agent's back-to-back requests followed one another on one
-- replica, a request, reset, delete or branch polling from another replica got the session
-- only if one of its polls landed between two of them, which could be never. The advisory
-- lock the lease replaced had PostgreSQL's fair lock queue; this puts one back on the row.
--
-- lease_queue holds the owners waiting for the lease, in the order they first found it taken;
-- lease_queue_expires, beside it, the time each one's place lapses. Both are NULL when nobody
-- waits, so a request that does not wait reads one more NULL column and writes nothing more.
-- A waiter's try that finds the lease held, or free with another live waiter ahead, takes
-- no lease: it adds its owner at the end (or renews its place) for one second, twice the
-- longest pause between two tries (store/leases.py POLL_MAX_SECONDS), and answers busy. A
-- free lease is taken only by the first live waiter, or by anyone when none is live; the
-- taker leaves the queue. So a held lease is never taken because of the queue (the queue
-- only ever refuses), and a waiter that stops trying (its replica died, its client left)
-- loses its place a second after its last try: the queue can delay a free session by at
-- most that second, never block it. A lease its own owner still holds (its replica's last
-- statement failed to release it) is taken back at once, as before: its replica's queue
-- lets one request through, and making it wait would park the session until the lease
-- expired. Owners are replicas for chat requests (one request per session per replica
-- tries at a time) and one operation for a reset, delete or branch.
--
-- cascade_begin_step_v6 keeps its signature and result; its two one-statement paths also
-- require an empty queue, and the locked path it falls back to asks cascade_lease_queue_v1.
-- cascade_lease_for_update_v1 is the session operations' try (store/leases.py
-- free_for_update) with the same rule. A waiter's try writes the session row (its place in
-- the queue) where it only read it before: no extra statement, one row version per try. A
-- replica still on the previous code during a rolling deploy calls this v6 too, so its
-- requests keep to the queue; its session operations' try, like cascade_begin_step_v5, does
-- not (it neither waits behind the queue nor joins it), as before this migration.
ALTER TABLE sessions ADD COLUMN lease_queue uuid[], ADD COLUMN lease_queue_expires timestamptz[];

-- Whether p_owner may take a lease (p_lease_owner, p_lease_expires) with this queue now
-- (take), and the queue to store: without lapsed places and without p_owner if it takes,
-- with p_owner's place added or renewed if it does not. NULL arrays for an empty queue.
CREATE FUNCTION cascade_lease_queue_v1(p_owner uuid, p_lease_owner uuid,
                                       p_lease_expires timestamptz, p_queue uuid[],
                                       p_expires timestamptz[],
                                       OUT take boolean, OUT queue uuid[],
                                       OUT expires timestamptz[])
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
    mine integer;
BEGIN
    SELECT coalesce(array_agg(t.w ORDER BY t.o), '{}'),
           coalesce(array_agg(t.e ORDER BY t.o), '{}')
    INTO queue, expires
    FROM unnest(p_queue, p_expires) WITH ORDINALITY AS t(w, e, o) WHERE t.e >= now_;
    mine := array_position(queue, p_owner);
    IF p_lease_owner = p_owner AND p_lease_expires >= now_ THEN
        take := true;
    ELSE
        take := (p_lease_owner IS NULL OR p_lease_expires < now_) IS TRUE
                AND (cardinality(queue) = 0 OR mine IS NOT DISTINCT FROM 1);
    END IF;
    IF take THEN
        IF mine IS NOT NULL THEN
            queue := queue[:mine - 1] || queue[mine + 1:];
            expires := expires[:mine - 1] || expires[mine + 1:];
        END IF;
    ELSIF mine IS NULL THEN
        queue := queue || p_owner;
        expires := expires || (now_ + interval '1 second');
    ELSE
        expires[mine] := now_ + interval '1 second';
    END IF;
    IF cardinality(queue) = 0 THEN
        queue := NULL;
        expires := NULL;
    END IF;
END
$$;

-- The session operations' try, inside their transaction: lock the session's row and say
-- whether p_owner may work on it now (true also when there is no row). The row lock, held to
-- the transaction's end, makes the next request's first statement wait for the operation. A
-- refused try commits only its place in the queue: it waits for no WAL flush.
CREATE FUNCTION cascade_lease_for_update_v1(p_tenant text, p_id text, p_owner uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s record;
    q record;
BEGIN
    SELECT x.lease_owner, x.lease_expires, x.lease_queue, x.lease_queue_expires INTO s
    FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN true;
    END IF;
    IF s.lease_queue IS NULL AND (s.lease_owner IS NULL OR s.lease_expires < clock_timestamp())
    THEN
        RETURN true;
    END IF;
    q := cascade_lease_queue_v1(p_owner, s.lease_owner, s.lease_expires, s.lease_queue,
                                s.lease_queue_expires);
    IF NOT q.take THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE sessions x SET lease_queue = q.queue, lease_queue_expires = q.expires
    WHERE x.tenant = p_tenant AND x.id = p_id;
    RETURN q.take;
END
$$;

-- cascade_begin_step_v6 as migration 0021 defined it, but for the queue.
CREATE OR REPLACE FUNCTION cascade_begin_step_v6(p_tenant text, p_id text, p_agent text,
                                                 p_model text, p_owner uuid, p_start integer,
                                                 p_start_hash text, p_head_len integer,
                                                 p_head_hash text, p_system_count integer,
                                                 p_ttl double precision, p_rows json,
                                                 p_bodies json[], p_spills json, p_events json)
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
    moved boolean := false;
    busy boolean := false;
    q record;
BEGIN
    -- Every write below is the client's to resend, or a lease that is free again once it
    -- expires: none waits for a WAL flush (the request's last statement commits
    -- synchronously, which flushes these too).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_start IS NOT NULL AND json_array_length(p_rows) > 0 THEN
        -- The common case, an extending request on the guessed head with a free lease (or
        -- this replica's own) and nobody waiting for it: take the lease, record the agent
        -- and model and move the head in one row update.
        UPDATE sessions x SET lease_owner = p_owner,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
            agent = p_agent, model = p_model, head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE x.tenant = p_tenant AND x.id = p_id
          AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
               OR x.lease_expires < clock_timestamp())
          AND x.lease_queue IS NULL
          AND x.head_len = p_start AND x.head_hash IS NOT DISTINCT FROM p_start_hash
        RETURNING * INTO s;
        moved := FOUND;
    END IF;
    IF moved THEN
        s.head_len := p_start;
        s.head_hash := p_start_hash;
    ELSE
        -- Take the lease, and record a new agent or model, in one row update (nobody
        -- waiting; else the locked path below decides).
        UPDATE sessions x SET lease_owner = p_owner,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
            agent = p_agent, model = p_model,
            updated_at = CASE WHEN x.agent = p_agent AND x.model IS NOT DISTINCT FROM p_model
                              THEN x.updated_at ELSE now() END
        WHERE x.tenant = p_tenant AND x.id = p_id
          AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
               OR x.lease_expires < clock_timestamp())
          AND x.lease_queue IS NULL
        RETURNING * INTO s;
        IF NOT FOUND THEN
            -- Held as this statement's snapshot saw it, or missing. Lock the row: if the
            -- holder's last statement is in flight this waits for it and reads the row it
            -- commits (free, the step stored) instead of answering busy.
            SELECT * INTO s FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id FOR UPDATE;
            IF FOUND THEN
                -- Held by another owner, or free but another replica's waiter is ahead:
                -- busy, and this owner's place in the queue is kept (migration 0022).
                q := cascade_lease_queue_v1(p_owner, s.lease_owner, s.lease_expires,
                                            s.lease_queue, s.lease_queue_expires);
                IF NOT q.take THEN
                    busy := true;
                    UPDATE sessions x SET lease_queue = q.queue,
                        lease_queue_expires = q.expires
                    WHERE x.tenant = p_tenant AND x.id = p_id;
                ELSE
                    UPDATE sessions x SET lease_owner = p_owner,
                        lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
                        lease_queue = q.queue, lease_queue_expires = q.expires,
                        agent = p_agent, model = p_model,
                        updated_at = CASE WHEN x.agent = p_agent
                                          AND x.model IS NOT DISTINCT FROM p_model
                                          THEN x.updated_at ELSE now() END
                    WHERE x.tenant = p_tenant AND x.id = p_id
                    RETURNING * INTO s;
                END IF;
            ELSE  -- a new session; a first request on it from elsewhere may have just made it
                INSERT INTO sessions AS x (tenant, id, agent, model, lease_owner, lease_expires)
                VALUES (p_tenant, p_id, p_agent, p_model, p_owner,
                        clock_timestamp() + make_interval(secs => p_ttl))
                ON CONFLICT (tenant, id) DO NOTHING
                RETURNING * INTO s;
                busy := NOT FOUND;
            END IF;
        END IF;
    END IF;
    IF busy THEN
        RETURN QUERY SELECT json_build_object('busy', true),
            NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
            NULL::boolean, NULL::boolean;
        RETURN;
    END IF;
    SELECT m.version, m.boundary, m.content INTO sm FROM summaries m
    WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
    ORDER BY m.version DESC LIMIT 1;
    hit := p_start IS NOT NULL AND s.head_len = p_start
           AND s.head_hash IS NOT DISTINCT FROM p_start_hash;
    RETURN QUERY SELECT (to_jsonb(s) || jsonb_build_object(
        'summary_version', sm.version, 'summary_boundary', sm.boundary,
        'summary_content', sm.content, 'appended', hit, 'busy', false))::json,
        NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
        NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM FROM cascade_append_v2(p_tenant, p_id, json_array_length(p_rows) > 0 AND NOT moved,
        p_head_len, p_head_hash, p_system_count, NULL, NULL, NULL, NULL,
        p_rows, p_bodies, NULL, p_spills, p_events);
    RETURN QUERY SELECT NULL::json, w.* FROM cascade_window_v1(p_tenant, p_id, p_system_count,
        greatest(coalesce(sm.boundary, 0), p_system_count), p_start) AS w;
END
$$;
