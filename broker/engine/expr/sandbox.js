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
  const UNHARDENED = new WeakSet();  // the per-shape proxies (namesProxy), the global object
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

  /*DOTNET*/

  // The helpers of broker.engine.expr.jsapi.HELPERS: [name, activity or null, value, kind].
  // Hardened by lockdown (freezing them earlier would freeze the shared prototypes before
  // lockdown makes their methods overridable on one's own objects).
  const helpers = [/*HELPERS*/];
  const RESERVED = new Set(["eval", "arguments", "__elsaBody"]);
  const pascalize = (name) => name.replace(/(?:^|_| +)(.)/g, (_, c) => c.toUpperCase());
  const capitalised = (name) => name.charAt(0).toUpperCase() + name.slice(1);
  const defineProperty = Object.defineProperty;
  const deleteProperty = Reflect.deleteProperty;
  const ownKeys = Reflect.ownKeys;
  const getPrototypeOf = Object.getPrototypeOf;
  const isExtensible = Object.isExtensible;

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

  // What an evaluation installs on the global object, as Elsa's Jint engine has it: functions
  // writable, configurable and not enumerable (Jint's SetValue of a delegate), types and
  // `variables` enumerable. A shape lists them for one set of variables, inputs, outputs and
  // activity type; where two share a name the later one wins, in Elsa's order: the type
  // registry, RunJavaScript's functions, the common functions, `variables`, then the accessors
  // of the variables, of the inputs and of the outputs (ConfigureEngineWithVariablesAndInput-
  // OutputAccessors overwrites what came before it). So an author's variable always wins over a
  // built-in name. The broker's own additions (`input`, `getOutputFrom<Activity>`, each
  // variable as a global of its name) come first, so they never hide any of Elsa's names.
  const NO_ARGS = Object.freeze(Object.create(null));
  const functionEntry = (value) => ({ value, writable: true, enumerable: false,
    configurable: true });
  const valueEntry = (value) => ({ value, writable: true, enumerable: true, configurable: true });
  function makeScope(spec) {
    const { variables, inputs, outputs, activity } = JSON.parse(spec);
    const entries = new Map();
    const put = (name, entry) => {
      if (!RESERVED.has(name) && !BASELINE.has(name)) entries.set(name, harden(entry));
    };
    const variablesProxy = namesProxy(variables, readVariable, writeVariable);
    const inputProxy = namesProxy(inputs, readInput, null);
    UNHARDENED.add(variablesProxy);
    UNHARDENED.add(inputProxy);
    put("input", valueEntry(inputProxy));
    for (const [label] of Object.entries(outputs)) {
      for (const suffix of new Set([label, pascalize(label)])) {
        put("getOutputFrom" + suffix, functionEntry(() => readOutput(label, null)));
      }
    }
    for (const name of variables) {
      put(name, { get: () => readVariable(name), set: (value) => writeVariable(name, value),
        enumerable: false, configurable: true });
    }
    // An expression's `args` (JavaScriptExpressionHandler: the evaluator options' arguments,
    // which no activity of the broker passes), not RunJavaScript's script.
    if (activity === null) put("args", valueEntry(NO_ARGS));
    for (const [name, only, value, kind] of helpers) {
      if (only === null || only === activity) {
        put(name, kind === "type" ? valueEntry(value) : functionEntry(value));
      }
    }
    put("variables", valueEntry(variablesProxy));
    for (const name of variables) {
      for (const suffix of new Set([pascalize(name), name, capitalised(name)])) {
        put("get" + suffix, functionEntry(() => readVariable(name)));
        put("set" + suffix, functionEntry((value) => { writeVariable(name, value); }));
      }
    }
    for (const name of inputs) {
      for (const suffix of new Set([pascalize(name), name, capitalised(name)])) {
        put("get" + suffix, functionEntry(() => readInput(name)));
      }
    }
    for (const [label, names] of Object.entries(outputs)) {
      for (const suffix of new Set([label, pascalize(label)])) {
        for (const output of names) {
          put("get" + pascalize(output) + "From" + suffix,
            functionEntry(() => readOutput(label, output)));
        }
      }
    }
    return { known: harden({ variables: new Set(variables), inputs: new Set(inputs) }),
      entries: harden([...entries]), plans: new Map() };
  }

  // An evaluation installs what its text names; text that can reach a global without naming it
  // (globalThis, eval, the Function constructor, `this`) gets all of them, as in Elsa
  // (GetReferencedGlobalsFilter).
  const WORD = /[A-Za-z_$][\w$]*/g;
  const DYNAMIC = ["globalThis", "eval", "Function", "this"];
  const PLANS_LIMIT = 256;
  function planOf(shape, code) {
    let plan = shape.plans.get(code);
    if (plan !== undefined) return plan;
    const words = new Set(code.match(WORD));
    plan = DYNAMIC.some((word) => words.has(word)) ? shape.entries
      : shape.entries.filter(([name]) => words.has(name));
    if (shape.plans.size >= PLANS_LIMIT) shape.plans.clear();
    shape.plans.set(code, plan);
    return plan;
  }

  // The global object is restored after every evaluation: what was installed is removed, and
  // so is anything the script added (a sloppy-mode assignment, `var` in an indirect eval,
  // globalThis.x = ...). The baseline's own properties are frozen, so a count of the global's
  // keys tells whether anything was added. A global that cannot be restored (a property made
  // non-configurable, the object made non-extensible) is an InternalError: the host then
  // discards the whole sandbox.
  let BASELINE = new Set();
  let BASE_COUNT = 0;
  let BASE_PROTO = null;
  let installed = [];
  function install(plan) {
    uninstall();
    installed = plan;
    for (const [name, entry] of plan) defineProperty(globalThis, name, entry);
  }
  function uninstall() {
    const names = installed;
    installed = [];
    for (const [name] of names) {
      if (!deleteProperty(globalThis, name)) unrestorable();
    }
  }
  function reset() {
    uninstall();
    if (ownKeys(globalThis).length === BASE_COUNT && getPrototypeOf(globalThis) === BASE_PROTO
        && isExtensible(globalThis)) return;
    if (!isExtensible(globalThis) || !Reflect.setPrototypeOf(globalThis, BASE_PROTO)) {
      unrestorable();
    }
    for (const key of ownKeys(globalThis)) {
      if (!BASELINE.has(key) && !deleteProperty(globalThis, key)) unrestorable();
    }
  }
  function unrestorable() {
    throw new InternalError("the sandbox's global object cannot be restored");
  }

  // Workflow code is never pasted into a wrapper: it is evaluated as a script of its own (a
  // direct eval of the text, in sloppy mode as Jint runs it, inside a function so that its
  // declarations stay local), or, when it is a function body (Elsa allows `return` at the
  // top), compiled as a function declaration behind a `throw` (nothing in it can run) and
  // accepted only when the engine's parse of that declaration spans exactly the code: text
  // that closes the function it is compiled in is refused before any of it runs. Both runners
  // are made at the global scope, so the code sees the globals and nothing of this bootstrap.
  const [runScript, declare] = globalEval(
    "[function () { return eval(arguments[0]); },\n" +
    "function () { var __elsaBody; try { eval(arguments[0]); }\n" +
    "  catch (error) { if (error !== arguments[1]) throw error; } return __elsaBody; }]");
  const fnToString = Function.prototype.toString;
  const BODY_HEAD = "function __elsaBody() {\n";
  const kinds = new Map();
  const bodies = new Map();
  const KINDS_LIMIT = 512;

  function kindOf(code) {
    let kind = kinds.get(code);
    if (kind !== undefined) return kind;
    try {
      // Parsing precedes execution: when the probe is what gets thrown, the code parsed as a
      // script and none of it ran.
      declare("throw arguments[1];\n" + code, PROBE);
      kind = "script";
    } catch (error) {
      if (!(error instanceof SyntaxError)) throw error;
      kind = error;
    }
    if (kind !== "script") {
      const fn = bodyOf(code);
      if (fn === null) throw kind;  // neither a script nor a function body: the script's error
      kind = "body";
    }
    if (kinds.size >= KINDS_LIMIT) kinds.clear();
    kinds.set(code, kind);
    return kind;
  }
  function bodyOf(code) {
    let fn = bodies.get(code);
    if (fn !== undefined) return fn;
    const text = BODY_HEAD + code + "\n}";
    try {
      fn = declare("throw arguments[1];\n" + text, PROBE);
    } catch (error) {
      if (error instanceof SyntaxError) return null;
      throw error;
    }
    if (typeof fn !== "function" || fnToString.call(fn) !== text) {
      throw new SyntaxError("the code closes the function it is compiled in");
    }
    fn = harden(fn);
    if (bodies.size >= KINDS_LIMIT) bodies.clear();
    bodies.set(code, fn);
    return fn;
  }
  function evaluate(code) {
    if (kindOf(code) === "script") return runScript(code);
    return bodyOf(code)();
  }

  function begin(code, shape, data) {
    current = { known: shape.known, data: JSON.parse(data), cache: new Map(),
      missing: [], result: undefined, state: new Map(), outcomes: null };
    install(planOf(shape, code));
    try {
      current.result = evaluate(code);
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
  // The host's entry points: each leaves the global object as it found it.
  function run(code, shape, data) {
    try {
      begin(code, shape, data);
      return finish();
    } finally {
      current = null;
      reset();
    }
  }
  function end() {
    try {
      return finish();
    } finally {
      current = null;
      reset();
    }
  }
  function abort() {
    current = null;
    reset();
  }

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
    for (const name of ["__elsaBegin", "__elsaFinish", "__elsaRun", "__elsaAbort", "__elsaReset",
                        "__elsaScope", "__elsaLockdown", "WeakRef", "FinalizationRegistry"]) {
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
    harden([runScript, declare]);
    // The global object stays extensible (scripts may add globals for their own evaluation,
    // which reset removes), but every property it has now is frozen, and so is its value.
    UNHARDENED.add(globalThis);
    for (const key of ownKeys(globalThis)) {
      const descriptor = Object.getOwnPropertyDescriptor(globalThis, key);
      if ("value" in descriptor) {
        harden(descriptor.value);
        defineProperty(globalThis, key, { writable: false, configurable: false });
      } else {
        harden([descriptor.get, descriptor.set]);
        defineProperty(globalThis, key, { configurable: false });
      }
    }
    harden(getPrototypeOf(globalThis));
    BASELINE = new Set(ownKeys(globalThis));
    BASE_COUNT = BASELINE.size;
    BASE_PROTO = getPrototypeOf(globalThis);
  }

  globalThis.__elsaBegin = begin;
  globalThis.__elsaFinish = end;
  globalThis.__elsaRun = run;
  globalThis.__elsaAbort = abort;
  globalThis.__elsaReset = reset;
  globalThis.__elsaScope = makeScope;
  globalThis.__elsaLockdown = lockdown;
})();
