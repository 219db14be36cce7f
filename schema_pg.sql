-- fleet-agent: the PostgreSQL schema (storage.url: postgresql://...).
--
-- The same tables as schema.sql, for many fleets in one database: every row carries its fleet
-- (agent_id, defaulting to the connection's fleet_agent.agent_id setting, which agent/store/pg.py
-- sets on connect), and row-level security (FORCE: the tables' owner too) shows a connection only
-- its own fleet's rows, so the queries of agent/store/queries.py need no fleet filter. seq is per
-- fleet. Applied by agent/store/pg.py as ordered migrations, each in one transaction with its row
-- in _migrations; released sections are never edited.

-- migration: 001_pg_schema
CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL);

-- The payload as jsonb, for queries only: the hash covers the text column, byte for byte.
-- jsonb refuses the escaped NUL character, which JSON text may hold; queries read it as U+FFFD.
CREATE FUNCTION fleet_agent_body(t TEXT) RETURNS JSONB LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT replace(t, '\u0000', '\ufffd')::jsonb $$;

CREATE TABLE events (
    agent_id  TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    seq       BIGINT NOT NULL,
    id        TEXT NOT NULL,
    ts        TEXT NOT NULL,
    kind      TEXT NOT NULL,
    version   INTEGER NOT NULL DEFAULT 1,
    source    TEXT NOT NULL CHECK (source IN ('scheduler','model','tool','operator','system')),
    tick      BIGINT,
    payload   TEXT NOT NULL,
    tokens    INTEGER,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    body      JSONB GENERATED ALWAYS AS (fleet_agent_body(payload)) STORED,
    PRIMARY KEY (agent_id, seq)
);
CREATE INDEX events_kind_seq ON events(agent_id, kind, seq);
CREATE INDEX events_tick ON events(agent_id, tick) WHERE tick IS NOT NULL;
CREATE INDEX events_ts ON events(agent_id, ts);
CREATE INDEX events_kind_tick ON events(agent_id, kind, tick) WHERE tick IS NOT NULL;
CREATE INDEX events_alert ON events(agent_id, (body->>'alert_id'), seq) WHERE kind LIKE 'alert.%';

-- Append-only, enforced by the server: row triggers refuse UPDATE and DELETE, a statement trigger
-- refuses TRUNCATE (the agent's role should also hold only SELECT and INSERT on this table).
CREATE FUNCTION fleet_agent_append_only() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION fleet_agent_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_agent_append_only();

-- Full-text index over each event's rendered text (log search, search_history).
CREATE TABLE events_fts (
    agent_id TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    seq      BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    text     TEXT NOT NULL,
    tsv      TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    PRIMARY KEY (agent_id, seq)
);
CREATE INDEX events_fts_tsv ON events_fts USING GIN (tsv);
CREATE TRIGGER events_fts_no_update BEFORE UPDATE OR DELETE ON events_fts
    FOR EACH ROW EXECUTE FUNCTION fleet_agent_append_only();
CREATE TRIGGER events_fts_no_truncate BEFORE TRUNCATE ON events_fts
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_agent_append_only();

-- Read models (schema.sql 002, 003, 005, 006), each keyed by fleet first.
CREATE TABLE alerts (
    agent_id    TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    id          BIGINT NOT NULL,
    dedup_key   TEXT NOT NULL,
    severity    TEXT NOT NULL,
    title       TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '',
    raised_by   TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open','acked','resolved')),
    count       BIGINT NOT NULL DEFAULT 1,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    first_ts    TEXT NOT NULL,
    last_ts     TEXT NOT NULL,
    acked_by    TEXT,
    ack_note    TEXT,
    closed_seq  BIGINT,
    notified_ts TEXT,
    notified_reason TEXT,
    PRIMARY KEY (agent_id, id)
);
CREATE INDEX alerts_live ON alerts(agent_id, status, dedup_key) WHERE status IN ('open', 'acked');

CREATE TABLE memory (
    agent_id TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    key  TEXT NOT NULL,
    text TEXT NOT NULL,
    seq  BIGINT NOT NULL,
    ts   TEXT NOT NULL,
    PRIMARY KEY (agent_id, key)
);

CREATE TABLE directives (
    agent_id     TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    id           BIGINT NOT NULL,
    text         TEXT NOT NULL,
    by           TEXT NOT NULL,
    ts           TEXT NOT NULL,
    active       INTEGER NOT NULL DEFAULT 1,
    unpinned_seq BIGINT,
    PRIMARY KEY (agent_id, id)
);

CREATE TABLE instances (
    agent_id      TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    instance_id   BIGINT NOT NULL,
    label         TEXT NOT NULL,
    idem_key      TEXT,
    offer_id      BIGINT,
    gpu_name      TEXT,
    dph           DOUBLE PRECISION,
    rented_seq    BIGINT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active','destroyed')),
    destroyed_seq BIGINT,
    PRIMARY KEY (agent_id, instance_id)
);

CREATE TABLE intents (
    agent_id   TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    call_id    TEXT NOT NULL,
    idem_key   TEXT,
    tool       TEXT NOT NULL,
    arguments  TEXT NOT NULL,
    called_seq BIGINT NOT NULL,
    result_seq BIGINT,
    ok         INTEGER,
    PRIMARY KEY (agent_id, call_id)
);
CREATE INDEX intents_open ON intents(agent_id, called_seq) WHERE result_seq IS NULL;
CREATE INDEX intents_called ON intents(agent_id, called_seq);
CREATE INDEX intents_idem ON intents(agent_id, idem_key) WHERE idem_key IS NOT NULL;

CREATE TABLE knowledge (
    agent_id TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    name    TEXT NOT NULL,
    version BIGINT NOT NULL,
    hash    TEXT,
    size    BIGINT NOT NULL,
    seq     BIGINT NOT NULL,
    ts      TEXT NOT NULL,
    change  TEXT NOT NULL CHECK (change IN ('added','changed','removed')),
    PRIMARY KEY (agent_id, name, version)
);

CREATE TABLE silences (
    agent_id    TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    id          BIGINT NOT NULL,
    alert_id    BIGINT,
    key_pattern TEXT,
    until_ts    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    by          TEXT NOT NULL,
    ts          TEXT NOT NULL,
    lifted_seq  BIGINT,
    PRIMARY KEY (agent_id, id)
);

CREATE TABLE instance_states (
    agent_id    TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    instance_id BIGINT NOT NULL,
    status      TEXT NOT NULL,
    intended    TEXT,
    since       DOUBLE PRECISION NOT NULL,
    seen_seq    BIGINT NOT NULL,
    PRIMARY KEY (agent_id, instance_id)
);

-- Row-level security: a connection sees and writes only the rows of the fleet it named.
DO $$
DECLARE t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'events_fts', 'alerts', 'memory', 'directives', 'instances', 'intents',
                             'knowledge', 'silences', 'instance_states'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY fleet ON %I USING (agent_id = current_setting(''fleet_agent.agent_id''))'
                       ' WITH CHECK (agent_id = current_setting(''fleet_agent.agent_id''))', t);
    END LOOP;
END $$;
