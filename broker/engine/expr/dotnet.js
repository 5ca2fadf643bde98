// .NET's types as Elsa's Jint engine exposes them to workflow scripts, inlined into the sandbox's
// bootstrap (broker/engine/expr/sandbox.js, at its DOTNET marker) by
// broker/engine/expr/javascript.py: GUIDs, UTF-8 and base64, DateTime, DateTimeOffset, TimeSpan,
// and the types of Elsa's type registry (ConfigureEngineWithCommonTypes and the workflow variable
// types). It runs inside the bootstrap's function and reads the engine's clock through readNow.

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
    if (!GUID.test(value)) throw new TypeError("Unrecognized Guid format.");
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

  // The types of Elsa's type registry --------------------------------------------------------
  // System.Guid: kept as its 32 hex digits; crosses back to the workflow as its "D" text.
  const NET_ORDER = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];  // ToByteArray's
  class Guid {
    #digits;
    constructor(value) {
      if (value === undefined || value === null) {
        this.#digits = "0".repeat(32);
      } else if (typeof value === "object" && typeof value.length === "number") {
        const bytes = Array.from(value, Number);
        if (bytes.length !== 16) {
          throw new TypeError("Byte array for Guid must be exactly 16 bytes long.");
        }
        this.#digits = NET_ORDER.map((i) => ((bytes[i] & 0xff) + 0x100).toString(16).slice(1))
          .join("");
      } else {
        this.#digits = parseGuidText(value).replace(/-/g, "");
      }
    }
    static get Empty() { return new Guid(); }
    static NewGuid() { return new Guid(newGuidText()); }
    static Parse(text) { return new Guid(String(text)); }
    ToString(format) {
      const d = this.#digits;
      const dashed = [d.slice(0, 8), d.slice(8, 12), d.slice(12, 16), d.slice(16, 20),
        d.slice(20)].join("-");
      switch (format === undefined || format === null || format === "" ? "D"
        : String(format).toUpperCase()) {
        case "D": return dashed;
        case "N": return d;
        case "B": return "{" + dashed + "}";
        case "P": return "(" + dashed + ")";
        default: throw new TypeError("Format string can be only \"D\", \"d\", \"N\", \"n\", "
          + "\"P\", \"p\", \"B\", \"b\", \"X\" or \"x\".");
      }
    }
    ToByteArray() {
      const bytes = [];
      for (const i of NET_ORDER) bytes.push(parseInt(this.#digits.slice(i * 2, i * 2 + 2), 16));
      return bytes;
    }
    Equals(other) { return other instanceof Guid && other.#digits === this.#digits; }
    CompareTo(other) {
      const theirs = other instanceof Guid ? other.#digits : new Guid(other).#digits;
      return this.#digits === theirs ? 0 : this.#digits < theirs ? -1 : 1;
    }
    toString() { return this.ToString(); }
    toJSON() { return this.ToString(); }
  }

  // System.Random: Next, NextInt64, NextDouble, NextSingle; a seed gives a repeatable sequence
  // (not .NET's sequence for that seed).
  function seededRandom(seed) {
    let state = Math.trunc(number(seed, "Random")) >>> 0;
    return () => {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  function between(sample, low, high, name) {
    if (high === undefined) {
      if (low === undefined) return Math.floor(sample * 2147483647);
      const max = number(low, name);
      if (max < 0) throw new RangeError("'maxValue' must be greater than or equal to zero.");
      return Math.floor(sample * Math.trunc(max));
    }
    const min = Math.trunc(number(low, name));
    const max = Math.trunc(number(high, name));
    if (min > max) throw new RangeError("'minValue' cannot be greater than maxValue.");
    return min + Math.floor(sample * (max - min));
  }
  class Random {
    #sample;
    constructor(seed) { this.#sample = seed === undefined ? Math.random : seededRandom(seed); }
    static get Shared() { return new Random(); }
    Next(low, high) { return between(this.#sample(), low, high, "Next"); }
    NextInt64(low, high) { return between(this.#sample(), low, high, "NextInt64"); }
    NextDouble() { return this.#sample(); }
    NextSingle() { return Math.fround(this.#sample()); }
  }

  // Elsa's LogPersistenceMode: an enum, whose members scripts see as their names (Jint's
  // EnumConversionMode.String, as Elsa configures it).
  class LogPersistenceMode {
    constructor() { throw new TypeError("LogPersistenceMode is an enum: use its members"); }
    static Inherit = "Inherit";
    static Include = "Include";
    static Exclude = "Exclude";
  }

  // System.Decimal's static members over JavaScript numbers (Jint hands a decimal to scripts as a
  // number); Round rounds the number as written in decimal, half to even unless told otherwise.
  function roundDecimal(value, decimals, awayFromZero) {
    const n = number(value, "Round");
    const places = Math.trunc(number(decimals ?? 0, "Round"));
    if (places < 0 || places > 28) {
      throw new RangeError("Decimal can only round to between 0 and 28 digits of precision.");
    }
    const text = Math.abs(n).toString();
    if (/e/i.test(text)) return n;
    const [whole, fraction = ""] = text.split(".");
    if (fraction.length <= places) return n;
    let kept = BigInt(whole + fraction.slice(0, places));
    const next = fraction.charCodeAt(places) - 48;
    const rest = /[1-9]/.test(fraction.slice(places + 1));
    if (next > 5 || (next === 5 && (rest || awayFromZero || kept % 2n === 1n))) kept += 1n;
    const digits = kept.toString().padStart(places + 1, "0");
    const rounded = Number(places === 0 ? digits
      : digits.slice(0, digits.length - places) + "." + digits.slice(digits.length - places));
    return n < 0 ? -rounded : rounded;
  }
  const decimalOf = (value, what) => number(value, "Decimal." + what);
  class Decimal {
    constructor() { throw new TypeError("Decimal values are numbers: use Decimal's methods"); }
    static Zero = 0;
    static One = 1;
    static MinusOne = -1;
    static MaxValue = 79228162514264337593543950335;
    static MinValue = -79228162514264337593543950335;
    static Parse(text) {
      const value = String(text).trim();
      const n = Number(value.replace(/,/g, ""));
      if (value === "" || !Number.isFinite(n)) {
        throw new TypeError("The input string '" + text + "' was not in a correct format.");
      }
      return n;
    }
    static Round(value, decimals, mode) {
      if (typeof decimals === "string") [decimals, mode] = [0, decimals];
      return roundDecimal(value, decimals, mode === 1 || mode === "AwayFromZero");
    }
    static Floor(value) { return Math.floor(decimalOf(value, "Floor")); }
    static Ceiling(value) { return Math.ceil(decimalOf(value, "Ceiling")); }
    static Truncate(value) { return Math.trunc(decimalOf(value, "Truncate")); }
    static Negate(value) { return -decimalOf(value, "Negate"); }
    static Add(a, b) { return decimalOf(a, "Add") + decimalOf(b, "Add"); }
    static Subtract(a, b) { return decimalOf(a, "Subtract") - decimalOf(b, "Subtract"); }
    static Multiply(a, b) { return decimalOf(a, "Multiply") * decimalOf(b, "Multiply"); }
    static Divide(a, b) {
      if (decimalOf(b, "Divide") === 0) throw new RangeError("Attempted to divide by zero.");
      return decimalOf(a, "Divide") / decimalOf(b, "Divide");
    }
    static Remainder(a, b) {
      if (decimalOf(b, "Remainder") === 0) throw new RangeError("Attempted to divide by zero.");
      return decimalOf(a, "Remainder") % decimalOf(b, "Remainder");
    }
    static Compare(a, b) { return Math.sign(decimalOf(a, "Compare") - decimalOf(b, "Compare")); }
    static ToDouble(value) { return decimalOf(value, "ToDouble"); }
    static ToInt32(value) { return Math.trunc(decimalOf(value, "ToInt32")); }
    static ToInt64(value) { return Math.trunc(decimalOf(value, "ToInt64")); }
  }

  // ExpandoObject, System.Text.Json's JsonNode, JsonObject and JsonElement, and Stream: the
  // workflow variable types. Their values are JSON in the broker, so they are plain objects here.
  class ExpandoObject {}
  class JsonNode {
    constructor() { throw new TypeError("Cannot create an abstract class."); }
    static Parse(text) { return JSON.parse(String(text)); }
  }
  class JsonObject {
    constructor(entries) {
      for (const [key, value] of entries === undefined || entries === null ? []
        : Array.isArray(entries) ? entries : Object.entries(entries)) {
        this[key] = value;
      }
    }
  }
  class JsonElement {}
  class Stream {
    constructor() { throw new TypeError("Cannot create an abstract class."); }
  }
