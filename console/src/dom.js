// DOM helpers. Everything a device sent (serials, names, values, payloads)
// reaches the page as text nodes or text properties: nothing here parses a
// string as HTML, and h refuses the properties that would.

const forbidden = new Set(['innerHTML', 'outerHTML', 'insertAdjacentHTML', 'srcdoc', 'style']);

// h builds an element: props are properties (or attributes for names the
// element lacks, e.g. aria-*), on* props are listeners, children are
// nodes, strings (as text), numbers, or arrays of them; null is skipped.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (forbidden.has(k)) throw new Error(`h: ${k} is not allowed`);
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === 'class') el.className = v;
    else if (k.startsWith('aria-') || k.startsWith('data-') || k === 'role' || k === 'for' || !(k in el)) el.setAttribute(k, String(v));
    else el[k] = v;
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// replace empties el and puts children in it.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// time renders an RFC 3339 time as local text, with the exact UTC time as
// the title.
export function time(iso) {
  if (!iso) return h('span', { class: 'muted' }, 'never');
  const d = new Date(iso);
  return h('time', { dateTime: iso, title: iso }, isNaN(d) ? iso : d.toLocaleString());
}

// valueText renders a stored JSON value as text: strings as they are,
// everything else as JSON.
export function valueText(v) {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// localInput renders epoch ms for a datetime-local input, in local time.
export function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60e3);
  return d.toISOString().slice(0, 19);
}
