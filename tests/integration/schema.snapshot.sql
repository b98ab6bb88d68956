CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public;

COMMENT ON EXTENSION vector IS 'vector data type and ivfflat and hnsw access methods';

CREATE FUNCTION public.cascade_begin_step(p_tenant text, p_id text, p_agent text, p_model text, p_key bigint, p_start integer, p_start_hash text, p_head_len integer, p_head_hash text, p_system_count integer, r_pos integer[], r_hash text[], r_role text[], r_message json[], r_tool_call_id text[], r_tokens integer[], r_redacted boolean[], r_verbatim boolean[], x_id text[], x_content text[], x_bytes bigint[], x_capped boolean[], e_names text[], e_data jsonb[]) RETURNS TABLE(session json, pos integer, hash text, role text, message json, tool_call_id text, tokens integer, redacted boolean, spilled boolean, verbatim boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
BEGIN
    PERFORM pg_advisory_lock(p_key);
    LOOP  -- at most twice: read; if missing or changed, write and read again
        SELECT * INTO s FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id;
        EXIT WHEN FOUND AND s.agent = p_agent AND s.model IS NOT DISTINCT FROM p_model;
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO sessions AS x (tenant, id, agent, model)
        VALUES (p_tenant, p_id, p_agent, p_model)
        ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now(), model = EXCLUDED.model,
            agent = EXCLUDED.agent;
    END LOOP;
    SELECT m.version, m.boundary, m.content INTO sm FROM summaries m
    WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
    ORDER BY m.version DESC LIMIT 1;
    hit := p_start IS NOT NULL AND s.head_len = p_start
           AND s.head_hash IS NOT DISTINCT FROM p_start_hash;
    RETURN QUERY SELECT (to_jsonb(s) || jsonb_build_object(
        'summary_version', sm.version, 'summary_boundary', sm.boundary,
        'summary_content', sm.content, 'appended', hit))::json,
        NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
        NULL::boolean, NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                          redacted, verbatim)
    SELECT p_tenant, p_id, t.* FROM unnest(r_pos, r_hash, r_role, r_message, r_tool_call_id,
                                           r_tokens, r_redacted, r_verbatim) AS t;
    IF cardinality(x_id) > 0 THEN
        INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,
                                      original_bytes, capped)
        SELECT p_tenant, p_id, r.* FROM unnest(x_id, x_content, x_bytes, x_capped) AS r
        ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    END IF;
    IF cardinality(r_pos) > 0 THEN
        UPDATE sessions SET head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE tenant = p_tenant AND id = p_id;
    END IF;
    INSERT INTO events (tenant, session_id, name, data)
    SELECT p_tenant, p_id, e.n, e.d FROM unnest(e_names, e_data) WITH ORDINALITY AS e(n, d, o)
    ORDER BY e.o;
    -- the window's older rows: the leading system rows and the live rows after the summary,
    -- as two index ranges (one OR condition scans the whole history; see store/messages.py
    -- _window); the new rows are the caller's, and so is the body of every verbatim row
    RETURN QUERY
    SELECT * FROM (
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens,
               m.redacted, false,
               m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < least(p_system_count, p_start)
        UNION ALL
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens,
               m.redacted, false,
               m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < p_start
          AND m.pos >= greatest(coalesce(sm.boundary, 0), p_system_count)
    ) w ORDER BY 2;
END
$$;

CREATE FUNCTION public.cascade_keep_raw_output_version() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH replaced AS (
        DELETE FROM tool_raw_outputs o
        WHERE o.tenant = NEW.tenant AND o.session_id = NEW.session_id
          AND o.tool_call_id = NEW.tool_call_id AND o.content IS DISTINCT FROM NEW.content
        RETURNING o.*
    )
    INSERT INTO tool_raw_output_versions (tenant, session_id, tool_call_id, content,
                                          original_bytes, capped, created_at)
    SELECT tenant, session_id, tool_call_id, content, original_bytes, capped, created_at
    FROM replaced;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.cascade_notify_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM event_watchers w WHERE w.tenant = NEW.tenant
               AND w.session_id = NEW.session_id AND w.expires_at > now()) THEN
        PERFORM pg_notify('cascade_events', json_build_object(
            't', NEW.tenant, 's', NEW.session_id, 'n', NEW.name, 'i', NEW.id,
            'd', CASE WHEN octet_length(NEW.data::text) > 7400 THEN NULL ELSE NEW.data END)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.cascade_release_session(p_key bigint) RETURNS boolean
    LANGUAGE plpgsql STRICT
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    RETURN pg_advisory_unlock(p_key);
END
$$;

CREATE UNLOGGED TABLE public.event_watchers (
    tenant text NOT NULL,
    session_id text NOT NULL,
    replica uuid NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.events (
    id bigint NOT NULL,
    tenant text NOT NULL,
    session_id text NOT NULL,
    name text NOT NULL,
    data jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE public.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.events_id_seq OWNED BY public.events.id;

CREATE TABLE public.memory (
    id bigint NOT NULL,
    tenant text NOT NULL,
    scope text DEFAULT 'global'::text NOT NULL,
    fact text NOT NULL,
    source_session text,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE SEQUENCE public.memory_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.memory_id_seq OWNED BY public.memory.id;

CREATE TABLE public.messages (
    id bigint NOT NULL,
    tenant text NOT NULL,
    session_id text NOT NULL,
    pos integer NOT NULL,
    hash text NOT NULL,
    role text NOT NULL,
    message json NOT NULL,
    tool_call_id text,
    tokens integer DEFAULT 0 NOT NULL,
    redacted boolean DEFAULT false NOT NULL,
    evicted_at timestamp with time zone,
    trimmed_at timestamp with time zone,
    superseded_at timestamp with time zone,
    source text DEFAULT 'client'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    verbatim boolean DEFAULT false NOT NULL,
    placeholder json
);
ALTER TABLE ONLY public.messages ALTER COLUMN message SET STORAGE EXTERNAL;

CREATE SEQUENCE public.messages_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.messages_id_seq OWNED BY public.messages.id;

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.sessions (
    tenant text NOT NULL,
    id text NOT NULL,
    agent text DEFAULT 'default'::text NOT NULL,
    model text,
    parent_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    head_len integer DEFAULT 0 NOT NULL,
    head_hash text,
    system_count integer DEFAULT 0 NOT NULL,
    last_prompt_tokens integer,
    last_estimate integer,
    calibration double precision DEFAULT 1.0 NOT NULL,
    reclaimed_tokens bigint DEFAULT 0 NOT NULL
);

CREATE TABLE public.summaries (
    tenant text NOT NULL,
    session_id text NOT NULL,
    version integer NOT NULL,
    boundary integer NOT NULL,
    boundary_hash text,
    content text NOT NULL,
    tokens integer DEFAULT 0 NOT NULL,
    model text,
    invalidated_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.tool_raw_output_versions (
    tenant text NOT NULL,
    session_id text NOT NULL,
    tool_call_id text NOT NULL,
    content text NOT NULL,
    original_bytes bigint NOT NULL,
    capped boolean NOT NULL,
    created_at timestamp with time zone NOT NULL,
    replaced_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.tool_raw_outputs (
    tenant text NOT NULL,
    session_id text NOT NULL,
    tool_call_id text NOT NULL,
    content text NOT NULL,
    original_bytes bigint NOT NULL,
    capped boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);
ALTER TABLE ONLY public.tool_raw_outputs ALTER COLUMN content SET STORAGE EXTERNAL;

ALTER TABLE ONLY public.events ALTER COLUMN id SET DEFAULT nextval('public.events_id_seq'::regclass);

ALTER TABLE ONLY public.memory ALTER COLUMN id SET DEFAULT nextval('public.memory_id_seq'::regclass);

ALTER TABLE ONLY public.messages ALTER COLUMN id SET DEFAULT nextval('public.messages_id_seq'::regclass);

ALTER TABLE ONLY public.event_watchers
    ADD CONSTRAINT event_watchers_pkey PRIMARY KEY (tenant, session_id, replica);

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.memory
    ADD CONSTRAINT memory_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (tenant, id);

ALTER TABLE ONLY public.summaries
    ADD CONSTRAINT summaries_pkey PRIMARY KEY (tenant, session_id, version);

ALTER TABLE ONLY public.tool_raw_outputs
    ADD CONSTRAINT tool_raw_outputs_pkey PRIMARY KEY (tenant, session_id, tool_call_id);

CREATE INDEX events_compaction ON public.events USING btree (tenant, session_id, id) WHERE (name = ANY (ARRAY['context.compaction.started'::text, 'context.compaction.completed'::text, 'context.compaction.failed'::text]));

CREATE INDEX events_session ON public.events USING btree (tenant, session_id, id);

CREATE INDEX memory_scope ON public.memory USING btree (tenant, scope);

CREATE INDEX messages_evicted ON public.messages USING btree (tenant, session_id, tool_call_id) WHERE (placeholder IS NOT NULL);

CREATE UNIQUE INDEX messages_live_pos ON public.messages USING btree (tenant, session_id, pos) WHERE (superseded_at IS NULL);

CREATE INDEX messages_session_pos ON public.messages USING btree (tenant, session_id, pos);

CREATE INDEX tool_raw_output_versions_call ON public.tool_raw_output_versions USING btree (tenant, session_id, tool_call_id);

CREATE TRIGGER events_notify AFTER INSERT ON public.events FOR EACH ROW EXECUTE FUNCTION public.cascade_notify_event();

CREATE TRIGGER raw_output_versions BEFORE INSERT ON public.tool_raw_outputs FOR EACH ROW EXECUTE FUNCTION public.cascade_keep_raw_output_version();

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_tenant_session_id_fkey FOREIGN KEY (tenant, session_id) REFERENCES public.sessions(tenant, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_tenant_session_id_fkey FOREIGN KEY (tenant, session_id) REFERENCES public.sessions(tenant, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.summaries
    ADD CONSTRAINT summaries_tenant_session_id_fkey FOREIGN KEY (tenant, session_id) REFERENCES public.sessions(tenant, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.tool_raw_output_versions
    ADD CONSTRAINT tool_raw_output_versions_tenant_session_id_fkey FOREIGN KEY (tenant, session_id) REFERENCES public.sessions(tenant, id) ON DELETE CASCADE;

ALTER TABLE ONLY public.tool_raw_outputs
    ADD CONSTRAINT tool_raw_outputs_tenant_session_id_fkey FOREIGN KEY (tenant, session_id) REFERENCES public.sessions(tenant, id) ON DELETE CASCADE;
