// The sandbox's bootstrap, evaluated once in each fresh QuickJS-ng context by
// broker/engine/expr/javascript.py (its note in docs/design.md, section 1, comes first). The
// HELPERS marker below is replaced by the helpers of broker/engine/expr/jsapi.py before it runs.
// Workflow code reaches nothing here except through the scope objects makeScope builds.
(function () {
  "use strict";
  const PROBE = Object.freeze({});
  const MISSING = Object.freeze({});
  const hasOwn = Object.prototype.hasOwnProperty;
  const globalEval = eval;
  const shapes = new WeakMap();
  const UNHARDENED = new WeakSet();  // the per-scope proxies: see namesProxy
  let current = null;

  function active() {
    if (current === null) throw new Error("no expression is being evaluated");
    return current;
  }
  // A name the scope has but whose value was not supplied: record it and stop; the host runs
  // the evaluation again with the value (nothing has been written back yet).
  function missing(kind, key) {
    active().missing.push([kind, key]);
    throw MISSING;
  }
  function snapshotOf(value) {
    return value !== null && typeof value === "object" ? JSON.stringify(value) : null;
  }
  function readVariable(name) {
    const evaluation = active();
    const entry = evaluation.cache.get(name);
    if (entry !== undefined) return entry.value;
    if (!hasOwn.call(evaluation.data.v, name)) {
      if (evaluation.known.variables.has(name)) missing("variable", name);
      return undefined;
    }
    const value = evaluation.data.v[name];
    evaluation.cache.set(name, { value, json: snapshotOf(value), dirty: false });
    return value;
  }
  function writeVariable(name, value) {
    active().cache.set(name, { value, json: null, dirty: true });
  }
  function readInput(name) {
    const evaluation = active();
    if (hasOwn.call(evaluation.data.i, name)) return evaluation.data.i[name];
    if (evaluation.known.inputs.has(name)) missing("input", name);
    return undefined;
  }
  // An activity's outputs arrive as one object, by the name or id the script used; an activity
  // not asked for yet is asked for once (the host answers null when there is none).
  function readOutput(activity, output) {
    const evaluation = active();
    if (!hasOwn.call(evaluation.data.o, activity)) missing("output", activity);
    const outputs = evaluation.data.o[activity];
    if (outputs === null || typeof outputs !== "object") return undefined;
    if (output === null) {
      if (hasOwn.call(outputs, "result")) return outputs.result;
      const names = Object.keys(outputs);  // Elsa: the activity's only (else first) output
      return names.length > 0 ? outputs[names[0]] : undefined;
    }
    if (hasOwn.call(outputs, output)) return outputs[output];
    const lower = output.toLowerCase();
    for (const name of Object.keys(outputs)) {
      if (name.toLowerCase() === lower) return outputs[name];
    }
    return undefined;
  }
  function readSupplied(field, kind) {
    const evaluation = active();
    if (!hasOwn.call(evaluation.data, field)) missing(kind, "");
    return evaluation.data[field];
  }
  const readCurrent = () => readSupplied("cur", "current");
  const readLast = () => readSupplied("last", "last");
  const readNow = () => readSupplied("now", "now");
  // The instance's correlation id, name and definition: this evaluation's own writes first.
  function readState(key) {
    const evaluation = active();
    if (evaluation.state.has(key)) return evaluation.state.get(key);
    if (key === "correlationId") return evaluation.data.c;
    return readSupplied("wf", "workflow")[key];
  }
  function writeState(key, value) {
    active().state.set(key, value);
  }
  function setOutcomes(names) {
    active().outcomes = names;
  }

  // GUIDs, UTF-8 and base64 -------------------------------------------------------------------
  function randomBytes(count) {
    const bytes = [];
    for (let i = 0; i < count; i++) bytes.push(Math.floor(Math.random() * 256));
    return bytes;
  }
  function newGuidText() {
    const bytes = randomBytes(16);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = bytes.map((b) => (b + 0x100).toString(16).slice(1)).join("");
    return [hex.slice(0, 8), hex.slice(8, 12), hex.slice(12, 16), hex.slice(16, 20),
      hex.slice(20)].join("-");
  }
  const GUID = /^[{(]?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}[)}]?$/i;
  function parseGuidText(text) {
    const value = String(text).trim();
    if (!GUID.test(value)) throw new TypeError("not a GUID: " + value);
    const digits = value.replace(/[^0-9a-f]/gi, "").toLowerCase();
    return [digits.slice(0, 8), digits.slice(8, 12), digits.slice(12, 16),
      digits.slice(16, 20), digits.slice(20)].join("-");
  }
  function utf8Encode(text) {
    const bytes = [];
    for (const char of text) {
      let code = char.codePointAt(0);
      if (code >= 0xd800 && code <= 0xdfff) code = 0xfffd;  // a lone surrogate
      if (code < 0x80) bytes.push(code);
      else if (code < 0x800) bytes.push(0xc0 | (code >> 6), 0x80 | (code & 63));
      else if (code < 0x10000) {
        bytes.push(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 63), 0x80 | (code & 63));
      } else {
        bytes.push(0xf0 | (code >> 18), 0x80 | ((code >> 12) & 63), 0x80 | ((code >> 6) & 63),
          0x80 | (code & 63));
      }
    }
    return bytes;
  }
  function utf8Decode(bytes) {
    let text = "";
    for (let i = 0; i < bytes.length;) {
      const b = bytes[i] & 0xff;
      const size = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
      if (size === 0 || i + size > bytes.length) { text += "\ufffd"; i++; continue; }
      let code = size === 1 ? b : b & (0xff >> (size + 1));
      for (let k = 1; k < size; k++) code = (code << 6) | (bytes[i + k] & 63);
      text += String.fromCodePoint(code > 0x10ffff ? 0xfffd : code);
      i += size;
    }
    return text;
  }
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  function base64Encode(bytes) {
    let out = "";
    for (let i = 0; i < bytes.length; i += 3) {
      const n = ((bytes[i] & 0xff) << 16) | (((bytes[i + 1] ?? 0) & 0xff) << 8)
        | ((bytes[i + 2] ?? 0) & 0xff);
      out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63]
        + (i + 1 < bytes.length ? B64[(n >> 6) & 63] : "=")
        + (i + 2 < bytes.length ? B64[n & 63] : "=");
    }
    return out;
  }
  function base64Decode(text) {
    const clean = text.replace(/[\s=]/g, "");
    if (/[^A-Za-z0-9+/]/.test(clean) || clean.length % 4 === 1) {
      throw new TypeError("not base64: " + text.slice(0, 40));
    }
    const bytes = [];
    for (let i = 0; i < clean.length; i += 4) {
      const chunk = clean.slice(i, i + 4);
      let n = 0;
      for (let k = 0; k < 4; k++) n = (n << 6) | (k < chunk.length ? B64.indexOf(chunk[k]) : 0);
      bytes.push((n >> 16) & 0xff);
      if (chunk.length > 2) bytes.push((n >> 8) & 0xff);
      if (chunk.length > 3) bytes.push(n & 0xff);
    }
    return bytes;
  }

  // .NET's DateTime, DateTimeOffset and TimeSpan, in UTC, on the engine's clock ---------------
  const MS = { s: 1000, m: 60000, h: 3600000, d: 86400000 };
  const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  const pad = (value, width) => String(Math.trunc(Math.abs(value))).padStart(width, "0");
  function number(value, what) {
    const n = Number(value);
    if (!Number.isFinite(n)) throw new TypeError(what + " expects a number, got " + value);
    return n;
  }
  class TimeSpan {
    constructor(milliseconds) { this.TotalMilliseconds = number(milliseconds, "TimeSpan"); }
    static FromDays(n) { return new TimeSpan(number(n, "FromDays") * MS.d); }
    static FromHours(n) { return new TimeSpan(number(n, "FromHours") * MS.h); }
    static FromMinutes(n) { return new TimeSpan(number(n, "FromMinutes") * MS.m); }
    static FromSeconds(n) { return new TimeSpan(number(n, "FromSeconds") * MS.s); }
    static FromMilliseconds(n) { return new TimeSpan(number(n, "FromMilliseconds")); }
    static get Zero() { return new TimeSpan(0); }
    static Parse(text) {
      const match = /^\s*(-)?(?:(\d+)\.)?(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,7}))?)?\s*$/
        .exec(String(text));
      if (match === null) throw new TypeError("not a TimeSpan: " + text);
      const [, sign, d, h, m, s, f] = match;
      const ms = Number(d ?? 0) * MS.d + Number(h) * MS.h + Number(m) * MS.m
        + Number(s ?? 0) * MS.s + (f === undefined ? 0 : Number("0." + f) * 1000);
      return new TimeSpan(sign ? -ms : ms);
    }
    part(unit, modulo) {
      return Math.trunc(this.TotalMilliseconds / unit) % modulo;
    }
    get Days() { return Math.trunc(this.TotalMilliseconds / MS.d); }
    get Hours() { return this.part(MS.h, 24); }
    get Minutes() { return this.part(MS.m, 60); }
    get Seconds() { return this.part(MS.s, 60); }
    get Milliseconds() { return this.part(1, 1000); }
    get TotalDays() { return this.TotalMilliseconds / MS.d; }
    get TotalHours() { return this.TotalMilliseconds / MS.h; }
    get TotalMinutes() { return this.TotalMilliseconds / MS.m; }
    get TotalSeconds() { return this.TotalMilliseconds / MS.s; }
    Add(other) { return new TimeSpan(this.TotalMilliseconds + other.TotalMilliseconds); }
    Subtract(other) { return new TimeSpan(this.TotalMilliseconds - other.TotalMilliseconds); }
    Negate() { return new TimeSpan(-this.TotalMilliseconds); }
    Duration() { return new TimeSpan(Math.abs(this.TotalMilliseconds)); }
    // .NET's constant ("c") format: [-][d.]hh:mm:ss[.fffffff]
    ToString() {
      const ms = this.TotalMilliseconds;
      const days = Math.abs(this.Days);
      const fraction = Math.round(Math.abs(ms) % 1000 * 10000);
      return (ms < 0 ? "-" : "") + (days > 0 ? days + "." : "") + pad(this.Hours, 2) + ":"
        + pad(this.Minutes, 2) + ":" + pad(this.Seconds, 2)
        + (fraction > 0 ? "." + String(fraction).padStart(7, "0") : "");
    }
    toString() { return this.ToString(); }
    toJSON() { return this.ToString(); }
    valueOf() { return this.TotalMilliseconds; }
  }
  function daysInMonth(year, month) { return new Date(Date.UTC(year, month + 1, 0)).getUTCDate(); }
  const FORMAT_TOKENS =
    /yyyy|yy|MMMM|MMM|MM|M|dddd|ddd|dd|d|HH|H|hh|h|mm|m|ss|s|fff|ff|f|tt|zzz|K|'[^']*'|./g;
  const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December"];
  class DateTime {
    constructor(milliseconds) { this.epoch = number(milliseconds, "DateTime"); }
    static get Now() { return new this(readNow()); }
    static get UtcNow() { return new this(readNow()); }
    static get Today() { return new this(readNow()).Date; }
    static Parse(text) {
      const value = String(text).trim();
      const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(value) || !/T|\d:\d/.test(value)
        ? value : value + "Z");
      if (Number.isNaN(ms)) throw new TypeError("not a date: " + value);
      return new this(ms);
    }
    get js() { return new Date(this.epoch); }
    get Year() { return this.js.getUTCFullYear(); }
    get Month() { return this.js.getUTCMonth() + 1; }
    get Day() { return this.js.getUTCDate(); }
    get Hour() { return this.js.getUTCHours(); }
    get Minute() { return this.js.getUTCMinutes(); }
    get Second() { return this.js.getUTCSeconds(); }
    get Millisecond() { return this.js.getUTCMilliseconds(); }
    get DayOfWeek() { return DAYS[this.js.getUTCDay()]; }
    get DayOfYear() {
      return Math.floor((this.epoch - Date.UTC(this.Year, 0, 1)) / MS.d) + 1;
    }
    get Date() { return new this.constructor(this.epoch - (((this.epoch % MS.d) + MS.d) % MS.d)); }
    get TimeOfDay() { return new TimeSpan(((this.epoch % MS.d) + MS.d) % MS.d); }
    AddMilliseconds(n) { return new this.constructor(this.epoch + number(n, "AddMilliseconds")); }
    AddSeconds(n) { return this.AddMilliseconds(number(n, "AddSeconds") * MS.s); }
    AddMinutes(n) { return this.AddMilliseconds(number(n, "AddMinutes") * MS.m); }
    AddHours(n) { return this.AddMilliseconds(number(n, "AddHours") * MS.h); }
    AddDays(n) { return this.AddMilliseconds(number(n, "AddDays") * MS.d); }
    AddMonths(n) {
      const months = this.Year * 12 + this.Month - 1 + Math.trunc(number(n, "AddMonths"));
      const year = Math.floor(months / 12);
      const month = months - year * 12;
      const day = Math.min(this.Day, daysInMonth(year, month));
      return new this.constructor(Date.UTC(year, month, day) + this.TimeOfDay.TotalMilliseconds);
    }
    AddYears(n) { return this.AddMonths(Math.trunc(number(n, "AddYears")) * 12); }
    Add(span) { return this.AddMilliseconds(span.TotalMilliseconds); }
    Subtract(other) {
      if (other instanceof DateTime) return new TimeSpan(this.epoch - other.epoch);
      return this.AddMilliseconds(-other.TotalMilliseconds);
    }
    CompareTo(other) { return Math.sign(this.epoch - other.epoch); }
    Equals(other) { return other instanceof DateTime && other.epoch === this.epoch; }
    ToUniversalTime() { return this; }
    ToLocalTime() { return this; }
    ToString(format) {
      if (format === undefined || format === null || format === "o" || format === "O") {
        return this.js.toISOString();
      }
      const spec = String(format);
      if (spec === "s") return this.js.toISOString().slice(0, 19);
      if (spec === "u") return this.js.toISOString().slice(0, 19).replace("T", " ") + "Z";
      return spec.replace(FORMAT_TOKENS, (token) => {
        switch (token) {
          case "yyyy": return pad(this.Year, 4);
          case "yy": return pad(this.Year % 100, 2);
          case "MMMM": return MONTHS[this.Month - 1];
          case "MMM": return MONTHS[this.Month - 1].slice(0, 3);
          case "MM": return pad(this.Month, 2);
          case "M": return String(this.Month);
          case "dddd": return this.DayOfWeek;
          case "ddd": return this.DayOfWeek.slice(0, 3);
          case "dd": return pad(this.Day, 2);
          case "d": return String(this.Day);
          case "HH": return pad(this.Hour, 2);
          case "H": return String(this.Hour);
          case "hh": return pad(this.Hour % 12 || 12, 2);
          case "h": return String(this.Hour % 12 || 12);
          case "mm": return pad(this.Minute, 2);
          case "m": return String(this.Minute);
          case "ss": return pad(this.Second, 2);
          case "s": return String(this.Second);
          case "fff": return pad(this.Millisecond, 3);
          case "ff": return pad(Math.floor(this.Millisecond / 10), 2);
          case "f": return String(Math.floor(this.Millisecond / 100));
          case "tt": return this.Hour < 12 ? "AM" : "PM";
          case "zzz": return "+00:00";
          case "K": return "Z";
          default: return token.startsWith("'") ? token.slice(1, -1) : token;
        }
      });
    }
    toString() { return this.ToString(); }
    toJSON() { return this.ToString(); }
    valueOf() { return this.epoch; }
  }
  class DateTimeOffset extends DateTime {
    get Offset() { return TimeSpan.Zero; }
    get UtcDateTime() { return new DateTime(this.epoch); }
    get DateTime() { return new DateTime(this.epoch); }
    ToString(format) {
      return format === undefined || format === null
        ? this.js.toISOString().replace("Z", "+00:00") : super.ToString(format);
    }
  }

  // The helpers of broker.engine.expr.jsapi.HELPERS: [name, activity or null, value].
  // Hardened by lockdown (freezing them earlier would freeze the shared prototypes before
  // lockdown makes their methods overridable on one's own objects).
  const helpers = [/*HELPERS*/];
  const RESERVED = new Set(["eval", "arguments", "__elsaBody"]);
  const pascalize = (name) => name.replace(/(?:^|_| +)(.)/g, (_, c) => c.toUpperCase());
  const capitalised = (name) => name.charAt(0).toUpperCase() + name.slice(1);

  // `variables.X` reads and writes a variable, `input.X` reads an input. Their targets stay
  // empty: every operation goes through the evaluation, none leaves state in the shared object.
  function namesProxy(names, read, write) {
    const refuse = () => false;
    return new Proxy(Object.create(null), {
      get: (_, key) => (typeof key === "string" ? read(key) : undefined),
      set: (_, key, value) => {
        if (write === null || typeof key !== "string") return false;
        write(key, value);
        return true;
      },
      has: (_, key) => typeof key === "string" && names.includes(key),
      ownKeys: () => [...names],
      getOwnPropertyDescriptor: (_, key) => (typeof key === "string" && names.includes(key)
        ? { value: read(key), writable: write !== null, enumerable: true, configurable: true }
        : undefined),
      defineProperty: refuse,
      deleteProperty: refuse,
      preventExtensions: refuse,
      setPrototypeOf: refuse,
    });
  }

  function makeScope(spec) {
    const { variables, inputs, outputs, activity } = JSON.parse(spec);
    const scope = Object.create(null);
    const define = (key, descriptor) => {
      if (!RESERVED.has(key) && !(key in scope)) {
        Object.defineProperty(scope, key, { enumerable: true, ...descriptor });
      }
    };
    for (const [name, only, value] of helpers) {
      if (only === null || only === activity) define(name, { value });
    }
    const variablesProxy = namesProxy(variables, readVariable, writeVariable);
    const inputProxy = namesProxy(inputs, readInput, null);
    UNHARDENED.add(variablesProxy);
    UNHARDENED.add(inputProxy);
    define("variables", { value: variablesProxy });
    define("input", { value: inputProxy });
    for (const name of variables) {
      define(name, { get: () => readVariable(name), set: (value) => writeVariable(name, value) });
    }
    for (const name of variables) {
      for (const suffix of new Set([pascalize(name), name, capitalised(name)])) {
        define("get" + suffix, { value: () => readVariable(name) });
        define("set" + suffix, { value: (value) => { writeVariable(name, value); } });
      }
    }
    for (const name of inputs) {
      for (const suffix of new Set([pascalize(name), name, capitalised(name)])) {
        define("get" + suffix, { value: () => readInput(name) });
      }
    }
    for (const [label, names] of Object.entries(outputs)) {
      for (const suffix of new Set([label, pascalize(label)])) {
        define("getOutputFrom" + suffix, { value: () => readOutput(label, null) });
        for (const output of names) {
          define("get" + pascalize(output) + "From" + suffix,
            { value: () => readOutput(label, output) });
        }
      }
    }
    shapes.set(scope, harden({ variables: new Set(variables), inputs: new Set(inputs) }));
    return harden(scope);
  }

  // Workflow code is never pasted into a wrapper: it is evaluated as a script of its own (a
  // direct eval of the text as a value, in strict mode, inside `with (scope)`), or, when it
  // is a function body (Elsa allows `return` at the top), compiled as a function declaration
  // behind a `throw` (nothing in it can run) and accepted only when the engine's parse of
  // that declaration spans exactly the code: text that closes the function it is compiled in
  // is refused before any of it runs.
  const makeRunners = globalEval(
    "(function (scope) { with (scope) { return [\n" +
    "function () { \"use strict\"; return eval(arguments[0]); },\n" +
    "function () { var __elsaBody; try { eval(arguments[0]); }\n" +
    "  catch (error) { if (error !== arguments[1]) throw error; } return __elsaBody; }\n" +
    "]; } })");
  const fnToString = Function.prototype.toString;
  const BODY_HEAD = "function __elsaBody() {\"use strict\";\n";
  const runners = new WeakMap();
  const kinds = new Map();
  const KINDS_LIMIT = 512;

  function runnersOf(scope) {
    let found = runners.get(scope);
    if (found === undefined) {
      const [script, declare] = makeRunners(scope);
      found = { script: harden(script), declare, bodies: new Map() };
      runners.set(scope, found);
    }
    return found;
  }
  function kindOf(code) {
    let kind = kinds.get(code);
    if (kind !== undefined) return kind;
    try {
      // Parsing precedes execution: when the probe is what gets thrown, the code parsed as a
      // script and none of it ran.
      eval("throw PROBE;\n" + code);
    } catch (error) {
      if (error === PROBE) kind = "script";
      else if (!(error instanceof SyntaxError)) throw error;
      else kind = error;
    }
    if (kind !== "script") {
      const fn = bodyOf(runnersOf(EMPTY_SCOPE), code);
      if (fn === null) throw kind;  // neither a script nor a function body: the script's error
      kind = "body";
    }
    if (kinds.size >= KINDS_LIMIT) kinds.clear();
    kinds.set(code, kind);
    return kind;
  }
  function bodyOf(runner, code) {
    let fn = runner.bodies.get(code);
    if (fn !== undefined) return fn;
    const text = BODY_HEAD + code + "\n}";
    try {
      fn = runner.declare("throw arguments[1];\n" + text, PROBE);
    } catch (error) {
      if (error instanceof SyntaxError) return null;
      throw error;
    }
    if (typeof fn !== "function" || fnToString.call(fn) !== text) {
      throw new SyntaxError("the code closes the function it is compiled in");
    }
    fn = harden(fn);
    if (runner.bodies.size >= KINDS_LIMIT) runner.bodies.clear();
    runner.bodies.set(code, fn);
    return fn;
  }
  function evaluate(code, scope) {
    const runner = runnersOf(scope);
    if (kindOf(code) === "script") return runner.script(code);
    return bodyOf(runner, code)();
  }
  const EMPTY_SCOPE = Object.freeze(Object.create(null));

  function begin(code, scope, data) {
    current = { known: shapes.get(scope), data: JSON.parse(data), cache: new Map(),
      missing: [], result: undefined, state: new Map(), outcomes: null };
    try {
      current.result = evaluate(code, scope);
    } catch (error) {
      if (current.missing.length === 0) throw error;
    }
  }
  // Ends the evaluation: a number, boolean or null when that is the result and nothing is to
  // be written back (the common case, spared a JSON round trip), else JSON text
  // {r: result, w: [[name, value], ...], s: {correlationId?, name?}, o: [outcome, ...]}, or
  // {m: [[kind, key], ...]} for values not supplied.
  function finish() {
    const evaluation = active();
    current = null;
    if (evaluation.missing.length > 0) return JSON.stringify({ m: evaluation.missing });
    const writes = [];
    for (const [name, entry] of evaluation.cache) {
      if (entry.dirty || entry.json !== null) {
        const text = JSON.stringify(entry.value);
        if (entry.dirty || text !== entry.json) {
          writes.push([name, text === undefined ? null : JSON.parse(text)]);
        }
      }
    }
    const result = evaluation.result;
    const type = typeof result;
    const state = evaluation.state.size > 0 ? Object.fromEntries(evaluation.state) : null;
    const outcomes = evaluation.outcomes;
    if (writes.length === 0 && state === null && outcomes === null) {
      if (result === undefined || result === null) return null;
      if (type === "boolean") return result;
      if (type === "number") return Number.isFinite(result) ? result : null;
    }
    if (result !== null && (type === "object" || type === "function")
        && typeof result.then === "function") {
      throw new TypeError("the result is a Promise; asynchronous results are not supported");
    }
    return JSON.stringify({ r: result, w: writes, s: state, o: outcomes });
  }
  function run(code, scope, data) {
    begin(code, scope, data);
    return finish();
  }
  function abort() { current = null; }

  function harden(root) {
    const seen = new Set();
    const pending = [root];
    while (pending.length > 0) {
      const value = pending.pop();
      if (value === null || (typeof value !== "object" && typeof value !== "function")
          || seen.has(value) || UNHARDENED.has(value)) continue;
      seen.add(value);
      Object.freeze(value);
      pending.push(Object.getPrototypeOf(value));
      for (const key of Reflect.ownKeys(value)) {
        const descriptor = Object.getOwnPropertyDescriptor(value, key);
        if (descriptor === undefined) continue;
        if ("value" in descriptor) pending.push(descriptor.value);
        else pending.push(descriptor.get, descriptor.set);
      }
    }
    return root;
  }
  function allowOverride(target, key) {
    const descriptor = Object.getOwnPropertyDescriptor(target, key);
    if (descriptor === undefined || !("value" in descriptor) || !descriptor.configurable) return;
    const value = descriptor.value;
    Object.defineProperty(target, key, {
      get() { return value; },
      set(replacement) {
        if (this === target) {
          throw new TypeError("Cannot assign to read only property '" + String(key) + "'");
        }
        Object.defineProperty(this, key, {
          value: replacement, writable: true, enumerable: true, configurable: true });
      },
      enumerable: descriptor.enumerable,
      configurable: false,
    });
  }
  function lockdown() {
    for (const name of ["__elsaBegin", "__elsaFinish", "__elsaRun", "__elsaAbort", "__elsaScope",
                        "__elsaLockdown", "WeakRef", "FinalizationRegistry"]) {
      delete globalThis[name];
    }
    for (const key of Reflect.ownKeys(Object.prototype)) allowOverride(Object.prototype, key);
    const errors = [Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError,
      URIError, InternalError, AggregateError];
    for (const type of errors) {
      for (const key of ["name", "message", "toString", "constructor"]) {
        allowOverride(type.prototype, key);
      }
    }
    for (const target of [Function.prototype, Array.prototype]) {
      for (const key of ["toString", "constructor"]) allowOverride(target, key);
    }
    const hidden = [
      function* () {}, async function () {}, async function* () {}, async () => {},
      (function* () {})(), [][Symbol.iterator](), new Map()[Symbol.iterator](),
      new Set()[Symbol.iterator](), ""[Symbol.iterator](), /x/[Symbol.matchAll](""),
    ];
    for (const value of hidden) harden(Object.getPrototypeOf(value));
    harden(helpers);
    harden(globalThis);
  }

  globalThis.__elsaBegin = begin;
  globalThis.__elsaFinish = finish;
  globalThis.__elsaRun = run;
  globalThis.__elsaAbort = abort;
  globalThis.__elsaScope = makeScope;
  globalThis.__elsaLockdown = lockdown;
})();
