"""JavaScript expressions in a QuickJS sandbox, with Elsa's helper functions.

Each thread owns one QuickJS context (QuickJS runtimes must not move between threads) that is
reused across evaluations, because creating a context costs ~100 us while a cached evaluation
costs a few. Reuse is safe because the context is locked down before any workflow code runs:

- every intrinsic reachable from the global object (and the hidden ones: generator, async and
  iterator prototypes) is frozen, and so is the global object, so no evaluation can leave state
  behind for the next one (a write to an undeclared name is a ReferenceError, and so is
  ``Array.prototype.x = 1``); ``toString``/``constructor``/``name``/``message`` on the shared
  prototypes stay overridable on one's own objects (the "override mistake");
- workflow code runs in strict mode inside a function, so its declarations are local;
- Promise jobs are drained before the evaluation ends; results must not be Promises;
- the context has no module loader, no ``std``/``os``/``require``/``fetch`` and no Python
  callable: nothing in it can reach files, the network, processes or the host.

Names an expression sees: ``getVariable``, ``setVariable``, ``getInput``, ``getCorrelationId``,
``getWorkflowInstanceId``, ``getCurrentValue``, ``getOutputFrom(activity, output?)``,
``isNullOrWhiteSpace``, ``isNullOrEmpty``, ``newGuid``, ``parseGuid``, ``toJson``; every variable
as a global; ``getX()``/``setX(v)`` for each variable ``X`` (also with the first letter
capitalised), ``getX()`` for each input, and ``getOutputFromA()`` for each activity name ``A``.
Values cross the boundary as JSON (dates as ISO text, durations as seconds). Writes, by
``setVariable``, ``setX`` or assignment to the global, and in-place changes to an object variable
the script read (``getItems().push(1)``) reach ``Scope.set_variable`` once, when the evaluation
succeeds; a failing script writes nothing.

The engine is QuickJS-ng (the ``quickjs-ng`` package). Its limits are set before any of the
code is parsed, so they cover compilation as well as execution; the time limit interrupts the
regex engine too (a backtracking pattern stops at the limit). It is measured in process CPU time
per call into the context (Promise jobs share one wall-clock deadline): a loaded machine
stretches it in wall time, and CPU burnt by other threads of the process counts against it. A
workflow step as a whole is bounded by ``BROKER_STEP_TIME_LIMIT`` (the runtime's hard ceiling).

Workflow code is never pasted into a wrapper: it runs as a script of its own (a direct eval of
the text, strict, inside ``with (scope)``); Elsa's function-body form (``return`` at the top) is
compiled as a function declaration behind a ``throw`` and used only when the engine's own parse
of it spans exactly the code, so text written to close a wrapper is refused before any of it
runs.

Code is a script whose completion value is the result (``1 + 2``, a template literal,
``var a = 1; a + 1``), or, as Elsa allows, one that returns from its top level. Errors, time and
memory limits raise ``ExpressionError`` naming the activity and the expression.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import quickjs

from broker.engine.jsapi import HELPERS, pascalize
from broker.engine.scope import Scope
from broker.errors import ExpressionError

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIME_LIMIT",
    "ScriptResult",
    "evaluate_javascript",
    "run_script",
]

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT = 1.0  # seconds; BROKER_JS_TIME_LIMIT
DEFAULT_MEMORY_LIMIT = 32 * 1024 * 1024  # bytes; BROKER_JS_MEMORY_LIMIT

_EXPRESSION_PREVIEW = 200
_SHAPE_CACHE_SIZE = 128
# A sandbox is replaced after this many evaluations, bounding whatever a long-lived runtime
# accumulates (atoms, fragmentation) without measurable cost.
_EVALUATIONS_PER_SANDBOX = 20_000

_BOOTSTRAP_TEMPLATE = r"""
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

  // The helpers of broker.engine.jsapi.HELPERS: [name, activity or null, value].
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
"""


_BOOTSTRAP = _BOOTSTRAP_TEMPLATE.replace(
    "/*HELPERS*/",
    ",\n".join(
        f"[{json.dumps(helper.name)}, {json.dumps(helper.activity)}, ({helper.source})]"
        for helper in HELPERS
        if helper.source is not None
    ),
)


def evaluate_javascript(
    code: str,
    scope: Scope,
    *,
    time_limit: float = DEFAULT_TIME_LIMIT,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
) -> Any:
    """Run ``code`` against ``scope`` and return its result as a JSON-like Python value.

    ``time_limit`` (seconds) bounds the whole evaluation, Promise jobs included;
    ``memory_limit`` (bytes) bounds the sandbox's heap. Variables the script assigned or mutated
    (and the instance's correlation id and name, ``setCorrelationId``/``setWorkflowInstanceName``)
    are written back through ``scope`` only when it succeeds. Raises ``ExpressionError``.
    """
    return run_script(code, scope, time_limit=time_limit, memory_limit=memory_limit).result


@dataclasses.dataclass(frozen=True)
class ScriptResult:
    """What a script produced: its value, and the outcomes it chose (``setOutcome``), if any."""

    result: Any
    outcomes: tuple[str, ...] | None = None


def run_script(
    code: str,
    scope: Scope,
    *,
    activity_type: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
) -> ScriptResult:
    """``evaluate_javascript`` for the script of an activity of ``activity_type``, which also
    sees that activity's helpers (``RunJavaScript``'s ``setOutcome``/``setOutcomes``)."""
    sandbox = _acquire(memory_limit)
    try:
        return sandbox.run(code, scope, time_limit, activity_type)
    finally:
        sandbox.evaluations += 1
        if sandbox.broken or sandbox.evaluations >= _EVALUATIONS_PER_SANDBOX:
            _discard(sandbox)


_local = threading.local()


def _acquire(memory_limit: int) -> _Sandbox:
    sandbox: _Sandbox | None = getattr(_local, "sandbox", None)
    if sandbox is None:
        sandbox = _Sandbox()
        _local.sandbox = sandbox
    elif sandbox.busy:
        # Re-entered while evaluating (a Scope whose getter evaluates expressions itself): use
        # a private sandbox rather than disturb the one mid-evaluation.
        sandbox = _Sandbox()
    sandbox.set_memory_limit(memory_limit)
    return sandbox


def _discard(sandbox: _Sandbox) -> None:
    if getattr(_local, "sandbox", None) is sandbox:
        _local.sandbox = None


_FLAGS = ("current", "workflow", "last", "now")


@dataclasses.dataclass(frozen=True)
class _Needs:
    """What an evaluation of one expression text supplies to the script: the names seen in its
    text, plus what earlier runs asked for that was not supplied (``getVariable(name)``)."""

    names: frozenset[str]
    activities: frozenset[str]
    flags: frozenset[str] = frozenset()  # of _FLAGS: the loop item, the instance, ...
    learned: frozenset[tuple[str, str]] = frozenset()
    # Set once the script was seen to queue Promise jobs: it then runs in two steps, the jobs
    # drained in between while the evaluation is still open.
    asynchronous: bool = False

    def learn(self, misses: Iterable[tuple[str, str]]) -> _Needs:
        learned = self.learned | frozenset(misses)
        return dataclasses.replace(
            self,
            names=self.names | {key for kind, key in learned if kind in ("variable", "input")},
            flags=self.flags | {kind for kind, _ in learned if kind in _FLAGS},
            learned=learned,
        )


_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_OUTPUT_ACCESSOR = re.compile(r"get\w*?From(\w+)")
_needs_cache: dict[str, _Needs] = {}
_NEEDS_CACHE_SIZE = 4096


def _needs_of(code: str) -> _Needs:
    needs = _needs_cache.get(code)
    if needs is not None:
        return needs
    tokens = set(_IDENTIFIER.findall(code))
    names = set(tokens)
    activities = set(tokens)
    for token in tokens:
        if token.startswith(("get", "set")) and len(token) > 3:
            rest = token[3:]
            names.update((rest, rest[0].lower() + rest[1:]))
        match = _OUTPUT_ACCESSOR.fullmatch(token)
        if match is not None:
            # get<Output>From<Activity>: the activity may itself contain "From"
            rest = token
            while (at := rest.find("From", 3)) >= 0:
                rest = rest[at + 4 :]
                if rest:
                    activities.add(rest)
    flags = set()
    if "getCurrentValue" in tokens:
        flags.add("current")
    if "getLastResult" in tokens:
        flags.add("last")
    if any(token.startswith(("getWorkflow", "setWorkflow")) for token in tokens):
        flags.add("workflow")
    if tokens & {"DateTime", "DateTimeOffset"}:
        flags.add("now")
    needs = _Needs(frozenset(names), frozenset(activities), frozenset(flags))
    _remember(code, needs)
    return needs


def _remember(code: str, needs: _Needs) -> None:
    if len(_needs_cache) >= _NEEDS_CACHE_SIZE:
        _needs_cache.clear()  # rare (thousands of distinct texts); cheaper than an LRU per hit
    _needs_cache[code] = needs


class _Sandbox:
    """One locked-down QuickJS context and the caches that make its reuse cheap.

    No Python callable is registered in the context (the binding refuses calls into Python
    while a time limit is set, and it keeps the sandbox closed): the values a script may read
    are supplied up front as JSON, chosen from the identifiers in its text; a script that asks
    for one that was not supplied is run again with it, which is safe because its writes are
    applied only after a successful run.
    """

    def __init__(self) -> None:
        _check_engine()
        self.evaluations = 0
        self.busy = False
        # Set after a time, memory or stack limit hit or an internal error: QuickJS recovers
        # from those, but a fresh context costs little and rules out a half-updated one.
        self.broken = False
        self._time_limit = -1.0
        self._memory_limit = -1
        self._shapes: dict[tuple[Any, ...], quickjs.Object] = {}
        self._context = quickjs.Context()
        self._context.eval(_BOOTSTRAP)
        get = self._context.get
        self._begin = get("__elsaBegin")
        self._finish = get("__elsaFinish")
        self._run = get("__elsaRun")
        self._abort = get("__elsaAbort")
        self._make_scope = get("__elsaScope")
        get("__elsaLockdown")()

    def set_memory_limit(self, limit: int) -> None:
        if limit != self._memory_limit:
            self._context.set_memory_limit(limit)
            self._memory_limit = limit

    def _set_time_limit(self, limit: float) -> None:
        if limit != self._time_limit:
            self._context.set_time_limit(limit)
            self._time_limit = limit

    def run(
        self, code: str, scope: Scope, time_limit: float, activity_type: str | None = None
    ) -> ScriptResult:
        self.busy = True
        try:
            outcome = self._run_to_completion(code, scope, time_limit, activity_type)
        finally:
            self.busy = False
        if outcome is None or isinstance(outcome, bool | int | float):
            return ScriptResult(outcome)
        parsed: dict[str, Any] = json.loads(outcome)
        for name, value in parsed["w"]:
            try:
                scope.set_variable(name, value)
            except Exception as exc:
                raise _fail(scope, code, f"setting variable {name!r}: {exc}", time_limit) from exc
        for key, value in (parsed.get("s") or {}).items():
            scope.set_workflow_info(key, value)
        outcomes = parsed.get("o")
        return ScriptResult(
            parsed.get("r"), tuple(str(o) for o in outcomes) if outcomes is not None else None
        )

    def _run_to_completion(
        self, code: str, scope: Scope, time_limit: float, activity_type: str | None
    ) -> Any:
        deadline = time.monotonic() + time_limit
        needs = _needs_of(code)
        shape = self._scope_object(scope, activity_type)
        # The limits hold before any of the code is parsed: compiling is part of the evaluation.
        self._set_time_limit(time_limit)
        try:
            for _attempt in range(_MAX_ATTEMPTS):
                data = self._supply(code, scope, needs, time_limit)
                if needs.asynchronous:
                    self._begin(code, shape, data)
                    self._drain(deadline)
                    outcome = self._finish()
                else:
                    outcome = self._run(code, shape, data)
                    if self._context.execute_pending_job():
                        # Promise jobs ran after the evaluation closed: drain them (they fail,
                        # seeing no evaluation) and run it again in two steps.
                        self._drain(deadline)
                        needs = dataclasses.replace(needs, asynchronous=True)
                        _remember(code, needs)
                        continue
                if not (isinstance(outcome, str) and outcome.startswith('{"m":')):
                    return outcome
                needs = needs.learn((str(kind), str(key)) for kind, key in json.loads(outcome)["m"])
                _remember(code, needs)
                self._set_time_limit(max(deadline - time.monotonic(), 0.001))
        except quickjs.JSException as exc:
            message = str(exc)
            if message.startswith("InternalError") or isinstance(exc, quickjs.StackOverflow):
                self.broken = True
            else:
                self._close(deadline)
            raise _fail(scope, code, message, time_limit) from exc
        raise _fail(scope, code, "the script kept asking for values not supplied", time_limit)

    def _close(self, deadline: float) -> None:
        """After a failed evaluation: end it, and run its queued Promise jobs now (they see
        no evaluation) so that none of them can run inside the next one."""
        try:
            self._abort()
            self._drain(deadline)
        except quickjs.JSException:
            self.broken = True

    def _drain(self, deadline: float) -> None:
        while self._context.execute_pending_job():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.broken = True
                raise quickjs.JSException("InternalError: interrupted")
            self._set_time_limit(remaining)

    def _supply(self, code: str, scope: Scope, needs: _Needs, time_limit: float) -> str:
        try:
            return _supply(scope, needs)
        except (TypeError, ValueError) as exc:
            raise _fail(
                scope, code, f"a value cannot be passed to JavaScript: {exc}", time_limit
            ) from exc

    def _scope_object(self, scope: Scope, activity_type: str | None) -> quickjs.Object:
        outputs = tuple(
            (label, tuple(_outputs_of(scope, label))) for label in scope.activity_names()
        )
        key = (
            tuple(scope.variable_names()),
            tuple(scope.input_names()),
            outputs,
            activity_type,
        )
        shape = self._shapes.get(key)
        if shape is None:
            spec = {
                "variables": key[0],
                "inputs": key[1],
                "outputs": dict(outputs),
                "activity": activity_type,
            }
            shape = self._make_scope(json.dumps(spec))
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape


def _outputs_of(scope: Scope, activity: str) -> Iterable[str]:
    try:
        return list(scope.activity_outputs(activity))
    except KeyError:
        return ()


_MAX_ATTEMPTS = 4
_engine_checked = False


def _check_engine() -> None:
    """Refuse to run on the old ``quickjs`` package (a 2021 QuickJS whose time limit misses the
    regex engine): it installs the same module name, and an upgraded environment may still
    load its binary."""
    global _engine_checked
    if _engine_checked:
        return
    if quickjs.Context().eval("typeof Iterator") != "function":
        raise RuntimeError(
            "the JavaScript engine is the old quickjs package, not quickjs-ng: run "
            "`pip uninstall -y quickjs quickjs-ng && pip install quickjs-ng`"
        )
    _engine_checked = True


def _supply(scope: Scope, needs: _Needs) -> str:
    """The JSON text of the values this evaluation may read."""
    data: dict[str, Any] = {"c": scope.correlation_id, "w": scope.workflow_instance_id}
    names = needs.names
    variables: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    if names:
        for name in scope.variable_names():
            if name in names and name not in variables:
                with contextlib.suppress(KeyError):
                    variables[name] = scope.get_variable(name)
        for name in scope.input_names():
            if name in names:
                with contextlib.suppress(KeyError):
                    inputs[name] = scope.get_input(name)
        activities = needs.activities
        for label in scope.activity_names():
            if label in activities or pascalize(label) in activities:
                with contextlib.suppress(KeyError):
                    outputs[label] = dict(scope.activity_outputs(label))
    for kind, key in needs.learned:
        if kind == "output" and key not in outputs:
            try:
                outputs[key] = dict(scope.activity_outputs(key))
            except KeyError:
                outputs[key] = None
    data["v"] = variables
    data["i"] = inputs
    data["o"] = outputs
    flags = needs.flags
    if flags:
        if "current" in flags:
            data["cur"] = scope.current_value()
        if "workflow" in flags:
            data["wf"] = dict(scope.workflow_info())
        if "last" in flags:
            data["last"] = scope.last_result()
        if "now" in flags:
            now = scope.now()
            if now.tzinfo is None:
                now = now.replace(tzinfo=datetime.UTC)
            data["now"] = now.timestamp() * 1000
    return _ENCODER.encode(data)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), allow_nan=False)


_STACK_OVERFLOW = ("InternalError: stack overflow", "RangeError: Maximum call stack size exceeded")


def _fail(scope: Scope, code: str, message: str, time_limit: float) -> ExpressionError:
    """An ExpressionError for a JavaScript failure, with QuickJS's stack trace trimmed."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if first_line == "InternalError: interrupted":
        first_line = f"time limit of {time_limit:g}s exceeded"
    elif first_line in ("InternalError: out of memory", "null"):
        # QuickJS reports an allocation failure inside its error machinery as a bare null.
        first_line = "memory limit exceeded"
    elif first_line in _STACK_OVERFLOW:
        first_line = "stack overflow (recursion too deep)"
    return ExpressionError(
        f"{first_line} (in: {preview(code, 80)})",
        activity_id=scope.activity_id,
        expression_type="JavaScript",
        expression=preview(code),
    )


def preview(code: str, limit: int = _EXPRESSION_PREVIEW) -> str:
    """The expression text as errors show it: whitespace collapsed, at most ``limit`` chars."""
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
