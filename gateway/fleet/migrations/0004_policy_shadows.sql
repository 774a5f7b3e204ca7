-- Wardgate fleet schema, version 4.

-- A policy's shadow for the whole fleet: a published version of the policy that every
-- member serving the policy from the fleet asks beside its live module, deciding nothing
-- (`wardgate fleet policy publish NAME FILE --shadow`).
CREATE TABLE wardgate_policy_shadows (
    name        text PRIMARY KEY,
    version     integer NOT NULL,
    assigned_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (name, version) REFERENCES wardgate_policy_versions (name, version)
);

-- What each member's shadow of a policy would have decided since it was bound there: its
-- report as `GET /policies/NAME/shadow` gives it, written again every few seconds.
CREATE TABLE wardgate_policy_shadow_reports (
    member  text NOT NULL,
    name    text NOT NULL,
    version integer NOT NULL,
    report  jsonb NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (member, name, version)
);
