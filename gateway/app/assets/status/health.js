// Wardgate status page, the header: the gateway's own health (GET /gateway), its uptime,
// and "Unreachable" instead of "Ready" while the page cannot reach it.

import { $, el, fill } from '/ui/dom.js';
import { causeFirst, duration } from '/ui/format.js';
import { knownNow, reach, state } from '/ui/state.js';

export function renderGateway() {
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

export function renderGatewayUptime() {
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
