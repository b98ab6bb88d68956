-- A session freed while someone waits for it says so on the 'cascade_lease' channel.
--
-- A waiter on another replica (a chat request, a reset, delete or branch) polled the lease,
-- its pauses doubling to half a second (store/leases.py POLL_MAX_SECONDS): a session freed
-- just after a try sat idle until the next one, which three replicas taking turns on one
-- session paid on every step. Now each replica's bus LISTENs on this channel too and wakes
-- its waiters on the session at once (services/lease_wakeups.py); they still poll, so a
-- notification missed while the listener reconnects costs at most the old pause.
--
-- cascade_lease_freed_v1 sends the notification when the session's queue (migration 0022)
-- holds a live waiter. The statements that free a lease call it only when the queue is not
-- NULL, in their RETURNING list: the request's last statement (store/steps.py RECORD_STEP)
-- and the release of a request that stores nothing (store/leases.py RELEASE_LEASE). A
-- request nobody waits for leaves lease_queue NULL and pays one CASE on a NULL column: no
-- function call, no NOTIFY, no statement, no row write. (A trigger on sessions would also
-- have caught an old replica's release, but its WHEN clause alone, prepared for each
-- UPDATE of the row's lease, cost every request's two statements some microseconds of the
-- server's CPU: docs/perf.md.) cascade_lease_for_update_v1 keeps its signature and calls it
-- when a session operation takes its turn with waiters still behind it: they may go once
-- its transaction commits. NOTIFY is delivered at commit, when the waiter's next try can see
-- the freed row.
--
-- The payload is the session's key hashed (a tenant's name has no length limit, NOTIFY's
-- payload has): the hex sha256 of the tenant, a NUL byte and the session id, in UTF-8
-- (services/lease_wakeups.py session_hash; text holds no NUL, so no two keys hash the same
-- bytes).
--
-- Rolling deploy: an old replica keeps working unchanged. It does not LISTEN on the channel,
-- so its waiters poll as before; its own releases (the old statements) announce nothing, so
-- a new replica's waiter takes a session an old replica frees at its next poll, as before;
-- its session operations call the redefined cascade_lease_for_update_v1, which only adds
-- the notification.
CREATE FUNCTION cascade_lease_freed_v1(p_tenant text, p_id text, p_expires timestamptz[])
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF EXISTS (SELECT FROM unnest(p_expires) AS e WHERE e >= clock_timestamp()) THEN
        PERFORM pg_notify('cascade_lease', encode(sha256(convert_to(p_tenant, 'UTF8')
            || '\x00'::bytea || convert_to(p_id, 'UTF8')), 'hex'));
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- cascade_lease_for_update_v1 as migration 0022 defined it, but for the notification.
CREATE OR REPLACE FUNCTION cascade_lease_for_update_v1(p_tenant text, p_id text, p_owner uuid)
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
    IF q.take AND q.queue IS NOT NULL THEN  -- its turn, and someone is behind it
        PERFORM cascade_lease_freed_v1(p_tenant, p_id, q.expires);
    END IF;
    RETURN q.take;
END
$$;
