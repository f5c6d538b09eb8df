// tapstream's browser page: one websocket to /ws speaking the API of
// docs/api.md. No libraries: meters, faders and plots are drawn here.
'use strict';

const $ = (selector) => document.querySelector(selector);
const token = new URLSearchParams(location.search).get('token');
let socket = null;
let nextId = 1;
const pending = new Map();
let info = null;
let selectedChannel = 0;
const strips = [];  // per channel, then the master: {canvas, clip, fader, db, mute, hold}

function connect() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  socket = new WebSocket(`${scheme}://${location.host}/ws${token ? '?token=' + encodeURIComponent(token) : ''}`);
  socket.onopen = start;
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.event === 'meters') return drawMeters(message.levels);
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    message.ok ? waiter.resolve(message.result) : waiter.reject(message.error);
  };
  socket.onclose = () => {
    setState('disconnected');
    for (const waiter of pending.values()) waiter.reject({type: 'closed', message: 'connection closed'});
    pending.clear();
    setTimeout(connect, 1000);
  };
}

function request(name, fields = {}) {
  return new Promise((resolve, reject) => {
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      return reject({type: 'closed', message: 'not connected'});
    }
    const id = nextId++;
    pending.set(id, {resolve, reject});
    socket.send(JSON.stringify({id, request: name, ...fields}));
  });
}

function setState(state) {
  const badge = $('#state');
  badge.textContent = state;
  badge.className = 'badge ' + state;
}

async function start() {
  info = await request('get_status');
  $('#engine').textContent = `${info.backend} · ${info.channels} ch · ${info.sample_rate} Hz · block ${info.block_frames}`;
  $('#latency').textContent = `latency ${info.latency_ms.toFixed(2)} ms`;
  buildStrips(info.channels, await request('get_volume'));
  const select = $('#upload-channel');
  select.length = 1;
  for (let c = 0; c < info.channels; ++c) select.add(new Option(`channel ${c}`, String(c)));
  await refreshFilters();
  await loadConfig();
  await request('subscribe_meters', {interval_ms: 50});
  poll();
}

async function poll() {
  try {
    // The one status document (what `tapstream ctl status` prints, and more).
    const stats = await request('get_status');
    setState(stats.state);
    $('#load').textContent = `load ${(100 * stats.load).toFixed(2)} % · block p99 ${stats.block_us.p99.toFixed(0)} µs`;
    $('#counters').textContent = `underruns ${stats.underruns} · overruns ${stats.overruns} · clipped ${stats.clipped} · swaps ${stats.swaps}`;
    const log = await request('get_log', {lines: 200});
    const pre = $('#log-lines');
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = log.lines.join('');
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  } catch (error) {
    // The connection is being re-established; the next poll will tell.
  }
  if (socket.readyState === WebSocket.OPEN) setTimeout(poll, 1000);
}

// --- levels: meters, clip lights, faders, mutes ------------------------------
function buildStrips(channels, volume) {
  const container = $('#strips');
  container.textContent = '';
  strips.length = 0;
  for (let c = 0; c <= channels; ++c) {
    const master = c === channels;
    const level = master ? volume.master : volume.channels[c];
    const strip = document.createElement('div');
    strip.className = 'strip';
    strip.dataset.channel = master ? 'master' : String(c);
    strip.innerHTML = `<strong>${master ? 'master' : 'ch ' + c}</strong>
      ${master ? '' : '<button class="clip" title="clipped samples; click to clear">clip</button><canvas width="24" height="140"></canvas>'}
      <input type="range" min="-60" max="${info.max_gain_db ?? 0}" step="0.5" aria-label="volume ${strip.dataset.channel}">
      <span class="db"></span>
      <button class="mute">mute</button>`;
    container.append(strip);
    const s = {
      canvas: strip.querySelector('canvas'), clip: strip.querySelector('.clip'),
      fader: strip.querySelector('input'), db: strip.querySelector('.db'),
      mute: strip.querySelector('.mute'), hold: 0, clipped: 0,
    };
    const channel = master ? 'master' : c;
    s.fader.value = Math.max(-60, level.db);
    s.db.textContent = formatDb(level.db);
    s.mute.classList.toggle('on', level.muted);
    s.fader.addEventListener('input', () => {
      const db = Number(s.fader.value) <= -60 ? -150 : Number(s.fader.value);
      s.db.textContent = formatDb(db);
      request('set_volume', {channel, db}).catch(showError);
    });
    s.mute.addEventListener('click', () => {
      const muted = !s.mute.classList.contains('on');
      request('set_mute', {channel, muted}).then(() => s.mute.classList.toggle('on', muted), showError);
    });
    if (s.clip) s.clip.addEventListener('click', () => { s.clipped = 0; s.clip.classList.remove('on'); });
    strips.push(s);
  }
}

function formatDb(db) {
  return db <= -150 ? '-∞ dB' : `${db.toFixed(1)} dB`;
}

function toDb(linear) {
  return linear > 0 ? 20 * Math.log10(linear) : -Infinity;
}

function drawMeters(levels) {
  levels.forEach((level, c) => {
    const s = strips[c];
    if (!s || !s.canvas) return;
    const g = s.canvas.getContext('2d');
    const h = s.canvas.height;
    const w = s.canvas.width;
    const y = (db) => h * Math.min(1, Math.max(0, -db / 60));
    g.fillStyle = '#0d1014';
    g.fillRect(0, 0, w, h);
    const rms = toDb(level.rms_since);
    const peak = toDb(level.peak_since);
    s.hold = Math.max(peak, s.hold - 0.5);
    g.fillStyle = rms > -6 ? '#d29922' : '#3fb950';
    g.fillRect(2, y(rms), w - 4, h - y(rms));
    g.fillStyle = peak >= 0 ? '#f85149' : '#dde3ea';
    g.fillRect(2, y(s.hold), w - 4, 2);
    if (level.clipped > 0) {
      s.clipped += level.clipped;
      s.clip.classList.add('on');
      s.clip.textContent = `clip ${s.clipped}`;
    }
  });
}

// --- filters: list, plots, upload ----------------------------------------------
async function refreshFilters() {
  const {filters} = await request('list_filters');
  const body = $('#filter-list tbody');
  body.textContent = '';
  for (const f of filters) {
    const row = body.insertRow();
    row.dataset.channel = f.channel;
    for (const text of [f.channel, f.taps, f.source]) row.insertCell().textContent = text;
    row.classList.toggle('selected', f.channel === selectedChannel);
    row.addEventListener('click', () => { selectedChannel = f.channel; refreshFilters(); });
  }
  const filter = await request('get_filter', {channel: selectedChannel});
  plotResponse(filter.taps, filter.sample_rate);
}

// In-place radix-2 FFT of (re, im).
function fft(re, im) {
  const n = re.length;
  for (let i = 1, j = 0; i < n; ++i) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) { [re[i], re[j]] = [re[j], re[i]]; [im[i], im[j]] = [im[j], im[i]]; }
  }
  for (let size = 2; size <= n; size <<= 1) {
    const angle = -2 * Math.PI / size;
    const wr = Math.cos(angle), wi = Math.sin(angle);
    for (let start = 0; start < n; start += size) {
      let cr = 1, ci = 0;
      for (let k = 0; k < size / 2; ++k) {
        const a = start + k, b = a + size / 2;
        const tr = re[b] * cr - im[b] * ci, ti = re[b] * ci + im[b] * cr;
        re[b] = re[a] - tr; im[b] = im[a] - ti;
        re[a] += tr; im[a] += ti;
        [cr, ci] = [cr * wr - ci * wi, cr * wi + ci * wr];
      }
    }
  }
}

function plotResponse(taps, rate) {
  let n = 8192;
  while (n < taps.length) n <<= 1;
  const re = new Float64Array(n), im = new Float64Array(n);
  taps.forEach((t, i) => { re[i] = t; });
  fft(re, im);
  const magnitude = [], phase = [];
  for (let k = 1; k <= n / 2; ++k) {
    magnitude.push(20 * Math.log10(Math.hypot(re[k], im[k]) + 1e-12));
    phase.push(Math.atan2(im[k], re[k]) * 180 / Math.PI);
  }
  const frequency = (k) => (k + 1) * rate / n;
  const peak = Math.max(...magnitude);
  const top = Math.ceil((peak + 3) / 10) * 10;
  plot($('#magnitude'), magnitude, frequency, rate, top - 90, top, 'dB', '#58a6ff');
  plot($('#phase'), phase, frequency, rate, -180, 180, '°', '#d29922');
}

function plot(canvas, values, frequency, rate, low, high, unit, color) {
  const g = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height;
  const fMin = 10, fMax = rate / 2;
  const x = (f) => w * Math.log(f / fMin) / Math.log(fMax / fMin);
  const y = (v) => h * (1 - (Math.min(high, Math.max(low, v)) - low) / (high - low));
  g.fillStyle = '#0d1014';
  g.fillRect(0, 0, w, h);
  g.strokeStyle = '#2d333b';
  g.fillStyle = '#8893a0';
  g.font = '10px sans-serif';
  for (const f of [20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]) {
    if (f >= fMax) break;
    g.beginPath(); g.moveTo(x(f), 0); g.lineTo(x(f), h); g.stroke();
    g.fillText(f >= 1000 ? `${f / 1000}k` : String(f), x(f) + 2, h - 2);
  }
  const step = unit === 'dB' ? 10 : 90;
  for (let v = low; v <= high; v += step) {
    g.beginPath(); g.moveTo(0, y(v)); g.lineTo(w, y(v)); g.stroke();
    g.fillText(`${v}${unit}`, 2, y(v) - 2);
  }
  g.strokeStyle = color;
  g.beginPath();
  values.forEach((v, k) => {
    const f = frequency(k);
    if (f < fMin) return;
    k === 0 || f <= fMin ? g.moveTo(x(f), y(v)) : g.lineTo(x(f), y(v));
  });
  g.stroke();
}

async function upload(file) {
  const message = $('#upload-message');
  const channelValue = $('#upload-channel').value;
  const channel = channelValue === 'all' ? 'all' : Number(channelValue);
  message.className = '';
  message.textContent = `uploading ${file.name}…`;
  try {
    const fields = {channel, name: file.name};
    if (/\.(txt|csv|dat)$/i.test(file.name)) {
      fields.data = await file.text();
    } else {
      const bytes = new Uint8Array(await file.arrayBuffer());
      let binary = '';
      for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      fields.data_base64 = btoa(binary);
    }
    const result = await request('upload_filter', fields);
    message.className = 'good';
    message.textContent = `${file.name} installed (swap ${result.swaps})`;
    await refreshFilters();
  } catch (error) {
    message.className = 'error';
    message.textContent = `${error.type}: ${error.message}`;
  }
}

const drop = $('#drop');
drop.addEventListener('dragover', (event) => { event.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (event) => {
  event.preventDefault();
  drop.classList.remove('over');
  if (event.dataTransfer.files.length) upload(event.dataTransfer.files[0]);
});
$('#file').addEventListener('change', (event) => {
  if (event.target.files.length) upload(event.target.files[0]);
  event.target.value = '';
});

// --- configuration ----------------------------------------------------------------
async function loadConfig() {
  const config = await request('get_config');
  $('#config-text').value = config.text;
}

function showMessages(items, good) {
  const list = $('#config-messages');
  list.textContent = '';
  for (const item of items) {
    const li = document.createElement('li');
    li.className = good ? 'good' : 'error';
    li.textContent = item;
    list.append(li);
  }
}

function showError(error) {
  showMessages([`${error.type}: ${error.message}`], false);
}

$('#validate').addEventListener('click', async () => {
  const result = await request('validate_config', {text: $('#config-text').value});
  result.valid ? showMessages(['valid'], true) : showMessages(result.errors, false);
});

$('#apply').addEventListener('click', async () => {
  const text = $('#config-text').value;
  const check = await request('validate_config', {text});
  if (!check.valid) return showMessages(check.errors, false);
  try {
    const result = await request('apply_config', {text});
    const notes = ['applied'];
    if (result.restart_needed.length) notes.push(`takes effect at a restart: ${result.restart_needed.join(', ')}`);
    showMessages(notes, true);
    await refreshFilters();
  } catch (error) {
    showError(error);
  }
});

$('#undo').addEventListener('click', async () => {
  try {
    const result = await request('undo_config');
    $('#config-text').value = result.text;
    showMessages(['previous configuration applied'], true);
    await refreshFilters();
  } catch (error) {
    showError(error);
  }
});

$('#reload').addEventListener('click', () => loadConfig().then(() => showMessages([], true)));

connect();
