-- fleet-agent: the whole SQLite schema.
--
-- Applied at open by agent/store/db.py as an ordered list of migrations: each
-- "-- migration: NNN_name" section runs once, in one transaction together with
-- its row in _migrations. Released sections are never edited; a change is a new
-- section at the end.

-- migration: 001_events
-- The event log: the single source of truth. Append-only (triggers below).
CREATE TABLE events (
    seq       INTEGER PRIMARY KEY,          -- monotonic, gap-free position in the log
    id        TEXT NOT NULL,                -- uuid4, stable reference for citations (no index: never looked up)
    ts        TEXT NOT NULL,                -- UTC, ISO 8601 with microseconds and 'Z'
    kind      TEXT NOT NULL,                -- e.g. 'tick.started' (agent/events.py)
    version   INTEGER NOT NULL DEFAULT 1,   -- payload version of the kind; readers upcast
    source    TEXT NOT NULL CHECK (source IN ('scheduler','model','tool','operator','system')),
    tick      INTEGER,                      -- the tick this event belongs to, if any
    payload   TEXT NOT NULL,                -- canonical JSON
    tokens    INTEGER,                      -- tokens of the model-visible rendering; NULL = not visible
    prev_hash TEXT NOT NULL,                -- hash of the previous row ('0'*64 for the first)
    hash      TEXT NOT NULL                 -- sha256(canonical row content + prev_hash); the chain, not an index, guards it
);
CREATE INDEX events_kind_seq ON events(kind, seq);
CREATE INDEX events_tick ON events(tick) WHERE tick IS NOT NULL;
CREATE INDEX events_ts ON events(ts);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE refused'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused'); END;

-- Full-text index over each event's rendered text (search_history, log search).
-- rowid = events.seq.
CREATE VIRTUAL TABLE events_fts USING fts5(text, kind UNINDEXED, tokenize = 'porter unicode61');

-- migration: 002_read_models
-- Read models: tables kept in step with the events in the same transaction,
-- and rebuildable from the log alone (fleet-agent log rebuild --check).

-- Alerts raised by the model or by code; one open row per dedup key.
CREATE TABLE alerts (
    id          INTEGER PRIMARY KEY,
    dedup_key   TEXT NOT NULL,
    severity    TEXT NOT NULL,
    title       TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '',
    raised_by   TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open','acked','resolved')),
    count       INTEGER NOT NULL DEFAULT 1,   -- sightings while open (dedup instead of flooding)
    first_seq   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    first_ts    TEXT NOT NULL,
    last_ts     TEXT NOT NULL,
    acked_by    TEXT,
    ack_note    TEXT,
    closed_seq  INTEGER
);
CREATE INDEX alerts_open_key ON alerts(dedup_key) WHERE status = 'open';

-- The agent's own memory (remember / forget).
CREATE TABLE memory (
    key  TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    seq  INTEGER NOT NULL,
    ts   TEXT NOT NULL
);

-- Standing operator directives (say --pin); id = seq of the operator.note.
CREATE TABLE directives (
    id           INTEGER PRIMARY KEY,
    text         TEXT NOT NULL,
    by           TEXT NOT NULL,
    ts           TEXT NOT NULL,
    active       INTEGER NOT NULL DEFAULT 1,
    unpinned_seq INTEGER
);

-- Instances this agent rented (ownership: only these may be destroyed).
CREATE TABLE instances (
    instance_id   INTEGER PRIMARY KEY,
    label         TEXT NOT NULL,
    idem_key      TEXT,
    offer_id      INTEGER,
    gpu_name      TEXT,
    dph           REAL,
    rented_seq    INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active','destroyed')),
    destroyed_seq INTEGER
);

-- Side-effecting tool calls: intent (tool.called) and outcome (tool.result).
-- A row with result_seq NULL is a dangling intent to reconcile.
CREATE TABLE intents (
    call_id    TEXT PRIMARY KEY,
    idem_key   TEXT,
    tool       TEXT NOT NULL,
    arguments  TEXT NOT NULL,
    called_seq INTEGER NOT NULL,
    result_seq INTEGER,
    ok         INTEGER
);
CREATE INDEX intents_open ON intents(called_seq) WHERE result_seq IS NULL;

-- Versions of each knowledge file as seen at tick starts.
CREATE TABLE knowledge (
    name    TEXT NOT NULL,
    version INTEGER NOT NULL,
    hash    TEXT,                 -- NULL when the file was removed
    size    INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    ts      TEXT NOT NULL,
    change  TEXT NOT NULL CHECK (change IN ('added','changed','removed')),
    PRIMARY KEY (name, version)
);

-- migration: 003_alert_silences
-- Silences (alerts silence): while one matches an alert and has not expired or been lifted, the alert
-- notifies nobody; id = seq of its alert.silenced. Matches one alert (alert_id) or keys (key_pattern, a glob).
CREATE TABLE silences (
    id          INTEGER PRIMARY KEY,
    alert_id    INTEGER,
    key_pattern TEXT,
    until_ts    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    by          TEXT NOT NULL,
    ts          TEXT NOT NULL,
    lifted_seq  INTEGER
);
-- The last notification about each alert (alert.notified): when, and why (opened | repeat | resolved).
ALTER TABLE alerts ADD COLUMN notified_ts TEXT;
ALTER TABLE alerts ADD COLUMN notified_reason TEXT;
-- An acked alert whose condition then cleared is resolved (it used to stay 'acked').
UPDATE alerts SET status = 'resolved', closed_seq = (
    SELECT MIN(e.seq) FROM events e WHERE e.kind = 'alert.resolved' AND e.seq > alerts.closed_seq
      AND json_extract(e.payload, '$.alert_id') = alerts.id)
WHERE status = 'acked' AND EXISTS (
    SELECT 1 FROM events e WHERE e.kind = 'alert.resolved' AND e.seq > alerts.closed_seq
      AND json_extract(e.payload, '$.alert_id') = alerts.id);
-- migration: 004_event_indexes
-- Indexes that keep every query of a tick, an operator command and the projection
-- independent of the log's length (tests/test_query_plans.py checks each plan).

-- MAX(tick) of one kind, and one kind's events of one tick (next tick number, status, per-tick counts).
CREATE INDEX events_kind_tick ON events(kind, tick) WHERE tick IS NOT NULL;
-- The events about one alert (alerts show, whether an acked alert was resolved since).
CREATE INDEX events_alert ON events(json_extract(payload, '$.alert_id'), seq) WHERE kind GLOB 'alert.*';

-- migration: 005_read_model_indexes
-- The read models' side of 004: lookups by key instead of walks over every row ever written.

-- Intents by the event that logged them (rents and destroys in the last hour) and by idempotency key.
CREATE INDEX intents_called ON intents(called_seq);
CREATE INDEX intents_idem ON intents(idem_key) WHERE idem_key IS NOT NULL;
-- Rents answered "pending" and not yet settled.
CREATE INDEX intents_unsettled ON intents(called_seq) WHERE result_seq IS NOT NULL AND ok IS NULL;
-- Open alerts in id order; the live (open or acked) ones by dedup key or key prefix.
CREATE INDEX alerts_open ON alerts(id) WHERE status = 'open';
CREATE INDEX alerts_live ON alerts(status, dedup_key) WHERE status IN ('open', 'acked');
-- migration: 006_instance_states
-- What vast.ai last reported for each listed instance, from the tick observations, and since when:
-- `since` is the fleet-clock time of the observation that first showed this status. "Stuck" is
-- measured from it, not from the rent, so a reboot or any other change restarts the clock.
CREATE TABLE instance_states (
    instance_id INTEGER PRIMARY KEY,
    status      TEXT NOT NULL,    -- actual_status; 'provisioning' while vast.ai reports none
    intended    TEXT,             -- intended_status: what the owner asked for
    since       REAL NOT NULL,    -- epoch seconds
    seen_seq    INTEGER NOT NULL  -- the tick.started that last listed it
);
-- migration: 009_contentless_search
-- The full-text index keeps no copy of the text it indexes (content='') nor where in it each word
-- stands (detail=none): a search finds the events holding every word of the query here, then matches
-- the query itself (phrases in order) and computes the snippets it shows over those events' renderings,
-- which are a function of the event. The new index starts empty; the next search (or tick) catches it
-- up from the log, in batches.
DROP TABLE events_fts;
CREATE VIRTUAL TABLE events_fts USING fts5(text, content = '', detail = none, tokenize = 'porter unicode61');
