// /console/entities/{entity}/inputs/{input}: the latest value and a chart
// of the aggregated series over a chosen range: a min-max band and an
// average line for numbers, a step line for booleans, a table for strings
// and objects.
import uPlot from 'uplot';
import { h, replace, time, valueText, localInput } from '../dom.js';
import { api, enc } from '../api.js';

// 30 days and a year are charted from the minute and hour rollups.
const RANGES = [['15m', '15 min', 15 * 60e3], ['1h', '1 h', 3600e3], ['24h', '24 h', 86400e3], ['7d', '7 d', 7 * 86400e3],
  ['30d', '30 d', 30 * 86400e3], ['1y', '1 y', 365 * 86400e3]];

export function entityPage({ el, signal, navigate, link, params }, entity, input) {
  const base = `/console/entities/${enc(entity)}/inputs/${enc(input)}`;
  const apiBase = `/entities/${enc(entity)}/inputs/${enc(input)}`;
  const now = Date.now();
  let from, to, range = params.get('range') || '1h';
  if (params.get('from') && params.get('to')) {
    range = 'custom';
    from = Date.parse(params.get('from'));
    to = Date.parse(params.get('to'));
  }
  if (range !== 'custom' || !(from < to)) {
    const r = RANGES.find(([k]) => k === range) || RANGES[1];
    range = r[0];
    to = now;
    from = now - r[2];
  }

  const latest = h('div', { class: 'latest', id: 'latest' }, h('span', { class: 'muted' }, 'Loading…'));
  const chartBox = h('div', { class: 'chart', id: 'chart' });
  const status = h('p', { class: 'muted', role: 'status' });
  const fromInput = h('input', { type: 'datetime-local', id: 'range-from', step: 1, value: localInput(from) });
  const toInput = h('input', { type: 'datetime-local', id: 'range-to', step: 1, value: localInput(to) });
  const rangeButtons = RANGES.map(([key, label]) => h('button', {
    type: 'button', class: 'secondary', 'aria-pressed': String(range === key),
    onclick: () => navigate(`${base}?range=${key}`, { replace: true }),
  }, label));
  const custom = h('form', {
    class: 'custom-range',
    onsubmit: (e) => {
      e.preventDefault();
      const f = new Date(fromInput.value), t = new Date(toInput.value);
      if (!(f < t)) { replace(status, 'The start must be before the end.'); return; }
      navigate(`${base}?from=${enc(f.toISOString())}&to=${enc(t.toISOString())}`, { replace: true });
    },
  }, h('label', { for: 'range-from' }, 'From'), fromInput, h('label', { for: 'range-to' }, 'To'), toInput, h('button', { type: 'submit', class: 'secondary' }, 'Show range'));

  replace(el,
    h('p', { class: 'crumbs' }, link('/console/entities', 'Entities'), ' / ', entity, ' / '),
    h('h1', null, input),
    latest,
    h('div', { class: 'ranges', role: 'group', 'aria-label': 'Range' }, rangeButtons, custom),
    chartBox,
    status);

  api('GET', `${apiBase}/latest`).then((l) => {
    if (signal.aborted) return;
    replace(latest, h('span', { class: 'label' }, 'Latest'), h('span', { class: 'value', id: 'latest-value' }, valueText(l.value)),
      h('span', { class: 'muted' }, ' at ', time(l.ts), ` from ${l.serial}`));
  }, (err) => {
    if (!signal.aborted) replace(latest, h('span', { class: 'muted' }, err.status === 404 ? 'No value stored yet.' : `Latest value unavailable: ${err.message}`));
  });

  const width = Math.max(320, Math.min(chartBox.clientWidth || 900, 1400));
  const points = Math.max(50, Math.min(1000, Math.floor(width / 3)));
  const q = new URLSearchParams({ from: new Date(from).toISOString(), to: new Date(to).toISOString(), points: String(points) });
  replace(status, 'Loading…');
  api('GET', `${apiBase}/series?${q}`).then((s) => {
    if (signal.aborted) return;
    draw(s);
  }, (err) => {
    if (!signal.aborted) replace(status, `Could not load the series: ${err.message}`);
  });

  function draw({ step, points: buckets }) {
    chartBox.dataset.buckets = String(buckets.length);
    chartBox.dataset.step = step;
    const span = `${new Date(from).toLocaleString()} – ${new Date(to).toLocaleString()}`;
    if (buckets.length === 0) {
      chartBox.dataset.kind = 'empty';
      replace(status, `No readings from ${span}.`);
      return;
    }
    const total = buckets.reduce((n, b) => n + b.count, 0);
    replace(status, `${total} reading${total === 1 ? '' : 's'} in ${buckets.length} bucket${buckets.length === 1 ? '' : 's'} of ${step}, ${span}.`);
    const stepMs = parseStep(step);
    const numeric = buckets.some((b) => b.avg !== undefined);
    const bools = buckets.every((b) => typeof b.last === 'boolean');
    if (!numeric) {
      chartBox.dataset.kind = 'table';
      replace(chartBox, h('table', { class: 'list', id: 'buckets' },
        h('thead', null, h('tr', null, h('th', null, 'From'), h('th', null, 'Readings'), h('th', null, 'Last value'))),
        h('tbody', null, buckets.map((b) => h('tr', null, h('td', null, time(b.ts)), h('td', null, String(b.count)), h('td', { class: 'value' }, valueText(b.last)))))));
      return;
    }
    // A run of missing buckets much longer than the data's usual spacing
    // is a gap in the line (sparse data, one reading per several steps,
    // still draws a line).
    const times = buckets.map((b) => Date.parse(b.ts));
    const gaps = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => a - b);
    const usual = gaps.length ? gaps[Math.floor(gaps.length / 2)] : stepMs;
    const gapAfter = 3 * Math.max(stepMs, usual);
    const xs = [], mins = [], maxs = [], avgs = [], lasts = [];
    buckets.forEach((b, i) => {
      const t = times[i];
      xs.push(t / 1000);
      mins.push(b.min ?? null); maxs.push(b.max ?? null); avgs.push(b.avg ?? null);
      lasts.push(typeof b.last === 'boolean' ? Number(b.last) : null);
      if (i + 1 < times.length && times[i + 1] - t > gapAfter && !bools) {
        xs.push((t + stepMs) / 1000);
        mins.push(null); maxs.push(null); avgs.push(null); lasts.push(null);
      }
    });
    // Points where they fit, so that a lone bucket shows too.
    const points = { show: (u, si, i0, i1) => i1 - i0 < 150, size: 5 };
    const opts = {
      width, height: 320,
      scales: { x: { time: true, range: () => [from / 1000, to / 1000] } },
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    };
    let data;
    if (bools) {
      chartBox.dataset.kind = 'boolean';
      opts.series = [{}, { label: 'value', stroke: '#1d4ed8', width: 2, points, paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v == null ? '—' : v ? 'true' : 'false') }];
      opts.scales.y = { range: [-0.1, 1.1] };
      opts.axes = [{}, { splits: () => [0, 1], values: (u, vs) => vs.map((v) => (v ? 'true' : 'false')) }];
      data = [xs, lasts];
    } else {
      chartBox.dataset.kind = 'number';
      opts.series = [{},
        { label: 'max', stroke: 'rgba(37,99,235,0.35)', width: 1 },
        { label: 'min', stroke: 'rgba(37,99,235,0.35)', width: 1 },
        { label: 'avg', stroke: '#1d4ed8', width: 2, points }];
      opts.bands = [{ series: [1, 2], fill: 'rgba(37,99,235,0.15)' }];
      data = [xs, maxs, mins, avgs];
    }
    replace(chartBox);
    const plot = new uPlot(opts, data, chartBox);
    const ro = new ResizeObserver(() => {
      const w = Math.max(320, Math.min(chartBox.clientWidth, 1400));
      if (w !== plot.width) plot.setSize({ width: w, height: 320 });
    });
    ro.observe(chartBox);
    signal.addEventListener('abort', () => { ro.disconnect(); plot.destroy(); });
  }
}

function parseStep(s) {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(s || '');
  if (!m) return Infinity;
  return Number(m[1]) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
}
