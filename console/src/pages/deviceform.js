// The form that creates a device or edits one: connection type, inputs
// (each optionally connected to an entity input) and the timestamp input.
import { h, replace } from '../dom.js';
import { api, enc } from '../api.js';

let seq = 0;

// deviceForm returns the form; existing is the device record when editing
// (its tokens are kept: the record sent names none), absent when creating.
export function deviceForm({ existing, onSaved, onCancel }) {
  const id = (name) => `${name}-${++seq}`;
  const field = (label, input) => {
    input.id = input.id || id('f');
    return h('div', { class: 'field' }, h('label', { for: input.id }, label), input);
  };
  const serial = h('input', { name: 'serial', required: true, maxLength: 128, value: existing ? existing.serial : '', disabled: !!existing, autocomplete: 'off' });
  const type = h('select', { name: 'connectionType' },
    h('option', { value: 'API' }, 'API (HTTP)'),
    h('option', { value: 'MQTT' }, 'MQTT'));
  type.value = existing ? existing.connectionType : 'API';
  const tsInput = h('input', { name: 'timestampInput', placeholder: 'e.g. datetime', value: (existing && existing.timestampInput) || '', autocomplete: 'off' });
  const inputs = h('tbody');
  const status = h('p', { class: 'error', role: 'alert' });

  function inputRow(inp = {}) {
    const name = h('input', { 'aria-label': 'Input name', class: 'input-name', value: inp.name || '', required: true, maxLength: 128 });
    const entity = h('input', { 'aria-label': 'Entity', class: 'input-entity', value: inp.entity || '', maxLength: 128, placeholder: 'not connected' });
    const entityInput = h('input', { 'aria-label': 'Entity input', class: 'input-entity-input', value: inp.entityInput || '', maxLength: 128, placeholder: 'same as the name' });
    const row = h('tr', null,
      h('td', null, name), h('td', null, entity), h('td', null, entityInput),
      h('td', null, h('button', { type: 'button', class: 'secondary', onclick: () => row.remove() }, 'Remove')));
    row.read = () => {
      const out = { name: name.value.trim() };
      if (entity.value.trim()) {
        out.entity = entity.value.trim();
        if (entityInput.value.trim()) out.entityInput = entityInput.value.trim();
      }
      return out;
    };
    return row;
  }
  for (const inp of (existing && existing.inputs) || []) inputs.append(inputRow(inp));
  if (!existing) inputs.append(inputRow());

  const save = h('button', { type: 'submit' }, existing ? 'Save device' : 'Create device');
  const form = h('form', {
    class: 'card device-form',
    onsubmit: async (e) => {
      e.preventDefault();
      replace(status);
      const s = serial.value.trim();
      if (!s) { replace(status, 'A serial is needed.'); return; }
      const record = {
        connectionType: type.value,
        inputs: [...inputs.children].map((r) => r.read()).filter((i) => i.name),
      };
      if (tsInput.value.trim()) record.timestampInput = tsInput.value.trim();
      save.disabled = true;
      try {
        if (!existing) {
          // Creating must not overwrite a device that exists.
          const taken = await api('GET', `/devices/${enc(s)}`).then(() => true, (err) => (err.status === 404 ? false : Promise.reject(err)));
          if (taken) { replace(status, `A device with serial ${s} exists already.`); return; }
        }
        const saved = await api('PUT', `/devices/${enc(s)}`, record);
        onSaved(saved);
      } catch (err) {
        replace(status, `Not saved: ${err.message}`);
      } finally {
        save.disabled = false;
      }
    },
  },
  h('h2', null, existing ? 'Edit device' : 'New device'),
  field('Serial', serial),
  field('Connection type', type),
  h('fieldset', null,
    h('legend', null, 'Inputs'),
    h('table', { class: 'inputs' },
      h('thead', null, h('tr', null, h('th', null, 'Name in data'), h('th', null, 'Entity'), h('th', null, 'Entity input'), h('th'))),
      inputs),
    h('button', { type: 'button', class: 'secondary', onclick: () => inputs.append(inputRow()) }, 'Add input')),
  field('Timestamp input (key of data holding the reading time)', tsInput),
  h('div', { class: 'actions' }, save, h('button', { type: 'button', class: 'secondary', onclick: onCancel }, 'Cancel')),
  status);
  return form;
}
