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
-- migration: 007_observed_runs
-- The spend read model: for each instance of ours, the runs of consecutive tick observations that saw it
-- in one state (running, or not), from the tick.started observations. Spend reads a period's runs here
-- instead of every observation of the period (agent/spend.py). Filled from the log already written.
CREATE TABLE observed_runs (
    instance_id INTEGER NOT NULL,
    first_seq   INTEGER NOT NULL,  -- the tick.started whose observation began the run
    first_ts    TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,  -- the last tick.started that saw it in this state
    last_ts     TEXT NOT NULL,
    running     INTEGER NOT NULL,  -- 1: its status was 'running'
    PRIMARY KEY (instance_id, first_seq)
);
CREATE INDEX observed_runs_last ON observed_runs(last_ts);
INSERT INTO observed_runs (instance_id, first_seq, first_ts, last_seq, last_ts, running)
WITH seen AS (
    SELECT json_extract(j.value, '$.id') AS iid, e.seq AS seq, e.ts AS ts,
           (json_extract(j.value, '$.status') IS 'running') AS running
    FROM events e, json_each(e.payload, '$.observation.instances') j
    WHERE e.kind = 'tick.started' AND json_extract(j.value, '$.ours') = 1
      AND json_type(j.value, '$.id') IN ('integer', 'true', 'false')
), marked AS (
    SELECT *, (running IS NOT LAG(running) OVER (PARTITION BY iid ORDER BY seq)) AS starts FROM seen
), numbered AS (
    SELECT *, SUM(starts) OVER (PARTITION BY iid ORDER BY seq ROWS UNBOUNDED PRECEDING) AS run FROM marked
), ends AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY iid, run ORDER BY seq) AS nth,
              ROW_NUMBER() OVER (PARTITION BY iid, run ORDER BY seq DESC) AS nth_last FROM numbered
)
SELECT f.iid, f.seq, f.ts, l.seq, l.ts, f.running
FROM ends f JOIN ends l ON l.iid = f.iid AND l.run = f.run AND l.nth_last = 1
WHERE f.nth = 1;

-- migration: 008_segments
-- Storage tiers (agent/store/archive.py, `fleet-agent log archive`): events older than storage.archive_after
-- and covered by a summary move into sealed, zstd-compressed segment files, one per calendar month, in
-- <database>.segments/ (and, with storage.archive_url, on object storage). One stub row per segment keeps
-- the chain whole: the first archived event's prev_hash and the last one's hash link it to its neighbours,
-- and sha256 pins the file. Readers skip a segment whose seq, ts, tick range or kinds cannot match.
CREATE TABLE segments (
    first_seq  INTEGER PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    name       TEXT NOT NULL UNIQUE,   -- the file, e.g. 2026-08.jsonl.zst
    month      TEXT NOT NULL,          -- YYYY-MM (UTC) of every event in it
    prev_hash  TEXT NOT NULL,          -- prev_hash of first_seq: the link to the segment (or genesis) before
    last_hash  TEXT NOT NULL,          -- hash of last_seq: what the next row links to
    first_ts   TEXT NOT NULL,
    last_ts    TEXT NOT NULL,
    events     INTEGER NOT NULL,
    kinds      TEXT NOT NULL,          -- JSON list of the kinds it holds
    min_tick   INTEGER,
    max_tick   INTEGER,
    bytes      INTEGER NOT NULL,       -- the compressed file
    raw_bytes  INTEGER NOT NULL,       -- the JSON lines before compression
    sha256     TEXT NOT NULL,          -- of the compressed file
    sealed_ts  TEXT NOT NULL,
    copy_url   TEXT,                   -- where a verified copy lives outside the data directory (s3://, a backup)
    copy_ts    TEXT,                   -- when that copy was written and read back
    pruned_ts  TEXT                    -- when the local file was deleted (log prune; only with a copy)
);
-- A segment continues the last one, ends before the newest event, and its boundary hashes are those of
-- rows the log holds when it is sealed (the archive inserts it, then deletes the rows, in one transaction).
CREATE TRIGGER segments_link BEFORE INSERT ON segments
WHEN NEW.first_seq != COALESCE((SELECT MAX(last_seq) FROM segments), 0) + 1
  OR NEW.last_seq < NEW.first_seq
  OR NEW.last_seq >= (SELECT MAX(seq) FROM events)
  OR NOT EXISTS (SELECT 1 FROM events WHERE seq = NEW.first_seq AND prev_hash = NEW.prev_hash)
  OR NOT EXISTS (SELECT 1 FROM events WHERE seq = NEW.last_seq AND hash = NEW.last_hash)
  OR (SELECT COUNT(*) FROM events WHERE seq BETWEEN NEW.first_seq AND NEW.last_seq)
     != NEW.last_seq - NEW.first_seq + 1
BEGIN SELECT RAISE(ABORT, 'a segment must continue the last one and hold rows the log has, the newest excepted'); END;
-- Sealed: only where a copy lives and when the local file was pruned may be recorded.
CREATE TRIGGER segments_sealed BEFORE UPDATE ON segments
WHEN NEW.first_seq IS NOT OLD.first_seq OR NEW.last_seq IS NOT OLD.last_seq OR NEW.name IS NOT OLD.name
  OR NEW.month IS NOT OLD.month OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.last_hash IS NOT OLD.last_hash
  OR NEW.first_ts IS NOT OLD.first_ts OR NEW.last_ts IS NOT OLD.last_ts OR NEW.events IS NOT OLD.events
  OR NEW.kinds IS NOT OLD.kinds OR NEW.min_tick IS NOT OLD.min_tick OR NEW.max_tick IS NOT OLD.max_tick
  OR NEW.bytes IS NOT OLD.bytes OR NEW.raw_bytes IS NOT OLD.raw_bytes OR NEW.sha256 IS NOT OLD.sha256
  OR NEW.sealed_ts IS NOT OLD.sealed_ts OR (OLD.pruned_ts IS NOT NULL AND NEW.pruned_ts IS NOT OLD.pruned_ts)
BEGIN SELECT RAISE(ABORT, 'segments are sealed: only a verified copy and a prune are recorded'); END;
CREATE TRIGGER segments_prune_needs_copy BEFORE UPDATE OF pruned_ts ON segments
WHEN NEW.pruned_ts IS NOT NULL AND (NEW.copy_url IS NULL OR NEW.copy_ts IS NULL)
BEGIN SELECT RAISE(ABORT, 'a segment is pruned only after a copy elsewhere was written and verified'); END;
CREATE TRIGGER segments_no_delete BEFORE DELETE ON segments
BEGIN SELECT RAISE(ABORT, 'segments are never deleted: their stubs keep the chain whole'); END;
-- The one DELETE the log allows: rows a sealed segment holds (the archive move). Everything else is refused
-- as before; UPDATE stays refused without exception.
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM segments s WHERE s.first_seq = (
    SELECT MAX(first_seq) FROM segments WHERE first_seq <= OLD.seq) AND OLD.seq <= s.last_seq)
BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused (only rows a sealed segment holds move out, through fleet-agent log archive)'); END;

-- migration: 009_contentless_search
-- The full-text index keeps no copy of the text it indexes (content='') nor where in it each word
-- stands (detail=none): a search finds the events holding every word of the query here, then matches
-- the query itself (phrases in order) and computes the snippets it shows over those events' renderings,
-- which are a function of the event. The new index starts empty; the next search (or tick) catches it
-- up from the log, in batches.
DROP TABLE events_fts;
CREATE VIRTUAL TABLE events_fts USING fts5(text, content = '', detail = none, tokenize = 'porter unicode61');

-- migration: 010_tick_marks_index
-- events_kind_tick held every event of every tick (most of the log) to answer two questions: the highest
-- tick of the tick.started and tick.failed events (the next tick's number) and one kind's events of one
-- tick. The second goes through events_tick (a tick has a few dozen events); the first needs only the
-- tick.started and tick.failed rows, about one event in eight, which this index holds. The planner uses
-- it when the query names one of those two kinds (a bound parameter too: SQLite plans with its value).
DROP INDEX events_kind_tick;
CREATE INDEX events_tick_marks ON events(kind, tick) WHERE kind = 'tick.started' OR kind = 'tick.failed';

-- migration: 011_run_uptime
-- When a running run of observed_runs began, as vast.ai reports it: the instance's uptime (uptime_mins, the
-- observation's up_s) at the run's first observation, in seconds; null for a run not running or an
-- observation without it. Spend bills the $/h from first_ts - up_s instead of half the time since the
-- observation before (agent/fleet/spend.py). Filled from the observations the events table holds: a
-- record list, or the stored columns (tick.started v4: up_s shared by every record, one value per record,
-- or distinct values and an index); runs whose first observation was archived keep null (log rebuild fills them).
ALTER TABLE observed_runs ADD COLUMN up_s REAL;
UPDATE observed_runs SET up_s = (
    SELECT CASE WHEN json_type(e.payload, p.path) IN ('integer', 'real') AND json_extract(e.payload, p.path) >= 0
                THEN CAST(json_extract(e.payload, p.path) AS REAL) END
    FROM events e, (
        SELECT '$.observation.instances[' || j.key || '].up_s' AS path
        FROM events e2, json_each(e2.payload, '$.observation.instances') j
        WHERE e2.seq = observed_runs.first_seq AND json_type(e2.payload, '$.observation.instances') = 'array'
          AND json_extract(j.value, '$.id') = observed_runs.instance_id
        UNION ALL
        SELECT CASE
            WHEN json_type(e2.payload, '$.observation.instances.same.up_s') IS NOT NULL
                THEN '$.observation.instances.same.up_s'
            WHEN json_type(e2.payload, '$.observation.instances.columns.up_s') = 'array'
                THEN '$.observation.instances.columns.up_s[' || j.key || ']'
            WHEN json_type(e2.payload, '$.observation.instances.columns.up_s') = 'object'
                THEN '$.observation.instances.columns.up_s.values[' ||
                     json_extract(e2.payload, '$.observation.instances.columns.up_s.index[' || j.key || ']') || ']'
            END
        FROM events e2, json_each(e2.payload, '$.observation.instances.columns.id') j
        WHERE e2.seq = observed_runs.first_seq AND json_type(e2.payload, '$.observation.instances') = 'object'
          AND j.value = observed_runs.instance_id
    ) p
    WHERE e.seq = observed_runs.first_seq AND p.path IS NOT NULL
    LIMIT 1)
WHERE running = 1;
