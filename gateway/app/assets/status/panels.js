// Wardgate status page, the policies panel (each policy module, its loads, rejections,
// faults, decisions and shadow) and the recent commands panel.

import { $, el, fill } from '/ui/dom.js';
import { causeFirst, clock, plural } from '/ui/format.js';

const SHOWN_COMMANDS = 20;

const FAULT_KINDS = [['timeouts', 'timeouts'], ['memory_exceeded', 'memory exceeded'], ['traps', 'traps'],
  ['invalid_answers', 'invalid answers'], ['instantiation_failures', 'instantiation failures']];

export function renderPolicies(policies) {
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
      item('Decisions', decisions.length ? decisions.map(([kind, n]) => `${kind.replaceAll('_', '-')} ${n}`).join(' · ') : 'none'),
      p.deciding_from ? item('Deciding from', el('code', { text: p.deciding_from }),
        el('div', { class: 'sub', text: 'a promoted shadow, until the policy\'s file is loaded again' })) : null,
      p.shadow ? item('Shadow', el('code', { title: p.shadow.path, text: p.shadow.module }),
        el('div', { class: 'sub', text: `agreed ${p.shadow.agreed ?? 0} · disagreed ${p.shadow.disagreed ?? 0} · faults ${p.shadow.faults ?? 0} · dropped ${p.shadow.dropped ?? 0} (as of this panel's last refresh)` })) : null));
}

const COMMAND_TONES = { completed: 'green', failed: 'red', expired: 'red', pending: 'blue', acknowledged: 'blue', executing: 'blue' };

export function renderCommands(commands) {
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
