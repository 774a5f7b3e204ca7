-- Wardgate fleet schema, version 3.

-- A digest of the member's [gateway.auth] and [gateway.http] (GatewaySettings::
-- access_digest): a member hands a client's request only to one whose digest is its own.
ALTER TABLE wardgate_members ADD COLUMN access_digest text;
