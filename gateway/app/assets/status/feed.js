// Wardgate status page, the feed: the loads of every resource (debounced refetches), the
// one Server-Sent Event stream `/live` and what its items change, the /metrics poll, and
// whether the gateway can be reached (a drop not mended soon is an outage).

import { $, el, fill } from '/ui/dom.js';
import { ago, clock } from '/ui/format.js';
import { renderGateway } from '/ui/health.js';
import { renderCommands, renderPolicies } from '/ui/panels.js';
import {
  applyReconnecting, applyServer, applyServerList, applyStatusChange, renderCounts, renderServerRow, renderTools,
} from '/ui/rows.js';
import { MAX_EVENTS, nextSeq, reach, state } from '/ui/state.js';
import { isTimelineNote, mergeDecisions, mergeShadows, noteChanged, queueRender, renderAllTimelines } from '/ui/timeline.js';
import { api, getJSON, tokenChanged } from '/ui/token.js';
import { METRICS_MS, pollMetrics, renderTraffic } from '/ui/traffic.js';

const DEBOUNCE_MS = 150;
const RECONNECT_MS = 1000;
const SILENT_MS = 40000;        // the gateway sends a keep-alive every 15 s: longer is a dead line
const UNREACHABLE_AFTER_MS = 3000;  // a drop not mended this soon (or a refused retry) is an outage

// ---------------------------------------------------------------------------------------
// Debounced refetches: a burst of events about one resource makes one request.

const pending = new Map();

function schedule(key, task) {
  if (pending.has(key)) return;
  pending.set(key, setTimeout(() => {
    pending.delete(key);
    task();
  }, DEBOUNCE_MS));
}

export const refetch = {
  gateway: () => schedule('gateway', loadGateway),
  servers: () => schedule('servers', loadServers),
  server: (name) => schedule(`server:${name}`, () => loadServer(name)),
  policies: () => schedule('policies', loadPolicies),
  commands: () => schedule('commands', loadCommands),
};

/** Run a load, recording (and showing) its failure under `resource`. 401s go to the dialog. */
async function guarded(resource, load) {
  try {
    await load();
    state.loadErrors.delete(resource);
  } catch (error) {
    if (error.status === 401) state.loadErrors.delete(resource);
    else state.loadErrors.set(resource, `Could not load ${resource}: ${error.message}`);
  }
  const box = $('#load-error');
  box.textContent = [...state.loadErrors.values()].join(' · ');
  box.hidden = state.loadErrors.size === 0;
}

const loadGateway = () => guarded('/gateway', async () => applyGateway(await getJSON('/gateway')));
const loadPolicies = () => guarded('/policies', async () => renderPolicies((await getJSON('/policies')).policies ?? []));
const loadCommands = () => guarded('/commands', async () => renderCommands((await getJSON('/commands')).commands ?? []));
const loadDecisions = () => guarded('/decisions', async () => {
  const answer = await getJSON('/decisions');
  mergeDecisions(answer.decisions ?? []);
  mergeShadows(answer.shadows ?? []);
  liveStream.after.decisions = Math.max(liveStream.after.decisions, state.decisions.at(-1)?.id ?? 0);
  liveStream.after.shadows = Math.max(liveStream.after.shadows, ...(answer.shadows ?? []).map((s) => s.id ?? 0));
});

function loadServers() {
  const seq = nextSeq();
  return guarded('/servers', async () => applyServerList((await getJSON('/servers')).servers ?? [], seq));
}

export async function loadServer(name) {
  const seq = nextSeq();
  const path = `/servers/${encodeURIComponent(name)}`;
  try {
    applyServer(await getJSON(path), seq);
  } catch (error) {
    if (error.status === 404) refetch.servers();   // removed from the config
    const entry = state.servers.get(name);
    if (entry && error.status !== 404 && entry.tools == null) {
      entry.toolsError = error.message;
      renderTools(entry);
    }
  }
}

export function reloadAll() {
  return Promise.allSettled([loadGateway(), loadServers(), loadPolicies(), loadCommands(), loadDecisions()]);
}

function applyGateway(gateway) {
  const previous = state.gateway;
  state.gateway = gateway;
  state.gatewayReceivedAt = performance.now();
  renderGateway();
  // Decisions drawn before the gateway's answer came link to no trace yet.
  if ((previous?.trace_url ?? null) !== (gateway.trace_url ?? null)) renderAllTimelines();
  // A restarted gateway numbers its events and decisions from 1 again: start over.
  if (previous && previous.started_at !== gateway.started_at) restartFeeds();
}

// ---------------------------------------------------------------------------------------
// Reachability: the stream is the page's line to the gateway

/** The stream dropped: an outage unless it is mended within UNREACHABLE_AFTER_MS. */
function feedLost() {
  if (reach.lost) return;
  reach.lost = { wall: Date.now(), mono: performance.now() };
  clearTimeout(reach.timer);
  reach.timer = setTimeout(declareUnreachable, UNREACHABLE_AFTER_MS);
}

/** A connection attempt failed without an answer from the gateway: an outage now. */
function feedRefused() {
  if (!reach.lost) reach.lost = { wall: Date.now(), mono: performance.now() };
  declareUnreachable();
}

function declareUnreachable() {
  clearTimeout(reach.timer);
  if (reach.unreachable) return;
  reach.unreachable = true;
  for (const entry of state.servers.values()) entry.staleSince ??= reach.lost.mono;
  renderReach();
}

/** The stream is open again: the gateway answers. Rows stay marked until fresh data comes. */
function feedConnected() {
  clearTimeout(reach.timer);
  const was = reach.unreachable;
  reach.lost = null;
  reach.unreachable = false;
  if (was) renderReach();
}

function renderReach() {
  document.body.dataset.reachable = String(!reach.unreachable);
  const banner = $('#unreachable');
  banner.hidden = !reach.unreachable;
  if (reach.unreachable) renderUnreachableSince();
  renderGateway();
  for (const entry of state.servers.values()) renderServerRow(entry);
  renderCounts();
  renderTraffic();
  updateLive();
}

export function renderUnreachableSince() {
  if (!reach.unreachable || !reach.lost) return;
  const since = new Date(reach.lost.wall).toISOString();
  fill($('#unreachable-text'),
    el('strong', { text: 'The gateway is unreachable' }), ' since ',
    el('time', { id: 'unreachable-since', datetime: since, title: since, text: clock(since) }),
    ` (${ago(since)}). What this page shows is the last known state; it reconnects by itself.`);
}

// ---------------------------------------------------------------------------------------
// Gateway events from the stream

/** One gateway event; `news` is false for the replayed history, which the rows already show. */
function handleEvent(e, news) {
  if (!e || typeof e !== 'object') return;
  state.events.push(e);
  if (state.events.length > MAX_EVENTS) {
    for (const dropped of state.events.splice(0, state.events.length - MAX_EVENTS)) {
      if (isTimelineNote(dropped)) noteChanged(dropped);
    }
  }
  if (isTimelineNote(e)) noteChanged(e);
  if (!news) {
    queueRender();
    return;
  }

  if (e.event === 'status_changed') applyStatusChange(e);
  if (e.event === 'reconnecting') applyReconnecting(e);
  if (e.server) {
    // A per-client instance (`SERVER#N`) is shown in its server's row: refetch that one.
    const server = e.server.split('#')[0];
    if (state.servers.has(server)) refetch.server(server);
    else refetch.servers();
  }
  switch (e.event) {
    case 'status_changed':
      refetch.gateway();
      break;
    case 'config_applied':
      refetch.servers();
      refetch.gateway();
      refetch.policies();   // a shadow may have been bound or cleared
      break;
    case 'tools_changed':
      refetch.servers();
      // The tool lists of open rows come only from /servers/NAME.
      for (const entry of state.servers.values()) if (entry.expanded) refetch.server(entry.name);
      break;
    case 'policy_loaded': case 'policy_rejected': case 'policy_faulted':
      refetch.policies();
      refetch.gateway();    // readiness depends on the policy modules
      break;
    case 'command':
      refetch.commands();
      if (['shadow_policy', 'promote_shadow', 'rollback_policy'].includes(e.command)) refetch.policies();
      break;
  }
  queueRender();
}

// ---------------------------------------------------------------------------------------
// Server-Sent Events over fetch (EventSource cannot send the Authorization header)

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The one stream the page follows, `/live`: the gateway's events and its policy decisions
 * together (one connection per tab; a browser holds only a few per address). Each feed is
 * replayed after the last item seen, then a `: live NAME` comment says the news begins.
 */
class LiveStream {
  constructor() {
    this.after = { events: 0, decisions: 0, shadows: 0 };
    this.live = { events: false, decisions: false };
    this.connected = false;
    this.everConnected = false;
    this.needsToken = false;
    this.controller = null;
    this.restarting = false;
    this.silence = null;
  }

  /** Connect, read until the stream drops, wait a second, reconnect after the last ids. */
  async run() {
    for (;;) {
      this.controller = new AbortController();
      this.restarting = false;
      this.live = { events: false, decisions: false };
      let unauthorized = false;
      let opened = false;
      try {
        const query = `events_after=${this.after.events}&decisions_after=${this.after.decisions}&shadows_after=${this.after.shadows}`;
        const response = await api(`/live?${query}`, {
          headers: { Accept: 'text/event-stream' }, signal: this.controller.signal });
        if (response.status === 401) unauthorized = true;
        else if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        else {
          opened = true;
          feedConnected();
          this.setConnected(true);
          // Back after a drop: whatever the replay cannot say (a restarted gateway, state
          // that moved on) the current resources will.
          if (this.everConnected) onStreamReconnected();
          this.everConnected = true;
          await this.read(response.body);
        }
      } catch { /* dropped or aborted: reconnect below */ }
      clearTimeout(this.silence);
      this.setConnected(false);
      // A 401 is an answer: the gateway is there. A drop the page asked for is no outage.
      if (unauthorized) feedConnected();
      else if (!this.restarting) {
        if (opened) feedLost();
        else feedRefused();
      }
      if (unauthorized) {
        this.needsToken = true;
        updateLive();
        await tokenChanged();
        this.needsToken = false;
        continue;
      }
      if (!this.restarting) await sleep(RECONNECT_MS);
    }
  }

  /** Drop the connection and open a new one at once (new token, restarted gateway). */
  restart() {
    this.restarting = true;
    this.controller?.abort();
  }

  /** A line that stays silent past the keep-alives is dead (a laptop slept, a proxy hung). */
  heard() {
    clearTimeout(this.silence);
    const controller = this.controller;
    this.silence = setTimeout(() => controller?.abort(), SILENT_MS);
  }

  async read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    this.heard();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        this.heard();
        buffer += decoder.decode(value, { stream: true });
        // Lines may end in \r\n, \n or \r; a \r at the end of a chunk may be half a \r\n.
        buffer = buffer.replace(/\r\n|\r(?!$)/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          this.dispatch(block);
        }
      }
    } finally {
      reader.releaseLock();
    }
  }

  dispatch(block) {
    let event = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        const comment = line.slice(1).trim();
        if (comment === 'live events') this.live.events = true;
        else if (comment === 'live decisions') this.live.decisions = true;
        // The gateway says so when this reader fell behind and lost items.
        else if (comment.includes('skipped')) onItemsSkipped();
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (!data.length) return;
    let payload;
    try { payload = JSON.parse(data.join('\n')); } catch { return; }
    if (typeof payload?.id !== 'number') return;
    if (event === 'decision') {
      this.after.decisions = Math.max(this.after.decisions, payload.id);
      mergeDecisions([payload]);
    } else if (event === 'shadow') {
      this.after.shadows = Math.max(this.after.shadows, payload.id);
      mergeShadows([payload]);
    } else {
      this.after.events = Math.max(this.after.events, payload.id);
      handleEvent(payload, this.live.events);
    }
  }

  setConnected(connected) {
    if (this.connected === connected) return;
    this.connected = connected;
    updateLive();
  }
}

const liveStream = new LiveStream();
export const streams = [liveStream];

export function updateLive() {
  const live = streams.every((s) => s.connected);
  document.body.dataset.live = String(live);
  const indicator = $('#live-indicator');
  const [stateName, text] = live ? ['connected', 'Live']
    : streams.some((s) => s.needsToken) ? ['token', 'Token needed']
      : reach.unreachable ? ['unreachable', 'Unreachable, retrying…']
        : streams.some((s) => s.everConnected) ? ['reconnecting', 'Reconnecting…']
          : ['connecting', 'Connecting…'];
  indicator.dataset.state = stateName;
  indicator.textContent = text;
}

function onStreamReconnected() {
  refetch.gateway();
  refetch.servers();
  refetch.policies();
  refetch.commands();
  // Opened while the gateway was away: the decisions were never loaded.
  if (state.loadErrors.has('/decisions')) schedule('decisions', loadDecisions);
}

function onItemsSkipped() {
  onStreamReconnected();
  schedule('decisions', loadDecisions);     // merged by id, so none is doubled
}

/** The gateway restarted: its ids start again from 1, so forget the old feeds. */
function restartFeeds() {
  state.decisions = [];
  state.decisionIds.clear();
  state.shadows.clear();
  state.events = [];
  for (const stream of streams) {
    stream.after = { events: 0, decisions: 0, shadows: 0 };
    stream.restart();
  }
  renderAllTimelines();
}

// ---------------------------------------------------------------------------------------
// Traffic: /metrics, the one thing polled

export async function followMetrics() {
  for (;;) {
    if (await pollMetrics()) await tokenChanged();
    else await sleep(METRICS_MS);
  }
}
