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

-- migration: 002_observed_runs
-- The spend read model (schema.sql 007): for each instance of ours, the runs of consecutive tick
-- observations that saw it in one state. No backfill: no PostgreSQL log predates this table.
CREATE TABLE observed_runs (
    agent_id    TEXT NOT NULL DEFAULT current_setting('fleet_agent.agent_id'),
    instance_id BIGINT NOT NULL,
    first_seq   BIGINT NOT NULL,
    first_ts    TEXT NOT NULL,
    last_seq    BIGINT NOT NULL,
    last_ts     TEXT NOT NULL,
    running     INTEGER NOT NULL,
    PRIMARY KEY (agent_id, instance_id, first_seq)
);
CREATE INDEX observed_runs_last ON observed_runs(agent_id, last_ts);
ALTER TABLE observed_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE observed_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY fleet ON observed_runs USING (agent_id = current_setting('fleet_agent.agent_id'))
    WITH CHECK (agent_id = current_setting('fleet_agent.agent_id'));

-- migration: 003_fleet_roles
-- Each fleet bound to the database roles that may run it, in a table only its owner (the role that ran
-- init) writes: row-level security now shows a session the rows of the fleet it names only when its own
-- role is bound to that fleet, so a session naming another fleet (SET fleet_agent.agent_id) sees and
-- writes nothing of it. The policies read the binding through an uncorrelated subquery, evaluated once
-- per statement, whose value the planner does not guess from statistics.
--
-- fleets keeps each fleet's head (last seq and hash), updated in every append transaction: the append's
-- row lock on it serialises a fleet's appends (a role that cannot see the row cannot lock it), and the
-- head is read without a query over the events. Leadership of a fleet is a table lock on a table of its
-- own (fleet_lead_<md5 of agent_id>) that only its bound roles may lock.
--
-- On upgrade every fleet with events is bound to the owner and to every role that could append to the
-- events until now (held INSERT), so a setup that ran every fleet with one role keeps working; the owner
-- then isolates fleets by giving each a role of its own (init --grant) and removing the bindings it does
-- not want (SELECT fleet_agent_unbind('fleet-b', 'fleet_agent')).
CREATE TABLE fleet_roles (
    agent_id TEXT NOT NULL,
    rolname  TEXT NOT NULL,
    bound_at TEXT NOT NULL,
    PRIMARY KEY (agent_id, rolname)
);
ALTER TABLE fleet_roles ENABLE ROW LEVEL SECURITY;  -- not FORCE: the owner binds; any other role reads its own
CREATE POLICY own ON fleet_roles FOR SELECT USING (rolname = current_user);
REVOKE ALL ON fleet_roles FROM PUBLIC;
GRANT SELECT ON fleet_roles TO PUBLIC;

CREATE TABLE fleets (
    agent_id  TEXT PRIMARY KEY,
    head_seq  BIGINT NOT NULL DEFAULT 0,
    head_hash TEXT
);
ALTER TABLE fleets ENABLE ROW LEVEL SECURITY;  -- not FORCE: the owner adds a fleet's row as it binds it
CREATE POLICY fleet ON fleets
    USING (agent_id = (SELECT r.agent_id FROM fleet_roles r WHERE r.agent_id = current_setting('fleet_agent.agent_id', true)
                       AND r.rolname = current_user))
    WITH CHECK (agent_id = (SELECT r.agent_id FROM fleet_roles r
                            WHERE r.agent_id = current_setting('fleet_agent.agent_id', true) AND r.rolname = current_user));
REVOKE ALL ON fleets FROM PUBLIC;

-- Bind a fleet to a role (run by the owner: only it may write fleet_roles): the binding, the fleet's
-- head row, its leadership table and the grants on both.
CREATE FUNCTION fleet_agent_bind(fleet TEXT, grantee TEXT) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE lead TEXT := 'fleet_lead_' || md5(fleet);
BEGIN
    INSERT INTO fleet_roles (agent_id, rolname, bound_at)
        VALUES (fleet, grantee, to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
        ON CONFLICT DO NOTHING;
    INSERT INTO fleets (agent_id) VALUES (fleet) ON CONFLICT DO NOTHING;
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I ()', lead);
    EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', lead);
    EXECUTE format('GRANT SELECT, UPDATE ON %I TO %I', lead, grantee);
    EXECUTE format('GRANT SELECT, UPDATE (head_seq, head_hash) ON fleets TO %I', grantee);
END $$;
REVOKE ALL ON FUNCTION fleet_agent_bind(TEXT, TEXT) FROM PUBLIC;

-- Undo a binding (run by the owner): the role sees none of the fleet's rows and may no longer lock its
-- leadership table.
CREATE FUNCTION fleet_agent_unbind(fleet TEXT, grantee TEXT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM fleet_roles WHERE agent_id = fleet AND rolname = grantee;
    IF to_regclass(format('%I', 'fleet_lead_' || md5(fleet))) IS NOT NULL THEN
        EXECUTE format('REVOKE ALL ON %I FROM %I', 'fleet_lead_' || md5(fleet), grantee);
    END IF;
END $$;
REVOKE ALL ON FUNCTION fleet_agent_unbind(TEXT, TEXT) FROM PUBLIC;

DO $$
DECLARE t TEXT;
DECLARE bound TEXT := '(SELECT r.agent_id FROM fleet_roles r WHERE r.agent_id = '
                      'current_setting(''fleet_agent.agent_id'', true) AND r.rolname = current_user)';
DECLARE f TEXT;
DECLARE g TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'events_fts', 'alerts', 'memory', 'directives', 'instances', 'intents',
                             'knowledge', 'silences', 'instance_states', 'observed_runs'] LOOP
        EXECUTE format('DROP POLICY fleet ON %I', t);
        EXECUTE format('CREATE POLICY fleet ON %I USING (agent_id = %s) WITH CHECK (agent_id = %s)', t, bound, bound);
    END LOOP;
    -- The heads of the fleets already here, read past the policies for this transaction only.
    ALTER TABLE events NO FORCE ROW LEVEL SECURITY;
    FOR f IN SELECT DISTINCT agent_id FROM events LOOP
        PERFORM fleet_agent_bind(f, current_user);
        FOR g IN SELECT DISTINCT r.rolname FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
                 JOIN pg_roles r ON r.oid = a.grantee
                 WHERE c.oid = 'events'::regclass AND a.privilege_type = 'INSERT' AND r.rolname <> current_user LOOP
            PERFORM fleet_agent_bind(f, g);
        END LOOP;
    END LOOP;
    UPDATE fleets SET head_seq = h.seq, head_hash = h.hash
        FROM (SELECT DISTINCT ON (agent_id) agent_id, seq, hash FROM events ORDER BY agent_id, seq DESC) h
        WHERE fleets.agent_id = h.agent_id;
    ALTER TABLE events FORCE ROW LEVEL SECURITY;
END $$;

-- migration: 004_read_model_procedures
-- A fleet's role may no longer UPDATE or DELETE the shared read-model tables: whoever may is also allowed
-- LOCK TABLE in any mode, which would make every fleet's writes to that table wait. Its read-model writes
-- other than a plain INSERT go through the procedures below (fleet_agent_rm_*), which run as the owner
-- (SECURITY DEFINER) and refuse a session whose login role is not bound to the fleet it names
-- (fleet_agent_caller). A bound role keeps SELECT and INSERT, which let it lock a table in ACCESS SHARE
-- and ROW EXCLUSIVE modes only: those wait for no other fleet's reads and writes.
--
-- The policies now key on session_user, the role the session logged in as, which SET ROLE does not
-- change and which stays the caller's inside a procedure: a procedure sees the caller's fleet only.
CREATE FUNCTION fleet_agent_caller() RETURNS TEXT LANGUAGE plpgsql STABLE SET search_path = public, pg_temp AS $$
DECLARE fleet TEXT := current_setting('fleet_agent.agent_id', true);
BEGIN
    IF fleet IS NULL OR NOT EXISTS (SELECT 1 FROM fleet_roles WHERE agent_id = fleet AND rolname = session_user) THEN
        RAISE EXCEPTION 'the role % is not bound to fleet %', session_user, coalesce(quote_literal(fleet), '(none named)')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN fleet;
END $$;
REVOKE ALL ON FUNCTION fleet_agent_caller() FROM PUBLIC;

DO $$
DECLARE
    head TEXT := 'LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $b$ '
                 'DECLARE f TEXT := fleet_agent_caller(); BEGIN ';
    procs TEXT[][] := ARRAY[
        ['alert_repeated(n BIGINT, s BIGINT, t TEXT, a BIGINT)',
         'UPDATE alerts SET count = n, last_seq = s, last_ts = t WHERE agent_id = f AND id = a'],
        ['alert_acked(b TEXT, note TEXT, s BIGINT, a BIGINT)',
         'UPDATE alerts SET status = ''acked'', acked_by = b, ack_note = note, closed_seq = s WHERE agent_id = f AND id = a'],
        ['alert_resolved(s BIGINT, a BIGINT)',
         'UPDATE alerts SET status = ''resolved'', closed_seq = s WHERE agent_id = f AND id = a AND status IN (''open'', ''acked'')'],
        ['alert_retitled(t TEXT, a BIGINT)', 'UPDATE alerts SET title = t WHERE agent_id = f AND id = a'],
        ['alert_severity(v TEXT, a BIGINT)', 'UPDATE alerts SET severity = v WHERE agent_id = f AND id = a'],
        ['alert_notified(t TEXT, why TEXT, a BIGINT)',
         'UPDATE alerts SET notified_ts = t, notified_reason = why WHERE agent_id = f AND id = a'],
        ['silence_lifted(s BIGINT, i BIGINT)',
         'UPDATE silences SET lifted_seq = s WHERE agent_id = f AND id = i AND lifted_seq IS NULL'],
        ['memory_written(k TEXT, v TEXT, s BIGINT, t TEXT)',
         'INSERT INTO memory (agent_id, key, text, seq, ts) VALUES (f, k, v, s, t) ON CONFLICT (agent_id, key) '
         'DO UPDATE SET text = excluded.text, seq = excluded.seq, ts = excluded.ts'],
        ['memory_deleted(k TEXT)', 'DELETE FROM memory WHERE agent_id = f AND key = k'],
        ['directive_unpinned(s BIGINT, i BIGINT)',
         'UPDATE directives SET active = 0, unpinned_seq = s WHERE agent_id = f AND id = i AND active = 1'],
        ['intent_result(s BIGINT, okay INTEGER, c TEXT)',
         'UPDATE intents SET result_seq = s, ok = okay WHERE agent_id = f AND call_id = c AND result_seq IS NULL'],
        ['intent_adopted(k TEXT)',
         'UPDATE intents SET ok = 1 WHERE agent_id = f AND tool = ''rent_instance'' AND idem_key = k '
         'AND result_seq IS NOT NULL AND ok IS NULL'],
        ['intent_settled(okay INTEGER, c TEXT)',
         'UPDATE intents SET ok = okay WHERE agent_id = f AND call_id = c AND ok IS NULL'],
        ['instance_destroyed(s BIGINT, i BIGINT)',
         'UPDATE instances SET status = ''destroyed'', destroyed_seq = s WHERE agent_id = f AND instance_id = i '
         'AND status = ''active'''],
        ['state_seen(w TEXT, s BIGINT, i BIGINT)',
         'UPDATE instance_states SET intended = w, seen_seq = s WHERE agent_id = f AND instance_id = i'],
        ['state_changed(i BIGINT, st TEXT, w TEXT, since DOUBLE PRECISION, s BIGINT)',
         'INSERT INTO instance_states (agent_id, instance_id, status, intended, since, seen_seq) '
         'VALUES (f, i, st, w, since, s) ON CONFLICT (agent_id, instance_id) DO UPDATE SET status = excluded.status, '
         'intended = excluded.intended, since = excluded.since, seen_seq = excluded.seen_seq'],
        ['states_unseen(s BIGINT)', 'DELETE FROM instance_states WHERE agent_id = f AND seen_seq <> s'],
        ['run_extended(s BIGINT, t TEXT, i BIGINT, first BIGINT)',
         'UPDATE observed_runs SET last_seq = s, last_ts = t WHERE agent_id = f AND instance_id = i AND first_seq = first'],
        ['cleared(t TEXT)',
         'IF NOT t = ANY (ARRAY[''alerts'', ''memory'', ''directives'', ''instances'', ''intents'', ''knowledge'', '
         '''silences'', ''instance_states'', ''observed_runs'']) THEN RAISE EXCEPTION ''% is not a read model'', t; '
         'END IF; EXECUTE format(''DELETE FROM %I WHERE agent_id = $1'', t) USING f']
    ];
    p TEXT[];
    t TEXT;
    bound TEXT := '(SELECT r.agent_id FROM fleet_roles r WHERE r.agent_id = '
                  'current_setting(''fleet_agent.agent_id'', true) AND r.rolname = session_user)';
    g TEXT;
BEGIN
    FOREACH p SLICE 1 IN ARRAY procs LOOP
        EXECUTE format('CREATE PROCEDURE fleet_agent_rm_%s %s%s; END $b$', p[1], head, p[2]);
        EXECUTE format('REVOKE ALL ON PROCEDURE fleet_agent_rm_%s FROM PUBLIC', split_part(p[1], '(', 1));
    END LOOP;
    FOREACH t IN ARRAY ARRAY['events', 'events_fts', 'alerts', 'memory', 'directives', 'instances', 'intents',
                             'knowledge', 'silences', 'instance_states', 'observed_runs', 'fleets'] LOOP
        EXECUTE format('DROP POLICY fleet ON %I', t);
        EXECUTE format('CREATE POLICY fleet ON %I USING (agent_id = %s) WITH CHECK (agent_id = %s)', t, bound, bound);
    END LOOP;
    -- The roles already bound: the procedures in place of UPDATE and DELETE on the read models.
    FOR g IN SELECT DISTINCT r.rolname FROM fleet_roles r JOIN pg_roles o ON o.rolname = r.rolname
             WHERE NOT pg_has_role(r.rolname, (SELECT relowner FROM pg_class WHERE oid = 'fleet_roles'::regclass), 'USAGE')
    LOOP
        FOREACH p SLICE 1 IN ARRAY procs LOOP
            EXECUTE format('GRANT EXECUTE ON PROCEDURE fleet_agent_rm_%s TO %I', split_part(p[1], '(', 1), g);
        END LOOP;
        EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON alerts, memory, directives, instances, intents, knowledge, '
                       'silences, instance_states, observed_runs FROM %I', g);
    END LOOP;
END $$;

-- migration: 005_run_uptime
-- When a running run of observed_runs began, as vast.ai reports it (schema.sql 011): the instance's uptime
-- (the observation's up_s) at the run's first observation, in seconds; null for a run not running or an
-- observation without it. Filled from the observations already logged, a record list or the stored columns
-- (tick.started v4), for the rows this session sees.
ALTER TABLE observed_runs ADD COLUMN up_s DOUBLE PRECISION;
UPDATE observed_runs o SET up_s = (
    SELECT CASE WHEN jsonb_typeof(x.v) = 'number' AND x.v::float8 >= 0 THEN x.v::float8 END
    FROM (SELECT CASE jsonb_typeof(e.body #> '{observation,instances}')
              WHEN 'array' THEN (SELECT r->'up_s' FROM jsonb_array_elements(e.body #> '{observation,instances}') r
                                 WHERE r->'id' = to_jsonb(o.instance_id) LIMIT 1)
              WHEN 'object' THEN (
                  SELECT CASE
                      WHEN i->'same' ? 'up_s' THEN i->'same'->'up_s'
                      WHEN jsonb_typeof(i #> '{columns,up_s}') = 'array' THEN i #> '{columns,up_s}' -> (k.n - 1)::int
                      WHEN jsonb_typeof(i #> '{columns,up_s}') = 'object'
                          THEN i #> '{columns,up_s,values}' -> ((i #> '{columns,up_s,index}' ->> (k.n - 1)::int)::int)
                  END
                  FROM (SELECT e.body #> '{observation,instances}' AS i) s,
                       jsonb_array_elements(s.i #> '{columns,id}') WITH ORDINALITY k(id, n)
                  WHERE k.id = to_jsonb(o.instance_id) LIMIT 1)
          END AS v
          FROM events e WHERE e.agent_id = o.agent_id AND e.seq = o.first_seq) x)
WHERE o.running = 1;
