// Wardgate status page, the state every part of the page shares: what the gateway said
// last, whether it can be reached, and the sequence numbers that keep late answers from
// undoing newer data. It imports nothing, so any module may import it.

export const MAX_DECISIONS = 500;      // kept in memory
export const MAX_EVENTS = 500;         // kept in memory

export const state = {
  gateway: null,
  gatewayReceivedAt: 0,
  servers: new Map(),          // name → entry (see serverEntry in rows.js)
  decisions: [],               // oldest first, at most MAX_DECISIONS
  decisionIds: new Set(),
  shadows: new Map(),          // decision id → a shadow module's verdict on it
  events: [],                  // oldest first, at most MAX_EVENTS
  loadErrors: new Map(),       // resource → message
};

/**
 * Whether the gateway can be reached, as the stream says. `lost`: when the stream dropped
 * (wall clock, and performance.now() to stop the counters there); `unreachable`: set once
 * the drop is an outage (see UNREACHABLE_AFTER_MS in feed.js), cleared when the stream is
 * back.
 */
export const reach = { lost: null, unreachable: false, timer: null };

/** performance.now() as of the last moment the gateway was known to be there. */
export const knownNow = () => (reach.unreachable && reach.lost ? reach.lost.mono : performance.now());

// Every response is stamped with the sequence number of its request; an event applied to
// a row takes a fresh number. A server's row only takes data newer than what it shows, so
// a slow answer to an older request cannot undo a status change that came by event.
let requestSeq = 0;

/** A fresh sequence number, for a request or for an event applied to a row. */
export const nextSeq = () => ++requestSeq;
