// Wardgate status page, traffic: call and error rates per server, from the request
// counters of /metrics (read every METRICS_MS), drawn as sparklines.

import { $, el, fill } from '/ui/dom.js';
import { duration } from '/ui/format.js';
import { reach, state } from '/ui/state.js';
import { api } from '/ui/token.js';

export const METRICS_MS = 5000;   // /metrics is read this often, for the traffic sparklines
const METRIC_SAMPLES = 30;         // rates kept per server: 2.5 min at METRICS_MS
/** `outcome` labels of wardgate_requests_total that count as errors (cancelled is the client's). */
const ERROR_OUTCOMES = new Set(['error', 'timeout', 'failed', 'unavailable']);

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
export async function pollMetrics() {
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

export function renderTraffic() {
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
