// Wardgate status page, formatting for people: clocks, durations, plurals, inputs as
// key=value, and errors shown cause first.

import { el } from '/ui/dom.js';

const pad = (n, width = 2) => String(n).padStart(width, '0');

/** HH:MM:SS.mmm, local time. */
export function clockMs(at) {
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at ?? '');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** HH:MM:SS local, with the date when it is not today. */
export function clock(at) {
  if (!at) return '';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

/** 45 s, 12 min, 3 h 5 min, 2 d 4 h. */
export function duration(ms) {
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
export function ago(at) {
  const then = Date.parse(at);
  if (Number.isNaN(then)) return '';
  const ms = Date.now() - then;
  return ms < 1000 ? 'just now' : `${duration(ms)} ago`;
}

export const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
export const humanStatus = (status) => String(status ?? 'unknown').replaceAll('_', ' ');

/** Inputs as `key=value key=value`, nested values as compact JSON. */
export function keyValues(object) {
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
export function causeFirst(text, className = 'error-text') {
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
