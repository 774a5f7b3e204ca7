// Wardgate status page. Plain ES2022, no build step, no dependencies.
//
// Why this file is long: the page is one script with no build step; splitting it into ES
// modules by concern (feed, rows, timeline, actions, token) is still to come.
//
// Data flow: one load of every resource at start, then one Server-Sent Event stream
// (`/live`: gateway events and policy decisions) says what changed; each change refetches
// only the resource it concerns, debounced. The one thing polled is `/metrics`, every
// METRICS_MS, for the traffic sparklines; the one-second ticker only redraws countdowns and
// ages from data already here.
//
// Truth: when the stream drops and cannot be opened again, the page says the gateway is
// unreachable and since when, and shows nothing as current that it no longer knows: rows
// turn "unknown" (their last known status beside it), counters stop, the header stops
// saying Ready. It keeps trying, and comes back by itself.
//
// Security: the page runs under a strict CSP, so no inline script or style; server data
// only ever reaches the DOM through textContent, attributes and dataset, never innerHTML.
'use strict';

const TOKEN_KEY = 'wardgate-admin-token';
const MAX_DECISIONS = 500;      // kept in memory
const TIMELINE_LENGTH = 50;     // shown per server in the decisions panel
const BRIEF_DECISIONS = 10;     // shown in an expanded server row
const MAX_EVENTS = 500;         // kept in memory
const SERVER_EVENTS = 20;       // shown in an expanded server row
const LOG_EVENTS = 30;          // shown in the recent events panel
const SHOWN_COMMANDS = 20;
const DEBOUNCE_MS = 150;
const RECONNECT_MS = 1000;
const SILENT_MS = 40000;        // the gateway sends a keep-alive every 15 s: longer is a dead line
const UNREACHABLE_AFTER_MS = 3000;  // a drop not mended this soon (or a refused retry) is an outage
const METRICS_MS = 5000;        // /metrics is read this often, for the traffic sparklines
const METRIC_SAMPLES = 30;      // rates kept per server: 2.5 min at METRICS_MS
/** `outcome` labels of wardgate_requests_total that count as errors (cancelled is the client's). */
const ERROR_OUTCOMES = new Set(['error', 'timeout', 'failed', 'unavailable']);

/** Status → colour family; the CSS colours `[data-tone]`. */
const TONES = {
  online: 'green',
  provisioning: 'blue', connecting: 'blue', discovering_tools: 'blue',
  restarting: 'blue', reconnecting: 'blue',
  offline: 'red', error: 'red', requires_reauth: 'red', permanently_failed: 'red',
  disabled: 'grey',
};

/** The order of the counts by status at the top: trouble first. */
const STATUS_ORDER = ['unknown', 'permanently_failed', 'requires_reauth', 'error', 'offline', 'restarting',
  'reconnecting', 'provisioning', 'connecting', 'discovering_tools', 'disabled', 'online'];

const ACTIONS = {
  reconnect: { label: 'Reconnect', explain: 'Its connection is closed and opened again.' },
  restart: { label: 'Restart', explain: 'Its process or connection is stopped and started again; calls in flight fail.' },
  'health-check': { label: 'Health check', explain: 'It is probed now.' },
  disable: { label: 'Disable', explain: 'It is stopped and its tools disappear for clients until enabled.' },
  enable: { label: 'Enable', explain: 'It is started again.' },
  'reload-policies': { label: 'Reload policies', explain: 'Every policy module is read from disk again.' },
};

const $ = (selector, root = document) => root.querySelector(selector);

/**
 * Build an element. `props`: class, text, dataset (object), or any attribute; null,
 * undefined and false leave an attribute out. Children are nodes or strings (as text).
 */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') {
      for (const [name, data] of Object.entries(value)) if (data != null) node.dataset[name] = data;
    } else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) if (child != null && child !== false) node.append(child);
  return node;
}

/** Replace a node's children; null and false are skipped (replaceChildren would print them). */
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child != null && child !== false));
  return node;
}

// ---------------------------------------------------------------------------------------
// Formatting

const pad = (n, width = 2) => String(n).padStart(width, '0');

/** HH:MM:SS.mmm, local time. */
function clockMs(at) {
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at ?? '');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** HH:MM:SS local, with the date when it is not today. */
function clock(at) {
  if (!at) return '';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

/** 45 s, 12 min, 3 h 5 min, 2 d 4 h. */
function duration(ms) {
  if (ms == null || !Number.isFinite(ms)) return '';
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 24) return min % 60 ? `${h} h ${min % 60} min` : `${h} h`;
  return h % 24 ? `${Math.floor(h / 24)} d ${h % 24} h` : `${Math.floor(h / 24)} d`;
}

/** "12 s ago"; a clock a little ahead of ours reads "just now". */
function ago(at) {
  const then = Date.parse(at);
  if (Number.isNaN(then)) return '';
  const ms = Date.now() - then;
  return ms < 1000 ? 'just now' : `${duration(ms)} ago`;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
const humanStatus = (status) => String(status ?? 'unknown').replaceAll('_', ' ');

/** Inputs as `key=value key=value`, nested values as compact JSON. */
function keyValues(object) {
  if (!object || typeof object !== 'object') return '';
  return Object.entries(object)
    .map(([key, value]) => `${key}=${value !== null && typeof value === 'object' ? JSON.stringify(value) : value}`)
    .join(' ');
}

/**
 * An error as its parts, outermost first: the lines of a multi-line report (anyhow's
 * "Caused by:" list, or a server's last stderr lines joined with " ⏎ "), each split at
 * ": " as Rust error chains join their sources.
 */
function errorChain(text) {
  const parts = [];
  for (let line of String(text ?? '').split(/\r?\n| ⏎ /)) {
    line = line.trim().replace(/^\d+:\s+/, '');
    if (!line || /^(caused by|error):?$/i.test(line)) continue;
    for (const part of splitOutside(line)) {
      const trimmed = part.trim();
      if (trimmed && trimmed !== parts.at(-1)) parts.push(trimmed);
    }
  }
  return parts;
}

/** `line` split at each ": " outside brackets and double quotes ("exit (code: 3)" stays whole). */
function splitOutside(line) {
  const parts = [];
  const closers = { '(': ')', '[': ']', '{': '}' };
  const open = [];
  let quoted = false;
  let start = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (closers[c]) open.push(closers[c]);
    else if (c === open.at(-1)) open.pop();
    else if (c === ':' && line[i + 1] === ' ' && !open.length) {
      parts.push(line.slice(start, i));
      start = i + 2;
      i++;
    }
  }
  parts.push(line.slice(start));
  return parts;
}

/** The line to read first: the deepest cause, with its parent when it is too short alone. */
function causeOf(parts) {
  if (!parts.length) return '';
  const last = parts.at(-1);
  return last.length < 16 && parts.length > 1 ? `${parts.at(-2)}: ${last}` : last;
}

/**
 * An error, cause first: the deepest cause on one line, and the whole chain behind a
 * disclosure (and in the tooltip), so a long library chain never fills a narrow column.
 */
function causeFirst(text, className = 'error-text') {
  if (!text) return null;
  const parts = errorChain(text);
  const cause = causeOf(parts) || String(text);
  const box = el('div', { class: `${className} cause-first`, title: String(text) },
    el('span', { class: 'cause', text: cause }));
  if (parts.length > 1) {
    box.append(el('details', { class: 'chain' },
      el('summary', { text: `whole error (${parts.length} parts)` }),
      el('ol', { class: 'chain-parts' }, parts.map((part) => el('li', { text: part })))));
  }
  return box;
}

// ---------------------------------------------------------------------------------------
// Requests and the admin token

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function readToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) ?? ''; } catch { return ''; }
}

function writeToken(token) {
  // sessionStorage only: the token dies with the tab and is never sent as a cookie.
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts until the dialog asks again */ }
}

/** Every request goes through here: same origin, never cached, with the token if any. */
async function api(path, options = {}) {
  const headers = new Headers(options.headers);
  const token = readToken();
  if (token) headers.set('Authorization', `Bearer ${token}`);
  const response = await fetch(path, { cache: 'no-store', credentials: 'same-origin', ...options, headers });
  // Only for the token in use: a late answer to a request with a replaced token says nothing.
  if (response.status === 401 && readToken() === token) {
    const body = await response.clone().json().catch(() => null);
    askForToken(body?.error ?? 'The admin API needs a token.');
  }
  return response;
}

async function errorText(response) {
  const body = await response.json().catch(() => null);
  return body?.error ?? `HTTP ${response.status}`;
}

async function getJSON(path) {
  const response = await api(path);
  if (!response.ok) throw new HttpError(response.status, await errorText(response));
  return response.json();
}

// Streams stopped by a 401 wait here until a token is entered or forgotten.
let tokenWaiters = [];
const tokenChanged = () => new Promise((resolve) => tokenWaiters.push(resolve));

function notifyTokenChanged() {
  const waiters = tokenWaiters;
  tokenWaiters = [];
  for (const resolve of waiters) resolve();
}

function askForToken(message) {
  const dialog = $('#token-dialog');
  // The API asks for a token: keep a way back to this dialog after Cancel.
  $('#enter-token').hidden = false;
  $('#forget-token').hidden = false;
  $('#token-error').textContent = message;
  if (!dialog.open) {
    dialog.showModal();
    $('#token-form').elements.namedItem('token').focus();
  }
}

// ---------------------------------------------------------------------------------------
// State

const state = {
  gateway: null,
  gatewayReceivedAt: 0,
  servers: new Map(),          // name → entry (see serverEntry)
  decisions: [],               // oldest first, at most MAX_DECISIONS
  decisionIds: new Set(),
  events: [],                  // oldest first, at most MAX_EVENTS
  loadErrors: new Map(),       // resource → message
};

/**
 * Whether the gateway can be reached, as the stream says. `lost`: when the stream dropped
 * (wall clock, and performance.now() to stop the counters there); `unreachable`: set once
 * the drop is an outage (see UNREACHABLE_AFTER_MS), cleared when the stream is back.
 */
const reach = { lost: null, unreachable: false, timer: null };

/** performance.now() as of the last moment the gateway was known to be there. */
const knownNow = () => (reach.unreachable && reach.lost ? reach.lost.mono : performance.now());

// Every response is stamped with the sequence number of its request; an event applied to
// a row takes a fresh number. A server's row only takes data newer than what it shows, so
// a slow answer to an older request cannot undo a status change that came by event.
let requestSeq = 0;

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

const refetch = {
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
  mergeDecisions((await getJSON('/decisions')).decisions ?? []);
  liveStream.after.decisions = Math.max(liveStream.after.decisions, state.decisions.at(-1)?.id ?? 0);
});

function loadServers() {
  const seq = ++requestSeq;
  return guarded('/servers', async () => applyServerList((await getJSON('/servers')).servers ?? [], seq));
}

async function loadServer(name) {
  const seq = ++requestSeq;
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

function reloadAll() {
  return Promise.allSettled([loadGateway(), loadServers(), loadPolicies(), loadCommands(), loadDecisions()]);
}

// ---------------------------------------------------------------------------------------
// Gateway health (header)

function applyGateway(gateway) {
  const previous = state.gateway;
  state.gateway = gateway;
  state.gatewayReceivedAt = performance.now();
  renderGateway();
  // A restarted gateway numbers its events and decisions from 1 again: start over.
  if (previous && previous.started_at !== gateway.started_at) restartFeeds();
}

function renderGateway() {
  const box = $('#gateway-health');
  if (reach.unreachable) {
    // Whatever it said last may no longer be true: never "Ready" from memory.
    box.dataset.ready = 'unknown';
    box.dataset.tone = 'red';
    $('#gateway-state').textContent = 'Unreachable';
    $('#gateway-reasons').hidden = true;
    renderGatewayUptime();
    return;
  }
  const g = state.gateway;
  if (!g) return;
  const allOnline = g.online === g.servers;
  box.dataset.ready = String(Boolean(g.ready));
  box.dataset.tone = !g.ready ? 'red' : allOnline ? 'green' : 'amber';
  $('#gateway-state').textContent = g.ready ? 'Ready' : 'Not ready';
  renderGatewayUptime();
  const reasons = $('#gateway-reasons');
  fill(reasons, (g.reasons ?? []).map((r) => el('li', {}, causeFirst(typeof r === 'string' ? r : JSON.stringify(r), 'reason-text'))));
  reasons.hidden = !g.reasons?.length;
  box.title = g.config ? `config: ${g.config}` : '';
  // The token buttons matter only where the admin API asks for a token.
  if (g.admin_token) {
    $('#enter-token').hidden = false;
    $('#forget-token').hidden = false;
  }
}

function renderGatewayUptime() {
  const g = state.gateway;
  if (!g) {
    $('#gateway-summary').textContent = '';
    return;
  }
  // Stopped at the last moment the gateway was heard from, while it cannot be reached.
  const uptime = g.uptime_ms + Math.max(0, knownNow() - state.gatewayReceivedAt);
  $('#gateway-summary').textContent = reach.unreachable
    ? `last known: ${g.online}/${g.servers} servers online · v${g.version} · was up ${duration(uptime)}`
    : `${g.online}/${g.servers} servers online · v${g.version} · up ${duration(uptime)}`;
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

function renderUnreachableSince() {
  if (!reach.unreachable || !reach.lost) return;
  const since = new Date(reach.lost.wall).toISOString();
  fill($('#unreachable-text'),
    el('strong', { text: 'The gateway is unreachable' }), ' since ',
    el('time', { id: 'unreachable-since', datetime: since, title: since, text: clock(since) }),
    ` (${ago(since)}). What this page shows is the last known state; it reconnects by itself.`);
}

// ---------------------------------------------------------------------------------------
// Servers

let detailCounter = 0;

/** The row, its detail row, and the last data shown in them. */
function serverEntry(name) {
  const id = `server-detail-${++detailCounter}`;
  const cell = (className, label, ...children) => el('td', { class: className, 'data-label': label }, ...children);
  const expand = el('button', { type: 'button', class: 'expand', 'aria-expanded': 'false', 'aria-controls': id, title: 'Tools, events and decisions' },
    el('span', { class: 'chevron', 'aria-hidden': 'true' }), el('span', { class: 'server-name', text: name }));
  const cells = {
    name: cell('name', 'Server', expand),
    status: cell('status', 'Status'),
    retry: cell('retry', 'Next retry'),
    crashes: cell('crashes', 'Crashes'),
    lastError: cell('last-error', 'Last error'),
    uptime: cell('uptime', 'Uptime'),
    counts: cell('counts', 'Catalogue'),
    policy: cell('policy-name', 'Policy'),
    transport: cell('transport', 'Connection'),
    actions: cell('server-actions', 'Actions'),
  };
  // data-server-row marks the one element per server that carries data-status, whichever
  // layout (table row or card) the page is in.
  const row = el('tr', { class: 'server', dataset: { server: name, serverRow: name } }, Object.values(cells));

  const actionButton = (action) => el('button', { type: 'button', dataset: { action, server: name }, text: ACTIONS[action].label });
  const actions = Object.fromEntries(['reconnect', 'restart', 'health-check', 'disable', 'enable'].map((a) => [a, actionButton(a)]));
  cells.actions.append(el('div', { class: 'actions', role: 'group', 'aria-label': `Actions on ${name}` }, Object.values(actions)));
  const detail = {
    tools: el('div', { class: 'tools', dataset: { tools: name } }),
    events: el('ol', { class: 'server-events event-list' }),
    decisions: el('ol', { class: 'server-decisions' }),
    actions,
  };
  const showTimeline = el('button', { type: 'button', class: 'link', text: 'Show full timeline' });
  showTimeline.addEventListener('click', () => showTimelineOf(name));
  const detailRow = el('tr', { class: 'detail', id, hidden: true, dataset: { detailFor: name } },
    el('td', { colspan: Object.keys(cells).length }, el('div', { class: 'detail-body' },
      el('section', { class: 'detail-tools' }, el('h3', { text: 'Tools' }), detail.tools),
      el('section', { class: 'detail-events' }, el('h3', { text: 'Recent events' }), detail.events),
      el('section', { class: 'detail-decisions' }, el('h3', { text: 'Recent decisions' }), detail.decisions, showTimeline))));

  const entry = { name, info: null, seq: 0, receivedAt: 0, retryDeadline: null, tools: null, toolsError: null,
    staleSince: reach.unreachable ? reach.lost.mono : null, expanded: false, row, detailRow, cells, detail, expand };
  expand.addEventListener('click', () => toggleExpanded(entry));
  state.servers.set(name, entry);
  $('#server-rows').append(row, detailRow);
  return entry;
}

function toggleExpanded(entry) {
  entry.expanded = !entry.expanded;
  entry.expand.setAttribute('aria-expanded', String(entry.expanded));
  entry.row.classList.toggle('expanded', entry.expanded);
  entry.detailRow.hidden = !entry.expanded;
  if (entry.expanded) {
    renderTools(entry);
    renderDetailLists(entry);
    loadServer(entry.name);    // the tool list is only in /servers/NAME
  }
}

function applyServerList(list, seq) {
  const names = new Set(list.map((info) => info.name));
  for (const info of list) applyServer(info, seq, true);
  for (const [name, entry] of state.servers) {
    if (!names.has(name) && seq > entry.seq) removeServer(entry);
  }
  // Keep the gateway's order; move rows only when it changed (moving loses focus).
  const wanted = list.map((info) => info.name);
  const current = [...$('#server-rows').children].filter((r) => r.classList.contains('server')).map((r) => r.dataset.server);
  if (wanted.join('\n') !== current.filter((n) => names.has(n)).join('\n')) {
    for (const name of wanted) {
      const entry = state.servers.get(name);
      $('#server-rows').append(entry.row, entry.detailRow);
    }
  }
  $('#servers-empty').hidden = state.servers.size > 0;
  $('#server-table').hidden = state.servers.size === 0;
  updateServerFilter();
  renderCounts();
  renderTraffic();
  document.body.dataset.ready = 'true';
}

/** One server's data; only the list (`create`) adds a row, so a late answer about a
 *  server the list has since dropped cannot bring it back. */
function applyServer(info, seq, create = false) {
  const entry = state.servers.get(info.name) ?? (create ? serverEntry(info.name) : null);
  if (!entry || seq < entry.seq) return;    // gone, or an older answer than the data shown
  entry.seq = seq;
  if (Array.isArray(info.tools)) {
    entry.tools = info.tools;
    entry.toolsError = null;
    info = { ...info, tools: info.tools.length };
  }
  entry.info = info;
  entry.receivedAt = performance.now();
  entry.retryDeadline = info.next_retry_in_ms == null ? null : entry.receivedAt + info.next_retry_in_ms;
  // Fresh from the gateway: true again, unless the gateway is (again) out of reach.
  entry.staleSince = reach.unreachable ? reach.lost.mono : null;
  renderServerRow(entry);
  renderTools(entry);
  renderCounts();
}

function removeServer(entry) {
  entry.row.remove();
  entry.detailRow.remove();
  state.servers.delete(entry.name);
  renderCounts();
  renderTraffic();
}

/** The status a row shows: its own, or "unknown" while what the page knows is stale. */
const shownStatus = (entry) => (entry.staleSince != null ? 'unknown' : entry.info?.status ?? 'unknown');

function renderServerRow(entry) {
  const { info, row, cells } = entry;
  if (!info) return;
  const stale = entry.staleSince != null;
  const status = shownStatus(entry);
  const tone = stale ? 'grey' : info.degraded && info.status === 'online' ? 'amber' : TONES[info.status] ?? 'grey';
  row.dataset.status = status;
  row.dataset.tone = tone;
  if (stale) {
    row.dataset.stale = 'true';
    row.dataset.lastStatus = info.status;
  } else {
    delete row.dataset.stale;
    delete row.dataset.lastStatus;
  }
  if (info.degraded && !stale) row.dataset.degraded = 'true';
  else delete row.dataset.degraded;

  fill(cells.status,
    el('span', { class: 'badge', dataset: { tone, status }, text: humanStatus(status) }),
    stale ? el('div', { class: 'sub last-known', text: `last known: ${humanStatus(info.status)}` }) : null,
    info.degraded && !stale ? el('span', { class: 'tag degraded', text: 'degraded' }) : null,
    info.reason ? causeFirst(besideSignIn(info.reason, info.sign_in), 'reason') : null,
    signIn(info.sign_in));

  fill(cells.crashes,
    el('span', { class: 'crash-count', text: String(info.crashes_in_window ?? 0) }),
    info.consecutive_failures ? el('div', { class: 'sub', text: `${plural(info.consecutive_failures, 'failure')} in a row` }) : null);

  fill(cells.lastError,
    info.last_error ? causeFirst(besideSignIn(info.last_error, info.sign_in)) : null,
    info.last_error_at ? el('div', { class: 'sub ago', dataset: { since: info.last_error_at }, title: info.last_error_at, text: ago(info.last_error_at) }) : null);

  // "T tools · P prompts · R resources", each part kept on one line.
  fill(cells.counts, el('span', { text: `${plural(info.tools ?? 0, 'tool')} ·` }), ' ',
    el('span', { text: `${plural(info.prompts ?? 0, 'prompt')} ·` }), ' ', el('span', { text: plural(info.resources ?? 0, 'resource') }));
  cells.policy.textContent = info.policy ?? '';
  // The command line or URL, as the config wrote it: a ${VAR} is shown as written, never
  // its value (the gateway withholds it).
  fill(cells.transport,
    el('span', { class: 'transport-name', text: info.transport ?? '' }),
    info.target ? el('code', { class: 'target', title: info.target, text: info.target }) : null,
    info.pid != null ? el('div', { class: 'sub pid', text: `pid ${info.pid}` }) : null,
    info.protocol_version ? el('div', { class: 'sub protocol', title: 'MCP protocol revision', text: info.protocol_version }) : null);

  const { enable, disable } = entry.detail.actions;
  enable.hidden = info.enabled !== false;
  disable.hidden = info.enabled === false;
  renderTicking(entry);
}

/** An OAuth server that waits for a person: the command that signs it in, ready to copy. */
function signIn(sign) {
  if (!sign?.needed) return null;
  return el('div', { class: 'sign-in' },
    el('span', { class: 'tag sign-in-needed', text: sign.signed_in ? 'sign in again' : 'needs sign-in' }),
    el('code', { class: 'sign-in-command', title: 'Run this where the gateway runs', text: sign.command }));
}

/** A reason or error that ends in the sign-in command, shortened when the row shows it. */
function besideSignIn(text, sign) {
  if (!sign?.needed || !sign.command) return text;
  return text.replace(`; run \`${sign.command}\``, '').replaceAll(sign.command, 'the command shown');
}

/** The parts of a row that move with the clock: retry countdown, uptime, error age. */
function renderTicking(entry) {
  const { info, cells } = entry;
  if (!info) return;
  // A stale row's clock stops where the gateway was last heard from.
  const stale = entry.staleSince != null;
  const now = stale ? entry.staleSince : performance.now();
  let countdown = '';
  if (stale) {
    countdown = '';    // a retry the page cannot see is no countdown
  } else if (entry.retryDeadline != null) {
    const seconds = Math.ceil((entry.retryDeadline - now) / 1000);
    countdown = seconds > 0 ? `retry in ${seconds < 120 ? `${seconds} s` : duration(seconds * 1000)}` : 'retrying…';
  }
  fill(cells.retry,
    countdown ? el('span', { class: 'countdown', text: countdown }) : null,
    countdown && info.reconnect_attempt != null ? el('div', { class: 'sub', text: `attempt ${info.reconnect_attempt}` }) : null);
  cells.uptime.textContent = info.uptime_ms == null ? ''
    : `${duration(info.uptime_ms + Math.max(0, now - entry.receivedAt))}${stale ? ' (last known)' : ''}`;
  cells.uptime.classList.toggle('stale', stale);
  for (const node of cells.lastError.querySelectorAll('[data-since]')) node.textContent = ago(node.dataset.since);
}

/** The event says what the status is now; show it before the refetch confirms it. */
function applyStatusChange(event) {
  const entry = state.servers.get(event.server);
  if (!entry?.info) return;
  entry.seq = ++requestSeq;
  entry.info = { ...entry.info, status: event.to, reason: event.reason || null };
  entry.staleSince = null;    // the gateway just said so
  if (!['reconnecting', 'restarting', 'offline', 'error'].includes(event.to)) entry.retryDeadline = null;
  renderServerRow(entry);
}

function applyReconnecting(event) {
  const entry = state.servers.get(event.server);
  if (!entry?.info) return;
  entry.seq = ++requestSeq;
  // The event says the server is waiting to reconnect (no status_changed says it again).
  entry.info = { ...entry.info, status: 'reconnecting', reconnect_attempt: event.attempt };
  entry.retryDeadline = performance.now() + event.next_delay_ms;
  renderTicking(entry);
}

/** How many servers are in each status, at the top; "unknown" while the gateway is out of reach. */
function renderCounts() {
  const counts = new Map();
  for (const entry of state.servers.values()) {
    if (!entry.info) continue;
    const status = shownStatus(entry);
    counts.set(status, (counts.get(status) ?? 0) + 1);
  }
  const order = (status) => (STATUS_ORDER.includes(status) ? STATUS_ORDER.indexOf(status) : STATUS_ORDER.length);
  const statuses = [...counts.keys()].sort((a, b) => order(a) - order(b));
  fill($('#status-counts'), statuses.map((status) => el('li', {
    class: 'status-count',
    dataset: { status, count: String(counts.get(status)), tone: status === 'unknown' ? 'grey' : TONES[status] ?? 'grey' },
  }, el('span', { class: 'count', text: String(counts.get(status)) }), ` ${humanStatus(status)}`)));
}

/** An open row's tool list, from the last /servers/NAME. */
function renderTools(entry) {
  if (!entry.expanded) return;
  const { tools } = entry.detail;
  if (entry.tools == null) {
    fill(tools, el('p', { class: 'empty', text: entry.toolsError ? `Could not load the tools: ${entry.toolsError}` : 'Loading tools…' }));
  } else if (entry.tools.length === 0) {
    fill(tools, el('p', { class: 'empty', text: 'No tools.' }));
  } else {
    fill(tools, el('table', { class: 'tool-table' },
      el('thead', {}, el('tr', {}, ['Name', 'Original name', 'Description'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, entry.tools.map((tool) => el('tr', { dataset: { tool: tool.name } },
        el('td', {}, el('code', { text: tool.name })),
        el('td', {}, el('code', { text: tool.original_name ?? '' })),
        el('td', { text: tool.description ?? '' }))))));
  }
}

/** An open row's recent events and decisions, from the streams. */
function renderDetailLists(entry) {
  if (!entry.expanded) return;
  const { events, decisions } = entry.detail;
  const mine = state.events.filter((event) => event.server === entry.name).slice(-SERVER_EVENTS).reverse();
  fill(events, mine.length ? mine.map(eventItem) : el('li', { class: 'empty', text: 'No recent events.' }));

  const recent = state.decisions.filter((d) => d.server === entry.name).slice(-BRIEF_DECISIONS).reverse();
  fill(decisions, recent.length ? recent.map((d) => el('li', {
    class: 'decision-brief',
    dataset: { decisionId: d.id, decision: d.decision, answeredBy: d.answered_by },
  }, el('time', { datetime: d.at, text: clockMs(d.at) }), ` ${d.decision}: ${d.summary ?? ''}`,
  d.answered_by === 'fallback' ? el('span', { class: 'fault', text: ' ⚠ fallback' }) : null))
    : el('li', { class: 'empty', text: 'No decisions yet.' }));
}

function showTimelineOf(name) {
  const select = $('#decision-server-filter');
  select.value = name;
  renderAllTimelines();
  $('#decisions').scrollIntoView({ block: 'start' });
  $('#decisions-heading').focus();
}

// ---------------------------------------------------------------------------------------
// Traffic: call and error rates per server, from the request counters of /metrics

const traffic = {
  samples: [],      // oldest first, at most METRIC_SAMPLES + 1: { at, totals } (totals null: no answer)
};

/** Prometheus label values: `"…"` with \\, \" and \n escaped. */
function parseLabels(text) {
  const labels = {};
  for (const match of text.matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
    labels[match[1]] = match[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

/** Requests and failed requests per server, summed over tools, from the exposition text. */
function requestTotals(text) {
  const totals = new Map();
  const prefix = 'wardgate_requests_total{';
  for (const line of text.split('\n')) {
    if (!line.startsWith(prefix)) continue;
    const close = line.lastIndexOf('}');
    if (close < prefix.length) continue;
    const labels = parseLabels(line.slice(prefix.length, close));
    const value = Number(line.slice(close + 1).trim().split(/\s+/)[0]);
    if (!labels.server || !Number.isFinite(value)) continue;
    const total = totals.get(labels.server) ?? { calls: 0, errors: 0 };
    total.calls += value;
    if (ERROR_OUTCOMES.has(labels.outcome)) total.errors += value;
    totals.set(labels.server, total);
  }
  return totals;
}

/** One reading of /metrics; true when it needs a token first. */
async function pollMetrics() {
  let totals = null;
  try {
    const response = await api('/metrics');
    if (response.status === 401) return true;
    if (response.ok) totals = requestTotals(await response.text());
  } catch { /* out of reach: a gap in the lines */ }
  traffic.samples.push({ at: performance.now(), totals });
  if (traffic.samples.length > METRIC_SAMPLES + 1) traffic.samples.splice(0, traffic.samples.length - METRIC_SAMPLES - 1);
  renderTraffic();
  return false;
}

async function followMetrics() {
  for (;;) {
    if (await pollMetrics()) await tokenChanged();
    else await sleep(METRICS_MS);
  }
}

/**
 * Per-second rates of one server between consecutive samples, oldest first; null where a
 * sample is missing. A counter that went down was reset (a restarted gateway): it counts
 * from zero.
 */
function rates(name, field) {
  const series = [];
  for (let i = 1; i < traffic.samples.length; i++) {
    const before = traffic.samples[i - 1];
    const after = traffic.samples[i];
    const seconds = (after.at - before.at) / 1000;
    if (!before.totals || !after.totals || seconds <= 0) {
      series.push(null);
      continue;
    }
    const then = before.totals.get(name)?.[field] ?? 0;
    const now = after.totals.get(name)?.[field] ?? 0;
    series.push((now >= then ? now - then : now) / seconds);
  }
  return series;
}

const SVG = 'http://www.w3.org/2000/svg';
const svg = (tag, attributes = {}) => {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  return node;
};

const perSecond = (rate) => (rate == null ? '–' : rate === 0 ? '0/s' : rate < 0.1 ? `${rate.toFixed(2)}/s` : `${rate.toFixed(1)}/s`);

/** A small line of `series` (nulls are gaps), scaled to `top`; drawn with SVG attributes only. */
function sparkline(series, top, kind, label) {
  const width = 120;
  const height = 28;
  const step = width / Math.max(1, METRIC_SAMPLES - 1);
  const offset = (METRIC_SAMPLES - series.length) * step;     // newest at the right edge
  const chart = svg('svg', { class: 'sparkline', viewBox: `0 0 ${width} ${height}`, width, height,
    role: 'img', 'aria-label': label, 'data-kind': kind, 'data-points': series.filter((v) => v != null).length,
    preserveAspectRatio: 'none' });
  const title = svg('title');
  title.textContent = label;
  chart.append(title, svg('line', { class: 'baseline', x1: 0, y1: height - 1, x2: width, y2: height - 1 }));
  let points = [];
  const flush = () => {
    if (points.length === 1) chart.append(svg('circle', { class: 'dot', cx: points[0][0], cy: points[0][1], r: 1.5 }));
    else if (points.length > 1) chart.append(svg('polyline', { class: 'line', points: points.map((p) => p.join(',')).join(' ') }));
    points = [];
  };
  series.forEach((value, i) => {
    if (value == null) {
      flush();
      return;
    }
    const y = height - 2 - (top > 0 ? (value / top) * (height - 5) : 0);
    points.push([(offset + i * step).toFixed(1), y.toFixed(1)]);
  });
  flush();
  return chart;
}

function renderTraffic() {
  const names = [...new Set([...state.servers.keys(),
    ...traffic.samples.flatMap((sample) => (sample.totals ? [...sample.totals.keys()] : []))])].sort();
  const span = duration(METRICS_MS * METRIC_SAMPLES);
  const stale = reach.unreachable || traffic.samples.at(-1)?.totals === null;
  const cards = names.map((name) => {
    const calls = rates(name, 'calls');
    const errors = rates(name, 'errors');
    const known = (series) => series.filter((value) => value != null);
    const peak = Math.max(0, ...known(calls));
    const peakErrors = Math.max(0, ...known(errors));
    // Now: the latest interval, or nothing when the latest reading failed.
    const lastCalls = calls.at(-1) ?? null;
    const lastErrors = errors.at(-1) ?? null;
    const share = lastCalls ? Math.round((100 * (lastErrors ?? 0)) / lastCalls) : 0;
    return el('div', {
      class: 'traffic-card',
      dataset: { traffic: name, callRate: lastCalls ?? '', errorRate: lastErrors ?? '',
        callPeak: String(peak), errorPeak: String(peakErrors), tone: lastErrors ? 'red' : undefined },
    },
    el('span', { class: 'traffic-name', text: name }),
    el('span', { class: 'traffic-metric' },
      sparkline(calls, peak, 'calls', `${name}: calls per second over the last ${span}, peak ${perSecond(peak)}`),
      el('span', { class: 'traffic-value', text: `${perSecond(lastCalls)} calls` })),
    el('span', { class: 'traffic-metric errors' },
      // Errors on the calls' scale, so a line as high as the calls' means every call failed.
      sparkline(errors, peak, 'errors', `${name}: failed calls per second over the last ${span}, peak ${perSecond(peakErrors)}`),
      el('span', { class: 'traffic-value', text: `${perSecond(lastErrors)} errors${share ? ` (${share}%)` : ''}` })));
  });
  fill($('#traffic-list'), cards);
  const panel = $('#traffic');
  panel.dataset.stale = String(stale);
  panel.dataset.samples = String(traffic.samples.length);
  $('#traffic-empty').hidden = cards.length > 0 && traffic.samples.length > 1;
  $('#traffic-note').textContent = stale ? 'no new figures: the gateway does not answer'
    : `from /metrics every ${duration(METRICS_MS)}, last ${span}`;
}

// ---------------------------------------------------------------------------------------
// Policies and commands

const FAULT_KINDS = [['timeouts', 'timeouts'], ['memory_exceeded', 'memory exceeded'], ['traps', 'traps'],
  ['invalid_answers', 'invalid answers'], ['instantiation_failures', 'instantiation failures']];

function renderPolicies(policies) {
  fill($('#policy-list'), policies.map(policyCard));
  $('#policies-empty').hidden = policies.length > 0;
}

function policyCard(p) {
  const faults = p.faults ?? {};
  const decisions = Object.entries(p.decisions ?? {});
  const item = (term, ...description) => [el('dt', { text: term }), el('dd', {}, ...description)];
  return el('article', { class: 'policy', dataset: { policy: p.name, loaded: String(Boolean(p.loaded)) } },
    el('div', { class: 'policy-head' },
      el('h3', { text: p.name }),
      el('span', { class: 'badge', dataset: { tone: p.loaded ? 'green' : 'red' }, text: p.loaded ? 'loaded' : 'not loaded' })),
    el('dl', {},
      item('Module', p.module ? [p.module, p.version].filter(Boolean).join(' ') : 'built-in'),
      item('SHA-256', p.sha256 ? el('code', { class: 'sha', title: p.sha256, text: `${p.sha256.slice(0, 12)}…` }) : '—'),
      p.intent ? item('Intent', p.intent) : null,
      p.path ? item('Path', el('code', { text: p.path })) : null,
      p.path
        ? item('Loaded', p.loaded_at ? el('time', { datetime: p.loaded_at, title: p.loaded_at, text: clock(p.loaded_at) }) : 'never',
          ` · ${plural(p.loads ?? 0, 'load')}`)
        : item('Loaded', 'built into the gateway'),
      item('Rejections', String(p.rejections ?? 0),
        p.last_rejection ? el('div', { class: 'sub' }, `last at ${clock(p.last_rejection.at)}:`, causeFirst(p.last_rejection.reason)) : null),
      item('Faults', String(faults.total ?? 0),
        el('div', { class: 'sub', text: FAULT_KINDS.map(([key, label]) => `${label} ${faults[key] ?? 0}`).join(' · ') }),
        faults.last ? el('div', { class: 'sub' }, 'last:', causeFirst(faults.last)) : null),
      item('Decisions', decisions.length ? decisions.map(([kind, n]) => `${kind.replaceAll('_', '-')} ${n}`).join(' · ') : 'none')));
}

const COMMAND_TONES = { completed: 'green', failed: 'red', expired: 'red', pending: 'blue', acknowledged: 'blue', executing: 'blue' };

function renderCommands(commands) {
  // Newest first: ids are cmd-N, numbered in order of submission.
  const number = (c) => Number(String(c.id).replace(/\D/g, '')) || 0;
  const recent = [...commands].sort((a, b) => number(b) - number(a)).slice(0, SHOWN_COMMANDS);
  const time = (at) => (at ? el('time', { datetime: at, title: at, text: clock(at) }) : '—');
  fill($('#command-rows'), recent.map((c) => {
    const command = c.command ?? {};
    const result = c.result == null ? '' : JSON.stringify(c.result);
    return el('tr', { dataset: { commandId: c.id, state: c.state } },
      el('td', { class: 'command', 'data-label': 'Command', title: c.correlation_id ? `correlation id ${c.correlation_id}` : null },
        el('strong', { text: [command.type, command.server].filter(Boolean).join(' ') }),
        el('div', { class: 'sub', text: `${c.id} · ${c.priority ?? ''}` })),
      el('td', { 'data-label': 'State' },
        el('span', { class: 'badge', dataset: { tone: COMMAND_TONES[c.state] ?? 'grey', state: c.state }, text: c.state })),
      el('td', { 'data-label': 'Attempts', text: String(c.attempts ?? 0) }),
      el('td', { 'data-label': 'Created' }, time(c.created_at)),
      el('td', { 'data-label': 'Started' }, time(c.started_at)),
      el('td', { 'data-label': 'Finished' }, time(c.finished_at)),
      el('td', { class: 'outcome', 'data-label': 'Outcome' },
        c.error ? causeFirst(c.error) : null,
        c.next_attempt_at ? el('div', { class: 'sub', text: `next try at ${clock(c.next_attempt_at)}` }) : null,
        result ? el('code', { class: 'sub', title: result, text: result.length > 120 ? `${result.slice(0, 119)}…` : result }) : null));
  }));
  $('#commands-empty').hidden = recent.length > 0;
}

// ---------------------------------------------------------------------------------------
// Actions and the confirmation dialog

function confirmAction(text, yesLabel) {
  const dialog = $('#confirm-dialog');
  $('#confirm-text').textContent = text;
  $('#confirm-yes').textContent = yesLabel;
  dialog.returnValue = '';
  dialog.showModal();
  $('#confirm-no').focus();     // the safe choice: Enter alone never restarts anything
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
  });
}

function showResult(text, outcome) {
  const box = $('#action-result');
  box.textContent = text;
  box.dataset.outcome = outcome;
}

async function runAction(button) {
  const action = button.dataset.action;
  const server = button.dataset.server ?? null;
  const what = ACTIONS[action];
  if (!what) return;
  const label = server ? `${action} ${server}` : action;
  const question = server ? `${what.label} server “${server}”? ${what.explain}` : `${what.label}? ${what.explain}`;
  if (!(await confirmAction(question, what.label))) return;

  button.disabled = true;
  showResult(`${label}: sending…`, 'pending');
  const path = server ? `/servers/${encodeURIComponent(server)}/${action}` : '/policies/reload';
  try {
    const response = await api(path, { method: 'POST' });
    const body = await response.json().catch(() => null);
    if (response.status === 401) {
      showResult(`${label}: not sent — the admin API asks for a token`, 'failed');
    } else if (body?.state) {
      const ok = body.state === 'completed';
      showResult(`${label}: ${body.state}${body.error ? ` — ${body.error}` : ''}`, ok ? 'ok' : 'failed');
    } else {
      showResult(`${label}: failed — ${body?.error ?? `HTTP ${response.status}`}`, 'failed');
    }
  } catch (error) {
    showResult(`${label}: failed — ${error.message}`, 'failed');
  } finally {
    button.disabled = false;
    refetch.commands();
    if (server) refetch.server(server);
    else refetch.policies();
  }
}

// ---------------------------------------------------------------------------------------
// Decisions

const dirtyTimelines = new Set();
let renderQueued = false;

/** Redraw what changed once the current batch of stream messages is handled. */
function queueRender() {
  if (renderQueued) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    for (const name of dirtyTimelines) renderTimeline(name);
    dirtyTimelines.clear();
    renderEventLog();
    for (const entry of state.servers.values()) renderDetailLists(entry);
  });
}

function mergeDecisions(list) {
  let added = false;
  for (const decision of list) {
    if (decision?.id == null || state.decisionIds.has(decision.id)) continue;
    state.decisionIds.add(decision.id);
    state.decisions.push(decision);
    dirtyTimelines.add(decision.server);
    added = true;
  }
  if (!added) return;
  // Nearly always in order already (the list, then the stream after its last id).
  state.decisions.sort((a, b) => a.id - b.id);
  while (state.decisions.length > MAX_DECISIONS) {
    const dropped = state.decisions.shift();
    state.decisionIds.delete(dropped.id);
    dirtyTimelines.add(dropped.server);
  }
  updateServerFilter();
  queueRender();
}

function updateServerFilter() {
  const select = $('#decision-server-filter');
  const names = [...new Set([...state.servers.keys(), ...state.decisions.map((d) => d.server)])].sort();
  const shown = [...select.options].slice(1).map((option) => option.value);
  if (names.join('\n') === shown.join('\n')) return;
  const selected = select.value;
  select.replaceChildren(el('option', { value: '', text: 'All servers' }), ...names.map((n) => el('option', { value: n, text: n })));
  select.value = names.includes(selected) ? selected : '';
}

function renderAllTimelines() {
  for (const name of timelineNames()) dirtyTimelines.add(name);
  for (const section of $('#timelines').children) dirtyTimelines.add(section.dataset.server);
  queueRender();
}

/** Every server a timeline may be about: those with decisions, and those configured. */
function timelineNames() {
  return new Set([...state.decisions.map((d) => d.server), ...state.servers.keys()]);
}

/**
 * The operator actions and config changes about `name`, oldest first: one note per command
 * (at the time it was first seen, in its latest state), one per config event.
 */
function timelineNotes(name) {
  const notes = [];
  const commands = new Map();
  for (const e of state.events) {
    if (!isTimelineNote(e)) continue;
    const servers = noteServers(e);
    if (servers && !servers.includes(name)) continue;
    if (e.event === 'command') {
      const note = commands.get(e.command_id);
      if (note) {
        note.latest = e;
        continue;
      }
      const fresh = { at: e.at, first: e, latest: e };
      commands.set(e.command_id, fresh);
      notes.push(fresh);
    } else {
      notes.push({ at: e.at, first: e, latest: e });
    }
  }
  return notes;
}

function timelineSection(name) {
  const container = $('#timelines');
  for (const section of container.children) if (section.dataset.server === name) return section;
  const section = el('section', { class: 'timeline', dataset: { server: name }, 'aria-label': `Decisions for ${name}` },
    el('h3', { text: name }), el('ol', { class: 'decision-list' }));
  // Sections in name order, so the panel does not jump about on a wall display.
  const after = [...container.children].find((other) => other.dataset.server > name);
  container.insertBefore(section, after ?? null);
  return section;
}

function renderTimeline(name) {
  const serverFilter = $('#decision-server-filter').value;
  const kindFilter = $('#decision-kind-filter').value;
  const decisions = state.decisions.filter((d) => d.server === name);
  const notes = timelineNotes(name);
  // A server's timeline exists once it has a decision, or an operator action of its own.
  const own = notes.some((note) => noteServers(note.first) !== null);
  if (!decisions.length && !own) {
    for (const section of $('#timelines').querySelectorAll('.timeline')) if (section.dataset.server === name) section.remove();
  } else {
    const section = timelineSection(name);
    section.hidden = Boolean(serverFilter) && serverFilter !== name;
    // Decisions and notes in the order they happened; a note before the decisions of its
    // own millisecond (a restart comes before the decisions about the new process). The
    // kind filter keeps the notes: they explain the counters the decisions start from.
    const entries = [
      ...(kindFilter === 'operator' ? [] : decisions.filter((d) => !kindFilter || d.decision === kindFilter)
        .map((decision) => ({ at: Date.parse(decision.at), order: 1, decision }))),
      ...notes.map((note) => ({ at: Date.parse(note.at), order: 0, note })),
    ].sort((a, b) => (a.at - b.at) || (a.order - b.order));
    const start = Math.max(0, entries.length - TIMELINE_LENGTH);
    // Between two decisions answered by different modules, a separator names the module
    // that took over (compared with the one before, even if that one is not shown).
    const previous = entries.slice(0, start).findLast((entry) => entry.decision);
    let module = previous ? previous.decision.module ?? null : undefined;
    const oldestFirst = [];
    for (const entry of entries.slice(start)) {
      if (entry.note) {
        oldestFirst.push(noteItem(entry.note));
        continue;
      }
      const decision = entry.decision;
      if (module !== undefined && (module ?? null) !== (decision.module ?? null)) {
        oldestFirst.push(el('li', { class: 'module-change', dataset: { module: decision.module ?? undefined },
          text: `now deciding: ${decision.module ?? 'built-in'}` }));
      }
      module = decision.module ?? null;
      oldestFirst.push(decisionItem(decision));
    }
    const items = oldestFirst.reverse();
    if (!items.length) items.push(el('li', { class: 'empty', text: 'Nothing of this kind.' }));
    section.querySelector('ol').replaceChildren(...items);
  }
  $('#decisions-empty').hidden = $('#timelines').children.length > 0;
}

const NOTE_TONES = { completed: 'green', failed: 'red', expired: 'red' };

/** Who asked for a command, from its correlation id: the gateway's own submitters name
 *  themselves; anything else (the admin API, the CLI, a fleet) is an operator. */
function commandOrigin(correlation) {
  const id = String(correlation ?? '');
  if (id === 'config-watcher') return 'config watcher';
  if (id === 'sign-in') return 'sign-in';
  if (id.startsWith('mcp-session-')) return `MCP client (${id})`;
  return 'operator';
}

/** An operator's command or a config change, inline in a decision timeline. */
function noteItem(note) {
  const e = note.latest;
  if (e.event === 'command') {
    const command = String(e.command ?? '').replaceAll('_', '-');
    return el('li', {
      class: 'note operator',
      dataset: { note: 'command', commandId: e.command_id, command: e.command, server: e.server ?? undefined, state: e.state,
        origin: commandOrigin(e.correlation_id) },
      title: `${e.command_id}${e.correlation_id ? ` · correlation id ${e.correlation_id}` : ''} · ${plural(e.attempts ?? 0, 'attempt')}`,
    },
    el('time', { class: 'when', datetime: note.at, title: note.at, text: clockMs(note.at) }),
    el('span', { class: 'summary', text: `${commandOrigin(e.correlation_id)}: ${command}${e.server ? ` ${e.server}` : ''}` }),
    el('span', { class: 'badge', dataset: { tone: NOTE_TONES[e.state] ?? 'blue', state: e.state }, text: e.state }),
    e.error ? causeFirst(e.error) : null);
  }
  const [text, error] = describeEvent(e);
  return el('li', { class: 'note config', dataset: { note: e.event } },
    el('time', { class: 'when', datetime: note.at, title: note.at, text: clockMs(note.at) }),
    el('span', { class: 'summary', text }),
    error ? causeFirst(error) : null);
}

function decisionItem(d) {
  const fallback = d.answered_by === 'fallback';
  return el('li', {
    class: fallback ? 'decision fallback' : 'decision',
    dataset: { decisionId: d.id, server: d.server, decision: d.decision, answeredBy: d.answered_by, module: d.module ?? undefined },
  },
  el('time', { class: 'when', datetime: d.at, title: d.at, text: clockMs(d.at) }),
  el('span', { class: 'kind', text: d.decision }),
  el('span', { class: 'summary', text: d.summary ?? keyValues(d.verdict) }),
  el('span', { class: 'module', title: d.policy ? `policy ${d.policy}` : null, text: d.module ?? 'built-in' }),
  el('span', { class: 'duration', text: `${d.duration_us ?? '?'} µs` }),
  el('code', { class: 'inputs', text: keyValues(d.inputs) }),
  fallback ? el('strong', { class: 'fault', text: `⚠ module faulted, built-in answered${d.fault ? `: ${d.fault}` : ''}` }) : null);
}

// ---------------------------------------------------------------------------------------
// Gateway events

const WARNING_STATUSES = ['offline', 'error', 'requires_reauth', 'permanently_failed'];

function isWarning(e) {
  switch (e.event) {
    case 'status_changed': return WARNING_STATUSES.includes(e.to);
    case 'command': return e.state === 'failed' || e.state === 'expired';
    case 'health_degraded': case 'permanently_failed': case 'policy_rejected':
    case 'policy_faulted': case 'config_rejected': case 'name_collision': return true;
    default: return false;
  }
}

/** An event in words, and the error it carries (shown cause first), if any. */
function describeEvent(e) {
  const list = (names) => (names?.length ? names.join(', ') : '');
  switch (e.event) {
    case 'status_changed': return [`${humanStatus(e.from)} → ${humanStatus(e.to)}`, e.reason];
    case 'reconnecting': return [`reconnecting, attempt ${e.attempt}, next try in ${duration(e.next_delay_ms)}`, e.reason];
    case 'reconnected': return [e.attempts > 0
      ? `back online after ${plural(e.attempts, 'reconnection attempt')}`
      : 'back online at the first try'];
    case 'health_degraded': return [`health degraded: ${plural(e.consecutive_failures, 'failure')} in a row`, e.last_error];
    case 'health_restored': return ['health restored'];
    case 'permanently_failed': return [`permanently failed after ${plural(e.crashes, 'crash')}`, e.reason];
    case 'tools_changed': return [`catalogue now ${plural(e.tools, 'tool')} · ${plural(e.prompts, 'prompt')} · ${plural(e.resources, 'resource')}`];
    case 'policy_loaded': return [`policy ${e.policy} loaded ${e.module} ${e.version}`];
    case 'policy_rejected': return [`policy ${e.policy} rejected`, e.reason];
    case 'policy_faulted': return [`policy ${e.policy} faulted on ${e.decision}`, e.fault];
    case 'config_applied': return [['config applied', e.added?.length && `added ${list(e.added)}`,
      e.removed?.length && `removed ${list(e.removed)}`, e.modified?.length && `changed ${list(e.modified)}`,
      e.not_applied?.length && `needs a restart: ${list(e.not_applied)}`].filter(Boolean).join('; ')];
    case 'config_rejected': return ['config rejected; the gateway keeps the config it had', e.reason];
    case 'name_collision': return [`${e.kind} ${e.left_out_item} of ${e.left_out_server} is not listed: ${e.listed} is ${e.server}'s`, e.reason];
    case 'command': return [`command ${e.command_id} ${e.command}: ${e.state}`, e.error];
    default: return [String(e.event ?? 'event')];
  }
}

function eventItem(e) {
  const [text, error] = describeEvent(e);
  return el('li', { class: 'event', dataset: { eventId: e.id, event: e.event, server: e.server ?? undefined, warning: isWarning(e) ? 'true' : undefined } },
    el('time', { datetime: e.at, title: e.at, text: clockMs(e.at) }),
    e.server ? el('span', { class: 'event-server', text: e.server }) : null,
    el('span', { class: 'event-text', text }),
    error ? causeFirst(error, isWarning(e) ? 'error-text' : 'reason') : null);
}

/** Events that belong in the decision timelines: what operators and config changes did. */
const isTimelineNote = (e) => e?.event === 'command' || e?.event === 'config_applied' || e?.event === 'config_rejected';

/** The servers a timeline note concerns; null: every server (a gateway-wide change). */
function noteServers(e) {
  if (e.event === 'command') return e.server ? [e.server] : null;
  if (e.event === 'config_applied') {
    const named = [...(e.added ?? []), ...(e.removed ?? []), ...(e.modified ?? [])];
    return named.length ? named : null;
  }
  return null;
}

/** Mark the timelines a note shows in for redrawing. */
function noteChanged(e) {
  const servers = noteServers(e);
  if (servers) for (const server of servers) dirtyTimelines.add(server);
  else for (const name of timelineNames()) dirtyTimelines.add(name);
}

function renderEventLog() {
  const recent = state.events.slice(-LOG_EVENTS).reverse();
  $('#event-log').replaceChildren(...recent.map(eventItem));
  $('#events-empty').hidden = recent.length > 0;
}

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
    if (state.servers.has(e.server)) refetch.server(e.server);
    else refetch.servers();
  }
  switch (e.event) {
    case 'status_changed':
      refetch.gateway();
      break;
    case 'config_applied':
      refetch.servers();
      refetch.gateway();
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
    this.after = { events: 0, decisions: 0 };
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
        const query = `events_after=${this.after.events}&decisions_after=${this.after.decisions}`;
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
const streams = [liveStream];

function updateLive() {
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
  state.events = [];
  for (const stream of streams) {
    stream.after = { events: 0, decisions: 0 };
    stream.restart();
  }
  renderAllTimelines();
}

// ---------------------------------------------------------------------------------------
// Start

function tick() {
  for (const entry of state.servers.values()) renderTicking(entry);
  renderGatewayUptime();
  renderUnreachableSince();
}

function wire() {
  const tokenDialog = $('#token-dialog');
  const tokenForm = $('#token-form');
  tokenForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const input = tokenForm.elements.namedItem('token');
    const token = input.value.trim();
    if (!token) return;
    writeToken(token);
    input.value = '';
    tokenDialog.close();
    for (const stream of streams) stream.restart();
    notifyTokenChanged();
    reloadAll();
  });
  $('#token-cancel').addEventListener('click', () => tokenDialog.close());
  $('#enter-token').addEventListener('click', () => askForToken(''));
  $('#forget-token').addEventListener('click', () => {
    writeToken('');
    showResult('Token forgotten for this tab.', 'ok');
    // Stop using it at once; if the API needs one, the next answer asks again.
    for (const stream of streams) stream.restart();
    notifyTokenChanged();
  });

  const confirm = $('#confirm-dialog');
  $('#confirm-yes').addEventListener('click', () => confirm.close('yes'));
  $('#confirm-no').addEventListener('click', () => confirm.close('no'));

  // One listener for every action button, including rows created later.
  document.addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (button && !button.disabled) runAction(button);
  });

  $('#decision-server-filter').addEventListener('change', renderAllTimelines);
  $('#decision-kind-filter').addEventListener('change', renderAllTimelines);
}

async function start() {
  wire();
  updateLive();
  setInterval(tick, 1000);
  await reloadAll();
  // Events from the start of the gateway's replay buffer, so the rows' event lists and
  // the log have history; decisions after the ones just loaded.
  for (const stream of streams) stream.run();
  followMetrics();
}

start();
