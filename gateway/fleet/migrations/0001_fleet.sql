-- Wardgate fleet schema, version 1. Applied by the gateway itself (wardgate-fleet's
-- migrations), in one transaction under an advisory lock, so members starting together
-- apply it once.

-- One row per member name. A member that restarts keeps its row (and its commands); a new
-- process gets a new `instance`, which fences results of the old one.
CREATE TABLE wardgate_members (
    name         text PRIMARY KEY,
    instance     text NOT NULL,
    version      text NOT NULL,
    address      text,
    admin        text,
    groups       text[] NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at   timestamptz
);

-- The fleet's servers: each `spec` is the TOML of one [servers.NAME] table, `${VAR}`s
-- unexpanded (each member expands them from its own environment).
CREATE TABLE wardgate_servers (
    name       text PRIMARY KEY,
    spec       text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Policy modules as published: bytes and their sha256, one row per version.
CREATE TABLE wardgate_policy_versions (
    name         text NOT NULL,
    version      integer NOT NULL,
    sha256       text NOT NULL,
    module       bytea NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- Which version each member runs: member '*' is the whole fleet; a member's own row (a
-- canary) wins over it.
CREATE TABLE wardgate_policy_assignments (
    name        text NOT NULL,
    member      text NOT NULL,
    version     integer NOT NULL,
    assigned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, member),
    FOREIGN KEY (name, version) REFERENCES wardgate_policy_versions (name, version)
);

-- What each member made of each version: loaded, or rejected with the reason.
CREATE TABLE wardgate_policy_reports (
    member  text NOT NULL,
    name    text NOT NULL,
    version integer NOT NULL,
    sha256  text NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('loaded', 'rejected')),
    reason  text,
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (member, name, version)
);

-- The command queue of the seeds: one row per command and member (a fleet-wide command
-- is one row per member, sharing a correlation id). priority: 0 immediate, 1 high,
-- 2 normal, 3 low. A claimed row holds a lease; a row whose lease runs out is retried or
-- failed by any member, saying so.
CREATE TABLE wardgate_commands (
    id              bigserial PRIMARY KEY,
    correlation_id  text NOT NULL,
    member          text NOT NULL,
    command         jsonb NOT NULL,
    priority        smallint NOT NULL CHECK (priority BETWEEN 0 AND 3),
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'acknowledged', 'executing', 'completed', 'failed', 'expired')),
    attempts        integer NOT NULL DEFAULT 0,
    max_retries     integer NOT NULL DEFAULT 3,
    created_at      timestamptz NOT NULL DEFAULT now(),
    not_before      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    acknowledged_at timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    lease_until     timestamptz,
    claimed_by      text,
    result          jsonb,
    error           text
);
CREATE INDEX wardgate_commands_pending
    ON wardgate_commands (member, priority, created_at, id) WHERE state = 'pending';
CREATE INDEX wardgate_commands_leased
    ON wardgate_commands (lease_until) WHERE state IN ('acknowledged', 'executing');
CREATE INDEX wardgate_commands_correlation ON wardgate_commands (correlation_id);

-- Wakes the member a command is for, at once (polling is the fallback).
CREATE FUNCTION wardgate_command_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'pending' THEN
        PERFORM pg_notify('wardgate_commands', NEW.member);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER wardgate_command_notify
    AFTER INSERT OR UPDATE OF state ON wardgate_commands
    FOR EACH ROW EXECUTE FUNCTION wardgate_command_notify();

-- Each member's view of each of its servers, as `GET /servers` shows it.
CREATE TABLE wardgate_server_status (
    member        text NOT NULL,
    server        text NOT NULL,
    status        text NOT NULL,
    degraded      boolean NOT NULL,
    reason        text,
    last_error    text,
    next_retry_at timestamptz,
    crashes       integer NOT NULL,
    info          jsonb NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (member, server)
);

-- Each member's last tool snapshot of each server.
CREATE TABLE wardgate_tools (
    member     text NOT NULL,
    server     text NOT NULL,
    tools      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (member, server)
);

-- Each member's gateway events (the admin API's /events), the newest kept.
CREATE TABLE wardgate_events (
    id     bigserial PRIMARY KEY,
    member text NOT NULL,
    at     timestamptz NOT NULL,
    event  jsonb NOT NULL
);
CREATE INDEX wardgate_events_member ON wardgate_events (member, id);
