// Wardgate status page, the servers table: one row per server (status, retry countdown,
// crashes, last error, uptime, catalogue, policy, connection, actions), its detail row
// (tools, recent events and decisions), and the counts by status at the top.

import { ACTIONS } from '/ui/actions.js';
import { $, el, fill } from '/ui/dom.js';
import { ago, causeFirst, duration, humanStatus, plural } from '/ui/format.js';
import { nextSeq, reach, state } from '/ui/state.js';
import { renderDetailLists, showTimelineOf, updateServerFilter } from '/ui/timeline.js';
import { renderTraffic } from '/ui/traffic.js';

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

/**
 * Loads /servers/NAME into its row: feed.js's loadServer, passed in by app.js at start
 * (feed.js imports this module, so this one does not import it back).
 */
let loadServer = null;
export const useServerLoader = (load) => {
  loadServer = load;
};

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

export function applyServerList(list, seq) {
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
export function applyServer(info, seq, create = false) {
  const entry = state.servers.get(info.name) ?? (create ? serverEntry(info.name) : null);
  if (!entry || seq < entry.seq) return;    // gone, or an older answer than the data shown
  entry.seq = seq;
  if (Array.isArray(info.tools)) {
    entry.tools = info.tools;
    entry.toolsError = null;
    info = { ...info, tools: info.tools.length };
  }
  // A server with an instance per client: the detail lists them, the list counts them.
  if (Array.isArray(info.instances)) {
    entry.instances = info.instances;
    info = { ...info, instances: info.instances.length };
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

export function renderServerRow(entry) {
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
  if (info.degraded && info.status === 'online' && !stale) row.dataset.degraded = 'true';
  else delete row.dataset.degraded;

  fill(cells.status,
    el('span', { class: 'badge', dataset: { tone, status }, text: humanStatus(status) }),
    stale ? el('div', { class: 'sub last-known', text: `last known: ${humanStatus(info.status)}` }) : null,
    info.degraded && info.status === 'online' && !stale ? el('span', { class: 'tag degraded', text: 'degraded' }) : null,
    info.status_since && !stale ? el('div', { class: 'sub status-since', dataset: { statusSince: info.status_since }, title: `since ${info.status_since}`, text: since(info.status_since) }) : null,
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
    info.instances != null ? el('div', { class: 'sub instances', title: 'one process for each client, besides the one that lists the tools', text: `${plural(info.instances, 'instance')} (per client)` }) : null,
    info.last_credential_check_at ? el('div', {
      class: 'sub credentials', title: `credentials checked ${info.last_credential_check_at}`,
      text: `credentials ${info.credentials_accepted === true ? 'accepted' : info.credentials_accepted === false ? 'refused' : 'checked'} ${ago(info.last_credential_check_at)}`,
    }) : null,
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
export function renderTicking(entry) {
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
  for (const node of cells.status.querySelectorAll('[data-status-since]')) node.textContent = since(node.dataset.statusSince);
}

/** How long the server has had its status: "for 3 min". */
function since(at) {
  const then = Date.parse(at);
  if (Number.isNaN(then)) return '';
  const ms = Date.now() - then;
  return ms < 1000 ? 'just now' : `for ${duration(ms)}`;
}

/** The event says what the status is now; show it before the refetch confirms it. */
export function applyStatusChange(event) {
  const entry = state.servers.get(event.server);
  if (!entry?.info) return;
  entry.seq = nextSeq();
  const since = event.to === entry.info.status ? entry.info.status_since : event.at ?? new Date().toISOString();
  // `degraded` is a flag of `online` only.
  const degraded = event.to === 'online' ? entry.info.degraded : false;
  entry.info = { ...entry.info, status: event.to, reason: event.reason || null, status_since: since, degraded };
  entry.staleSince = null;    // the gateway just said so
  if (!['reconnecting', 'restarting', 'offline', 'error'].includes(event.to)) entry.retryDeadline = null;
  renderServerRow(entry);
  renderCounts();
}

export function applyReconnecting(event) {
  const entry = state.servers.get(event.server);
  if (!entry?.info) return;
  entry.seq = nextSeq();
  // The event says the server is waiting to reconnect (no status_changed says it again),
  // and its status meanwhile: `reconnecting`, or `error` for a server that answers but fails.
  const status = event.status || 'reconnecting';
  entry.info = { ...entry.info, status, reconnect_attempt: event.attempt };
  entry.retryDeadline = performance.now() + event.next_delay_ms;
  renderTicking(entry);
}

/** How many servers are in each status, at the top; "unknown" while the gateway is out of reach. */
export function renderCounts() {
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
export function renderTools(entry) {
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
  // Each client's instance: its status, whose it is, and how long it has run and idled.
  if (entry.instances?.length) {
    tools.append(el('table', { class: 'tool-table instance-table' },
      el('thead', {}, el('tr', {}, ['Instance', 'Status', 'Owner', 'PID', 'Age', 'Idle', 'Crashes', 'Last error'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, entry.instances.map((instance) => el('tr', { dataset: { instance: instance.name } },
        el('td', {}, el('code', { text: instance.name })),
        el('td', { text: humanStatus(instance.status) }),
        el('td', { text: instance.owner ?? '' }),
        el('td', { text: instance.pid == null ? '' : String(instance.pid) }),
        el('td', { text: duration(instance.age_ms ?? 0) }),
        el('td', { text: duration(instance.idle_ms ?? 0) }),
        el('td', { text: String(instance.crashes_in_window ?? 0) }),
        el('td', { text: instance.last_error ?? '' }))))));
  }
}
