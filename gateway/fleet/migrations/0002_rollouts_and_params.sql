-- Wardgate fleet schema, version 2.

-- Each time a version of a policy was put in force for the whole fleet, in order: a
-- rollback goes back to the version the fleet ran before, never to one only a canary ran.
-- A rollback marks the row it undoes.
CREATE TABLE wardgate_policy_rollouts (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL,
    version     integer NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    rolled_back boolean NOT NULL DEFAULT false,
    FOREIGN KEY (name, version) REFERENCES wardgate_policy_versions (name, version)
);
INSERT INTO wardgate_policy_rollouts (name, version)
    SELECT name, version FROM wardgate_policy_assignments WHERE member = '*';

-- A version's policy-wide decision parameters ([policies.NAME.params]), as a TOML table;
-- NULL: none.
ALTER TABLE wardgate_policy_versions ADD COLUMN params text;

-- How many times the member's local queue ran the command for the claim (its own retries
-- of a failure that could pass); `attempts` counts the fleet's claims.
ALTER TABLE wardgate_commands ADD COLUMN local_attempts integer;

-- The machine a member runs on (its machine id): a member registered at a loopback address
-- is reachable, for the sessions it holds, only from its own machine.
ALTER TABLE wardgate_members ADD COLUMN machine text;
