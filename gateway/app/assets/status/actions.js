// Wardgate status page, operator actions (reconnect, restart, health check, disable,
// enable, reload policies): asked for in a confirmation dialog, sent as a POST, the outcome
// shown, and what they change refetched.

import { $ } from '/ui/dom.js';
import { api } from '/ui/token.js';

export const ACTIONS = {
  reconnect: { label: 'Reconnect', explain: 'Its connection is closed and opened again.' },
  restart: { label: 'Restart', explain: 'Its process or connection is stopped and started again; calls in flight fail.' },
  'health-check': { label: 'Health check', explain: 'It is probed now.' },
  disable: { label: 'Disable', explain: 'It is stopped and its tools disappear for clients until enabled.' },
  enable: { label: 'Enable', explain: 'It is started again.' },
  'reload-policies': { label: 'Reload policies', explain: 'Every policy module is read from disk again.' },
};

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

export function showResult(text, outcome) {
  const box = $('#action-result');
  box.textContent = text;
  box.dataset.outcome = outcome;
}

async function runAction(button, refetch) {
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

/**
 * The confirmation dialog's buttons, and one listener for every action button, including
 * rows created later. `refetch`: feed.js's debounced loads, for what an action changed
 * (passed in: feed.js imports rows.js, which imports this module for ACTIONS).
 */
export function wireActions(refetch) {
  const confirm = $('#confirm-dialog');
  $('#confirm-yes').addEventListener('click', () => confirm.close('yes'));
  $('#confirm-no').addEventListener('click', () => confirm.close('no'));

  document.addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (button && !button.disabled) runAction(button, refetch);
  });
}
