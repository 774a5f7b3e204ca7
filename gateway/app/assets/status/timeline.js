// Wardgate status page, the decision timelines (one per server, with the operator actions
// and config changes about it inline), the recent events log, and an expanded row's recent
// events and decisions.

import { $, el, fill } from '/ui/dom.js';
import { causeFirst, clockMs, duration, humanStatus, keyValues, plural } from '/ui/format.js';
import { MAX_DECISIONS, state } from '/ui/state.js';

const TIMELINE_LENGTH = 50;     // shown per server in the decisions panel
const BRIEF_DECISIONS = 10;     // shown in an expanded server row
const SERVER_EVENTS = 20;       // shown in an expanded server row
const LOG_EVENTS = 30;          // shown in the recent events panel

// ---------------------------------------------------------------------------------------
// Decisions

const dirtyTimelines = new Set();
let renderQueued = false;

/** Redraw what changed once the current batch of stream messages is handled. */
export function queueRender() {
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

export function mergeDecisions(list) {
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
    state.shadows.delete(dropped.id);
    dirtyTimelines.add(dropped.server);
  }
  updateServerFilter();
  queueRender();
}

/** A shadow module's verdicts, each shown beside the live decision it was asked about. */
export function mergeShadows(list) {
  for (const seen of list) {
    if (typeof seen?.decision !== 'number') continue;
    state.shadows.set(seen.decision, seen);
    dirtyTimelines.add(seen.server);
  }
  // A verdict may come before its decision (two feeds); keep a bounded few either way.
  for (const id of state.shadows.keys()) {
    if (state.shadows.size <= 2 * MAX_DECISIONS) break;
    state.shadows.delete(id);
  }
  queueRender();
}

export function updateServerFilter() {
  const select = $('#decision-server-filter');
  const names = [...new Set([...state.servers.keys(), ...state.decisions.map((d) => d.server)])].sort();
  const shown = [...select.options].slice(1).map((option) => option.value);
  if (names.join('\n') === shown.join('\n')) return;
  const selected = select.value;
  select.replaceChildren(el('option', { value: '', text: 'All servers' }), ...names.map((n) => el('option', { value: n, text: n })));
  select.value = names.includes(selected) ? selected : '';
}

export function renderAllTimelines() {
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

/** A link to the trace a decision was made in, in the operator's trace viewer
 *  (`[gateway.telemetry] trace_url`), when there is both. */
function traceLink(traceId) {
  const template = state.gateway?.trace_url;
  if (!template || !/^[0-9a-f]{32}$/.test(traceId ?? '')) return null;
  return el('a', { class: 'trace', href: template.replaceAll('{trace_id}', traceId), target: '_blank', rel: 'noopener', text: 'trace' });
}

/** What the policy's shadow module would have decided, if one was asked. */
function shadowVerdict(d) {
  const seen = state.shadows.get(d.id);
  if (!seen) return [null, undefined];
  const verdict = seen.fault ? 'fault' : seen.agrees ? 'agrees' : 'disagrees';
  const said = seen.fault ? `faulted: ${seen.fault}` : seen.summary;
  const mark = { agrees: '=', disagrees: '≠', fault: '⚠' }[verdict];
  return [el('span', {
    class: `shadow ${verdict}`,
    title: `shadow module ${seen.module}: it decides nothing`,
    text: `${mark} shadow ${seen.module}: ${said}`,
  }), verdict];
}

function decisionItem(d) {
  const fallback = d.answered_by === 'fallback';
  const [shadow, verdict] = shadowVerdict(d);
  const classes = ['decision', fallback && 'fallback', verdict === 'disagrees' && 'disagreement'].filter(Boolean);
  return el('li', {
    class: classes.join(' '),
    dataset: { decisionId: d.id, server: d.server, decision: d.decision, answeredBy: d.answered_by, module: d.module ?? undefined, shadow: verdict },
  },
  el('time', { class: 'when', datetime: d.at, title: d.at, text: clockMs(d.at) }),
  el('span', { class: 'kind', text: d.decision }),
  el('span', { class: 'summary', text: d.summary ?? keyValues(d.verdict) }),
  el('span', { class: 'module', title: d.policy ? `policy ${d.policy}` : null, text: d.module ?? 'built-in' }),
  el('span', { class: 'duration', text: `${d.duration_us ?? '?'} µs` }),
  el('code', { class: 'inputs', text: keyValues(d.inputs) }),
  traceLink(d.trace_id),
  shadow,
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
    case 'disconnected': return ['disconnected on purpose', e.reason];
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
export const isTimelineNote = (e) => e?.event === 'command' || e?.event === 'config_applied' || e?.event === 'config_rejected';

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
export function noteChanged(e) {
  const servers = noteServers(e);
  if (servers) for (const server of servers) dirtyTimelines.add(server);
  else for (const name of timelineNames()) dirtyTimelines.add(name);
}

function renderEventLog() {
  const recent = state.events.slice(-LOG_EVENTS).reverse();
  $('#event-log').replaceChildren(...recent.map(eventItem));
  $('#events-empty').hidden = recent.length > 0;
}

// ---------------------------------------------------------------------------------------
// An expanded server row's events and decisions

/** An open row's recent events and decisions, from the streams. */
export function renderDetailLists(entry) {
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

/** An expanded row's "Show full timeline": the decisions panel, showing only `name`. */
export function showTimelineOf(name) {
  const select = $('#decision-server-filter');
  select.value = name;
  renderAllTimelines();
  $('#decisions').scrollIntoView({ block: 'start' });
  $('#decisions-heading').focus();
}
